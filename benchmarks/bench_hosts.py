"""Load from several hosts on one machine: a three-host run (the controller plus two worker
network namespaces, reached over execnet socket servers) and a one-host run, the same load
against the same reference server in a namespace of its own; median TPOT and TTFT of each
with their 95% intervals, and the per-host table with the clock offsets.

Needs root and ``ip`` (network namespaces); the traffic stays on veth pairs it creates with
10.231.0.0/16 addresses it assigns, all removed at the end.

    sudo python benchmarks/bench_hosts.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "load"))

import hostlab


def main() -> int:
    why = hostlab.Lab.unavailable()
    if why:
        print(f"skipped: {why}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        spread_out, alone_out, spread, alone = hostlab.three_hosts_and_one(Path(tmp))
    for name, out in (("three hosts", spread_out), ("one host", alone_out)):
        print(f"===== {name}")
        keep = False
        for line in out.splitlines():
            keep = keep or "pytest-ddtree load" in line
            if keep and not line.startswith("  ("):
                print(line)
            if "schedule:" in line and name == "one host":
                break
            if "start skew" in line:
                break
    a, b = hostlab.medians(spread), hostlab.medians(alone)
    print("===== agreement (median ms [95% bootstrap interval])")
    for k, ok in hostlab.agree(a, b).items():
        (ma, ca), (mb, cb) = a[k], b[k]
        print(
            f"{k}: three hosts {ma:.3f} [{ca[0]:.3f}, {ca[1]:.3f}], one host {mb:.3f} "
            f"[{cb[0]:.3f}, {cb[1]:.3f}]: {'agree' if ok else 'DISAGREE'}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
