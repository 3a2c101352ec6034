"""The example suite against the hostile test server: peak memory and wall time.

Runs ``pytest example_suite`` in a subprocess, exactly as a user would, against
``tests/hardening/_hostile.py`` serving one mode for every request, and reports the
child's peak RSS (``wait4`` rusage) and wall time, with the healthy mode as the yardstick:

* ``healthy``   - the same server answering correctly (the baseline figure);
* ``endless``   - an event stream that never ends;
* ``huge``      - a 10 MB answer to every request;
* ``trickle``   - one byte every 2 s, with ``--ddtree-timeout`` total=30.

    python benchmarks/bench_hostile.py [--modes healthy,endless,huge,trickle] [--json out.json]
        [--max-response-bytes 1MiB]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "hardening"))

from _hostile import HostileServer  # noqa: E402

TIMEOUTS = {
    "healthy": "connect=5,read=15,total=120",
    "endless": "connect=5,read=15,total=120",
    "huge": "connect=5,read=15,total=120",
    "trickle": "connect=5,read=15,total=30",
}


def run(mode: str, extra: list[str]) -> dict[str, object]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DDTREE_", "OPENAI_", "PYTEST_ADDOPTS", "PYTEST_XDIST"))
    }
    with HostileServer(mode, interval=2.0, trickle_for=600) as server:
        started = time.perf_counter()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                str(ROOT / "example_suite"),
                "-q",
                "-p",
                "no:xdist",
                f"--ddtree-endpoint={server.base_url}",
                f"--ddtree-timeout={TIMEOUTS[mode]}",
                "--junitxml",
                f"/tmp/bench_hostile_{mode}.xml",
                *extra,
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        assert proc.stdout is not None
        out = proc.stdout.read().decode("utf-8", "replace")
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
    tail = [line for line in out.splitlines() if line.strip()][-1:]
    return {
        "mode": mode,
        "extra": " ".join(extra),
        "timeout": TIMEOUTS[mode],
        "exit_code": os.waitstatus_to_exitcode(status),
        "wall_s": round(wall, 1),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "requests_served": server.served,
        "summary": tail[0] if tail else "",
        "tracebacks": out.count("Traceback"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="healthy,endless,huge,trickle")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument(
        "--max-response-bytes", help="pass --ddtree-max-response-bytes to the suite"
    )
    args = parser.parse_args()
    results = []
    for mode in args.modes.split(","):
        extra = (
            [f"--ddtree-max-response-bytes={args.max_response_bytes}"]
            if args.max_response_bytes
            else []
        )
        result = run(mode.strip(), extra)
        results.append(result)
        print(json.dumps(result), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
