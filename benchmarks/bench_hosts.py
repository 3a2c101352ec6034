"""Load from several hosts on one machine: a three-host run (the controller plus two worker
network namespaces, reached over execnet socket servers or ssh) and a one-host run, the same load
against the same reference server in a namespace of its own; median TPOT and TTFT of each
with their 95% intervals, and the per-host table with the clock offsets.

Needs root and ``ip`` (network namespaces); the traffic stays on veth pairs it creates with
10.231.0.0/16 addresses it assigns, all removed at the end.

    sudo python benchmarks/bench_hosts.py [--requests 64] [--pairs 3] [--via socket|ssh]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "load"))

import hostlab


def _print_tables(name: str, out: str) -> None:
    """The load table and, for several hosts, the per-host table with the clock offsets."""
    print(f"===== {name}")
    keep = False
    for line in out.splitlines():
        keep = keep or "pytest-ddtree load" in line
        if keep and not line.startswith("  ("):
            print(line)
        if "schedule:" in line and name.startswith("one host"):
            break
        if "start skew" in line:
            break


def _agreement(
    label: str, a: dict[str, object], b: dict[str, object], names: tuple[str, str]
) -> None:
    ma_, mb_ = hostlab.medians(a), hostlab.medians(b)
    for k, ok in hostlab.agree(ma_, mb_).items():
        (ma, ca), (mb, cb) = ma_[k], mb_[k]
        print(
            f"{label} {k}: {names[0]} {ma:.3f} [{ca[0]:.3f}, {ca[1]:.3f}], {names[1]} "
            f"{mb:.3f} [{cb[0]:.3f}, {cb[1]:.3f}]: {'agree' if ok else 'DISAGREE'}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=64, help="requests per run (C=4)")
    parser.add_argument(
        "--pairs", type=int, default=3, help="runs of each, alternating which goes first"
    )
    parser.add_argument(
        "--via",
        choices=("socket", "ssh"),
        default="socket",
        help="how the worker hosts are reached: execnet's socket server, or an sshd in each",
    )
    args = parser.parse_args()
    why = hostlab.Lab.unavailable(ssh=args.via == "ssh")
    if why:
        print(f"skipped: {why}")
        return 0
    spread_runs: list[dict[str, object]] = []
    alone_runs: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp, hostlab.lab(Path(tmp)) as made:
        url = made.endpoint()
        if args.via == "ssh":
            a, b = (f"--tx={made.ssh_host(n)}//python={sys.executable}" for n in "ab")
        else:
            _, a = made.worker_host("a")
            _, b = made.worker_host("b")
        for i in range(args.pairs):
            order = ("three", "one") if i % 2 == 0 else ("one", "three")
            for which in order:
                hosts = (a, b) if which == "three" else ()
                out, test = hostlab.run_load(
                    Path(tmp), url, f"{which}-{i}", *hosts, requests=args.requests
                )
                (spread_runs if which == "three" else alone_runs).append(test)
                if i == 0:
                    _print_tables("three hosts" if which == "three" else "one host", out)
    print("===== agreement (median ms [95% bootstrap interval]; each median within the other's)")
    both = ("three hosts", "one host")
    for i, (s, a1) in enumerate(zip(spread_runs, alone_runs, strict=True)):
        _agreement(f"pair {i + 1}", s, a1, both)
    pooled = [
        {"samples": [x for t in runs for x in t["samples"]]}  # type: ignore[attr-defined]
        for runs in (spread_runs, alone_runs)
    ]
    _agreement("pooled", pooled[0], pooled[1], both)
    # the yardstick: one configuration against itself, run after run (what the intervals of
    # one run leave out: the machine's drift between runs)
    print("===== the same configuration, run against run")
    for name, runs in (("one host", alone_runs), ("three hosts", spread_runs)):
        for i in range(len(runs) - 1):
            _agreement(name, runs[i], runs[i + 1], (f"run {i + 1}", f"run {i + 2}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
