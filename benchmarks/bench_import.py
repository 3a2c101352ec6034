"""Cost of ``import pytest_ddtree.plugin`` (what every pytest run pays), best of N.

Usage: ``python benchmarks/bench_import.py [N] [SOURCE_DIR ...]``. Each source
directory (one holding a ``pytest_ddtree`` package, e.g. an exported older
commit) is measured alternately with the installed package, so load on the
machine affects every candidate alike. Reports the minimum and median of the
``-X importtime`` cumulative time of ``pytest_ddtree.plugin`` and of the wall
time of the whole interpreter.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import time


def _once(source: str | None) -> tuple[float, float]:
    env = dict(os.environ)
    if source:
        env["PYTHONPATH"] = source
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import pytest_ddtree.plugin"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - t0
    match = re.search(r"\|\s*(\d+) \| pytest_ddtree\.plugin\s*$", proc.stderr, re.MULTILINE)
    assert match, proc.stderr[-500:]
    return int(match.group(1)) / 1000.0, wall * 1000.0


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    sources: list[str | None] = [None, *sys.argv[2:]]
    results: dict[str | None, list[tuple[float, float]]] = {s: [] for s in sources}
    for _ in range(n):
        for source in sources:
            results[source].append(_once(source))
    for source, runs in results.items():
        imp = [r[0] for r in runs]
        wall = [r[1] for r in runs]
        print(
            f"{source or 'installed'}: import pytest_ddtree.plugin min {min(imp):.1f} ms, "
            f"median {statistics.median(imp):.1f} ms; interpreter wall min {min(wall):.0f} ms, "
            f"median {statistics.median(wall):.0f} ms (n={n})"
        )


if __name__ == "__main__":
    main()
