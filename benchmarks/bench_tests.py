"""Where does the test suite's time go? Per folder, per kind of test, and the slowest tests.

    python benchmarks/bench_tests.py [--save run.json] [--against before.json] [-- PYTEST ARGS]

Runs ``python -m pytest tests`` (or the pytest arguments after ``--``) with this file loaded as
a plugin, and sums each test's setup, call and teardown. A test's kind is the costliest thing
it did:

- ``engine``: it is marked for a real engine (``real_engine``, ``llamacpp``, ``vllm``,
  ``sglang``);
- ``whole suite``: it ran the bundled suite (``pytest_ddtree.suite`` or ``example_suite`` on a
  pytest command line, or an inner run of 100 tests or more);
- ``pytest subprocess``: it started pytest in a new interpreter (``pytester`` in subprocess
  mode, or a pytest command line of its own);
- ``pytester in-process``: it ran pytest inside the test's own interpreter;
- ``unit``: none of these.

``--save`` keeps the per-test figures as JSON; ``--against`` prints a saved run's folders and
kinds beside this one's. ``--from run.json`` prints a saved run without running anything.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ENGINE_MARKERS = {"real_engine", "llamacpp", "vllm", "sglang"}
KINDS = ("unit", "pytester in-process", "pytest subprocess", "whole suite", "engine")
WHOLE_SUITE_TESTS = 100

# -- the plugin half: loaded into the measured run with -p bench_tests ---------------------

_current: dict[str, Any] | None = None
_records: dict[str, dict[str, Any]] = {}


def _note(what: str) -> None:
    # a list, not a set: under xdist the record travels to the controller in the report
    if _current is not None and what not in _current["did"]:
        _current["did"].append(what)


def _names_suite(args: Any) -> bool:
    text = " ".join(str(a) for a in args) if isinstance(args, (list, tuple)) else str(args)
    return "pytest_ddtree.suite" in text or "example_suite" in text


def _outcomes(result: Any) -> int:
    try:
        return sum(int(v) for v in result.parseoutcomes().values())
    except Exception:  # no summary line: not a whole run
        return 0


def _patch() -> None:
    from _pytest import pytester

    inproc = pytester.Pytester.runpytest_inprocess
    subproc = pytester.Pytester.runpytest_subprocess

    def runpytest_inprocess(self: Any, *args: Any, **kwargs: Any) -> Any:
        _note("pytester in-process")
        if _names_suite(args):
            _note("whole suite")
        result = inproc(self, *args, **kwargs)
        if _outcomes(result) >= WHOLE_SUITE_TESTS:
            _note("whole suite")
        return result

    def runpytest_subprocess(self: Any, *args: Any, **kwargs: Any) -> Any:
        _note("pytest subprocess")
        if _names_suite(args):
            _note("whole suite")
        result = subproc(self, *args, **kwargs)
        if _outcomes(result) >= WHOLE_SUITE_TESTS:
            _note("whole suite")
        return result

    pytester.Pytester.runpytest_inprocess = runpytest_inprocess  # type: ignore[method-assign]
    pytester.Pytester.runpytest_subprocess = runpytest_subprocess  # type: ignore[method-assign]

    popen_init = subprocess.Popen.__init__

    def init(self: Any, args: Any, *rest: Any, **kwargs: Any) -> None:
        words = [str(a) for a in args] if isinstance(args, (list, tuple)) else str(args).split()
        if any(w == "pytest" or w.endswith("/pytest") for w in words):
            _note("pytest subprocess")
            if _names_suite(words):
                _note("whole suite")
        popen_init(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = init  # type: ignore[method-assign]


def pytest_configure(config: Any) -> None:
    _patch()


def pytest_runtest_protocol(item: Any, nextitem: Any) -> None:
    global _current
    markers = {m.name for m in item.iter_markers()}
    _current = {"did": [], "engine": bool(markers & ENGINE_MARKERS)}
    item.user_properties.append(("bench_tests", _current))


def pytest_runtest_logreport(report: Any) -> None:
    # under xdist this runs on the controller too, with the worker's user_properties
    seen = dict(report.user_properties).get("bench_tests")
    if seen is None:
        return
    record = _records.setdefault(report.nodeid, {"seconds": 0.0, "did": set(), "engine": False})
    record["seconds"] += report.duration
    record["did"] |= set(seen["did"])
    record["engine"] = record["engine"] or seen["engine"]
    if report.when == "call" or report.outcome != "passed":
        record["outcome"] = report.outcome


def pytest_sessionfinish(session: Any) -> None:
    out = os.environ.get("BENCH_TESTS_OUT")
    if not out or hasattr(session.config, "workerinput"):
        return
    rows = [
        {
            "nodeid": nodeid,
            "seconds": round(rec["seconds"], 3),
            "kind": kind_of(rec),
            "outcome": rec.get("outcome", "passed"),
        }
        for nodeid, rec in _records.items()
    ]
    Path(out).write_text(json.dumps(rows, indent=0))


def kind_of(rec: dict[str, Any]) -> str:
    if rec["engine"]:
        return "engine"
    for kind in ("whole suite", "pytest subprocess", "pytester in-process"):
        if kind in rec["did"]:
            return kind
    return "unit"


# -- the script half -------------------------------------------------------------------------


def folder_of(nodeid: str) -> str:
    parts = nodeid.split("::", 1)[0].split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def table(rows: list[dict[str, Any]], key: str) -> dict[str, tuple[int, float]]:
    """(tests, seconds) per folder or per kind, and for "all"."""
    sums: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for row in rows:
        name = folder_of(row["nodeid"]) if key == "folder" else row["kind"]
        for each in (name, "all"):
            sums[each][0] += 1
            sums[each][1] += row["seconds"]
    return {k: (int(v[0]), v[1]) for k, v in sums.items()}


def print_tables(rows: list[dict[str, Any]], before: list[dict[str, Any]] | None) -> None:
    for key in ("folder", "kind"):
        now = table(rows, key)
        old = table(before, key) if before is not None else {}
        names = [k for k in KINDS if k in now or k in old]
        if key == "folder":
            names = sorted((set(now) | set(old)) - {"all"}, key=lambda n: -now.get(n, (0, 0))[1])
        print(f"| {key} | tests | seconds |" + (" tests before | seconds before |" * bool(old)))
        print("|---|---:|---:|" + ("---:|---:|" * bool(old)))
        for name in [*names, "all"]:
            cells = [now.get(name, (0, 0.0))] + ([old.get(name, (0, 0.0))] if old else [])
            print(f"| {name} |" + "".join(f" {n:,} | {t:,.0f} |" for n, t in cells))
        print()
    print("| slowest tests | kind | seconds |")
    print("|---|---|---:|")
    for row in sorted(rows, key=lambda r: -r["seconds"])[:20]:
        print(f"| `{row['nodeid']}` | {row['kind']} | {row['seconds']:.1f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--save", help="write the per-test figures here (JSON)")
    parser.add_argument("--against", help="a saved run to print beside this one")
    parser.add_argument("--from", dest="from_", help="print a saved run; run nothing")
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments")
    args = parser.parse_args()
    before = json.loads(Path(args.against).read_text()) if args.against else None
    if args.from_:
        print_tables(json.loads(Path(args.from_).read_text()), before)
        return 0
    out = Path(args.save) if args.save else Path(tempfile.mkdtemp()) / "bench_tests.json"
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [here, env.get("PYTHONPATH", "")]))
    env["BENCH_TESTS_OUT"] = str(out)
    pytest_args = args.pytest_args or ["tests"]
    command = [sys.executable, "-m", "pytest", *pytest_args, "-p", "bench_tests"]
    print("$", " ".join(command), flush=True)
    start = time.monotonic()
    code = subprocess.call(command, env=env)
    wall = time.monotonic() - start
    rows = json.loads(out.read_text())
    print(f"\nwall clock {wall:,.0f} s, pytest exit {code}\n")
    print_tables(rows, before)
    return code


if __name__ == "__main__":
    sys.exit(main())
