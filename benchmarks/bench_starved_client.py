"""The example suite against a healthy server while only the client process is starved.

A busy CI runner or a shared box deschedules the test process while the server, on
another machine (or here: in other processes), keeps its pace. This script reproduces
that: it runs ``pytest example_suite`` and stops and continues the pytest process alone
(SIGSTOP/SIGCONT of its pid, never its server subprocesses) in fine slices of 10-20 ms
and in stalls of 60-150 ms, seeded, for the whole run. It counts, per run, the tests that
failed, the ``stats-inflated`` verdicts, and the timing checks withheld because the
client stalled.

    python benchmarks/bench_starved_client.py --runs 10
    python benchmarks/bench_starved_client.py --runs 10 --fault stats-inflated
    python benchmarks/bench_starved_client.py --runs 10 --engine llamacpp
    python benchmarks/bench_starved_client.py --runs 10 --code /tmp/other-checkout

``--code DIR`` runs another checkout's plugin and example suite (its ``pytest_ddtree``
first on ``PYTHONPATH``), for a before/after comparison on the same machine.
``--no-starve`` runs the same without stopping the client. Extra pytest arguments go
after ``--`` (``-- --ddtree-budgets 16,64 -k "load or sweep"``).

The reference server is the embedded one (two child processes of pytest, the main
server and its target-only twin); ``--engine llamacpp`` starts llama.cpp's server
(``python -m pytest_ddtree.engines``, n-gram speculation) in a process of its own and
points the suite at it with ``--ddtree-endpoint``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


class Starver:
    """Stop and continue one process (by pid) in seeded slices until stopped."""

    def __init__(self, pid: int, seed: int, stall_share: float = 0.12) -> None:
        self.pid = pid
        self.rng = random.Random(seed)
        self.stall_share = stall_share
        self.stopped_seconds = 0.0
        self.stops = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        rng = self.rng
        while not self._done.is_set():
            if self._done.wait(rng.uniform(0.02, 0.06)):  # let it run
                break
            pause = (
                rng.uniform(0.06, 0.15)
                if rng.random() < self.stall_share
                else rng.uniform(0.01, 0.02)
            )
            try:
                os.kill(self.pid, signal.SIGSTOP)
            except ProcessLookupError:
                return
            t0 = time.perf_counter()
            time.sleep(pause)
            try:
                os.kill(self.pid, signal.SIGCONT)
            except ProcessLookupError:
                return
            self.stopped_seconds += time.perf_counter() - t0
            self.stops += 1
        with contextlib.suppress(ProcessLookupError):  # never leave it stopped
            os.kill(self.pid, signal.SIGCONT)


def free_port() -> int:
    rng = random.Random()
    for _ in range(50):
        port = rng.randint(20000, 29999)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-29999")


def start_llamacpp() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "pytest_ddtree.engines", "--port", str(port)]
    cmd += ["--speculation", "ngram", "--threads", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    import httpx

    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama.cpp server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url + "/v1"
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError("llama.cpp server did not become healthy in 180 s")


#: a verdict line (a withheld speed claim is named too, but is no verdict)
INFLATED = re.compile(r"\[stats-inflated\] (?!withheld)")
WITHHELD = re.compile(r"the speed claim of (\d+) request|timing checks withheld on (\d+) request")
SUMMARY = re.compile(r"=+ (.*(?:passed|failed|error).*) in [\d.]+s")


def one_run(args: argparse.Namespace, i: int, endpoint: str | None) -> dict[str, Any]:
    code = Path(args.code).resolve() if args.code else REPO
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    if args.code:
        env["PYTHONPATH"] = str(code) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "pytest", "example_suite", "-q", "-p", "no:cacheprovider"]
    cmd += ["-rfE"]
    if endpoint:
        cmd += ["--ddtree-endpoint", endpoint]
    if args.fault:
        cmd += ["--ddtree-reference-fault", args.fault]
    cmd += args.pytest_args
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=code, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    starver = None
    if not args.no_starve:
        starver = Starver(proc.pid, seed=args.seed + i)
        starver.start()
    timer = threading.Timer(args.timeout, proc.kill)
    timer.start()
    out, _ = proc.communicate()
    timer.cancel()
    if starver is not None:
        starver.stop()
    seconds = time.monotonic() - t0
    summary = SUMMARY.findall(out)
    failed = sorted(set(re.findall(r"^FAILED (\S+)", out, re.M)))
    withheld = sum(int(a or b) for a, b in WITHHELD.findall(out))
    return {
        "run": i,
        "rc": proc.returncode,
        "seconds": round(seconds, 1),
        "summary": summary[-1] if summary else out.strip().splitlines()[-1:],
        "failed": failed,
        "stats_inflated": len(INFLATED.findall(out)),
        "withheld_reported": withheld,
        "stopped_seconds": round(starver.stopped_seconds, 1) if starver else 0.0,
        "stops": starver.stops if starver else 0,
        "tail": out[-3000:] if proc.returncode not in (0,) else "",
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--code", help="another checkout to run (before/after)")
    p.add_argument("--fault", help="a reference-server fault to inject (stats-inflated)")
    p.add_argument("--engine", choices=("reference", "llamacpp"), default="reference")
    p.add_argument("--endpoint", help="an engine already running (its /v1 URL)")
    p.add_argument("--no-starve", action="store_true")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    p.add_argument("--json", help="write every run's figures here")
    p.add_argument("pytest_args", nargs="*", help="after --: extra pytest arguments")
    args = p.parse_args()
    server = None
    endpoint = args.endpoint
    if args.engine == "llamacpp" and endpoint is None:
        server, endpoint = start_llamacpp()
    runs = []
    try:
        for i in range(args.runs):
            r = one_run(args, i, endpoint)
            runs.append(r)
            print(
                f"run {i}: rc={r['rc']} {r['seconds']}s stats-inflated={r['stats_inflated']} "
                f"withheld={r['withheld_reported']} failed={r['failed']} "
                f"stopped={r['stopped_seconds']}s/{r['stops']} | {r['summary']}",
                flush=True,
            )
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
    flagged = sum(1 for r in runs if r["stats_inflated"])
    failing = sum(1 for r in runs if r["rc"] != 0)
    print(
        f"{len(runs)} run(s): {failing} failed, {flagged} with a stats-inflated verdict "
        f"({sum(r['stats_inflated'] for r in runs)} verdict line(s) in all)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
