"""Load hosts: clock offsets, the per-host table, a host that dies, a host of another version.

The unit tests build records from figures; the two runs reach their workers over execnet
socket servers on 127.0.0.1 (``hostlab``), each server a host as the controller sees it.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_ddtree.measure.load import LoadPoint
from pytest_ddtree.measure.load.hosts import (
    DRIFT_LIMIT,
    UNREACHABLE,
    Barrier,
    ClockReading,
    HostClock,
    Hosts,
    Release,
)
from pytest_ddtree.measure.load.metrics import ClientHealth
from pytest_ddtree.measure.load.record import LoadRecord, merge_records
from pytest_ddtree.reference import tokenizer_path
from pytest_ddtree.report.hosts_text import render_hosts

from . import hostlab
from ._samples import load_sample

C2 = LoadPoint("concurrency", 2)


def _record(worker: str, starts: list[float], shares: int = 2) -> LoadRecord:
    samples = tuple(
        load_sample(C2, 16, t, 0.2, 0.05, (0.05, 0.05, 0.05), 4, True, worker=worker)
        for t in starts
    )
    health = ClientHealth(0.01, 1.0, len(starts), 4 * len(starts), 0.001, 0.002, 10)
    return LoadRecord("test_load.py::test_load", samples, ((C2, 16, health),), shares=shares)


def test_the_offset_is_read_from_the_quickest_exchange() -> None:
    # host 2.0 s ahead; the first exchange took 0.4 s, the second 0.02 s (±0.01)
    reading = ClockReading.best([(100.0, 102.3, 100.4), (200.0, 202.01, 200.02)])
    assert reading is not None
    assert reading.offset == pytest.approx(2.0) and reading.error == pytest.approx(0.01)
    assert ClockReading.best([]) is None


def test_send_instants_move_onto_the_controllers_clock_and_latencies_stay() -> None:
    hosts = Hosts()
    hosts.add("gw0", "local", None)
    ahead = ClockReading(offset=5.0, error=0.0001, at=1000.0)
    hosts.add("gw1", "10.231.1.2:8888", HostClock(start=ahead, end=ahead))
    (test,) = merge_records(
        [_record("gw0", [1000.0, 1000.1]), _record("gw1", [1005.0, 1005.1])], seed=0, hosts=hosts
    )
    moved = sorted((s for s in test.samples if s.worker == "gw1"), key=lambda s: s.start)
    assert [s.start for s in moved] == pytest.approx([1000.0, 1000.1])  # 5 s ahead, moved back
    assert all(s.end_to_end == 0.2 and s.ttft == 0.05 for s in moved)
    local, remote = test.hosts
    assert (local.requests, remote.requests) == (2, 2)
    assert remote.first_send == pytest.approx(1000.0)
    assert not test.partial and not test.clock_problems


def test_an_unknown_or_drifting_clock_names_its_host_and_the_timeline_is_approximate() -> None:
    hosts = Hosts()
    start = ClockReading(0.0, 0.0001, 0.0)
    hosts.add("gw0", "a:1", HostClock(start=start, end=ClockReading(2 * DRIFT_LIMIT, 0.0001, 9.0)))
    hosts.add("gw1", "b:1", HostClock())
    hosts.add("gw2", "c:1", HostClock(start=start, end=start))
    assert hosts.timeline_problems() == [
        f"a:1: clock drifted {2 * DRIFT_LIMIT * 1000:+.1f} ms during the run",
        "b:1: clock offset unknown",
    ]


def test_a_host_that_sent_nothing_makes_the_test_partial_and_is_named() -> None:
    hosts = Hosts()
    hosts.add("gw0", "local", None)
    hosts.add("gw1", "10.231.2.2:8888", HostClock())
    hosts.update("gw1", fault="died mid-run (Not properly terminated)")
    (test,) = merge_records([_record("gw0", [1.0, 1.1])], seed=0, hosts=hosts)
    assert test.partial
    assert test.absent == ("10.231.2.2:8888 (gw1): died mid-run (Not properly terminated)",)
    assert test.requests == 2


def test_the_table_names_a_host_that_sent_nothing_by_its_fault() -> None:
    """Was a ZeroDivisionError in the terminal summary (client CPU per token of no token)."""
    hosts = Hosts()
    hosts.add("gw0", "local", None)
    hosts.add("gw1", "b:1", HostClock())
    hosts.add("gw2", "c:1", HostClock())
    hosts.update("gw1", fault="died mid-run (Not properly terminated)")
    hosts.update("gw2", fault=f"{UNREACHABLE}: http://10.0.0.1/v1/models: cannot connect")
    rows = hosts.rows([_record("gw0", [1.0, 1.1])])
    _, local, died, unreachable = render_hosts(rows)[:4]
    assert "us/tok" in local
    assert died.split()[2:5] == ["0", "0", "-"] and "died mid-run" in died
    # the reason is on the partial line; the cell says what happened
    assert unreachable.split()[2:5] == ["0", "0", "-"]
    assert f"{UNREACHABLE}  " in unreachable and "10.0.0.1" not in unreachable


def test_a_run_starts_once_every_host_is_there_at_one_instant() -> None:
    barrier = Barrier(lead=0.05)
    for w in ("gw0", "gw1"):
        barrier.join(w)
    assert barrier.arrive("gw0", ("t::load", 0, 0), now=10.0) == []
    (go,) = barrier.arrive("gw1", ("t::load", 0, 0), now=12.0)
    assert go == Release(("t::load", 0, 0), frozenset({"gw0", "gw1"}), 12.05)


def test_a_run_does_not_wait_for_a_host_that_left_the_test_or_the_call() -> None:
    barrier = Barrier(lead=0.0)
    for w in ("gw0", "gw1", "gw2", "gw3"):
        barrier.join(w)
    mark = ("t::load", 0, 1)
    barrier.arrive("gw0", mark, now=1.0)
    assert barrier.finish("gw1", "t::load", now=2.0) == []  # skipped it (no endpoint)
    assert barrier.arrive("gw2", ("t::load", 1, 0), now=3.0) == []  # its call 0 ended early
    assert barrier.expected(mark) == {"gw0", "gw3"}
    (go,) = barrier.leave("gw3", now=4.0)  # died
    assert go.mark == mark and go.workers == {"gw0"}


# ---------------------------------------------------------------- over socket gateways

LOAD_THEN_DIE = textwrap.dedent(
    """
    import os, signal

    def test_load(ddtree_load):
        ddtree_load(["Write a long essay about rivers."], tree_budgets=[16])

    def test_then_this_host_dies():
        if os.environ.get("HOST_DIES"):
            os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[hostlab.Proc]]:
    started: list[hostlab.Proc] = []
    yield started
    for proc in started:
        proc.stop()


def _host(servers: list[hostlab.Proc], directory: Path, name: str, **kw: Any) -> str:
    # the hosts import the test package from site/ (as from a package installed there)
    path = os.pathsep.join([str(directory / "site"), os.environ.get("PYTHONPATH", "")])
    proc, address = hostlab.socket_server(directory, name, env={"PYTHONPATH": path}, **kw)
    servers.append(proc)
    return address


def _package(pytester: pytest.Pytester, source: str) -> None:
    """The tests as an installed package ``hostsuite`` (run with ``--pyargs``: no rsync)."""
    package = pytester.mkdir("site") / "hostsuite"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "test_hosts.py").write_text(source)


def _two_hosts(
    pytester: pytest.Pytester, a: str, b: str, endpoint: str, report: Path
) -> pytest.RunResult:
    """The ``hostsuite`` package over socket hosts ``a`` and ``b``, a small load, a report."""
    return pytester.runpytest_subprocess(
        "--pyargs",
        "hostsuite",
        f"--tx=socket={a}",
        f"--tx=socket={b}",
        "--dist=each",
        f"--ddtree-endpoint={endpoint}",
        f"--ddtree-tokenizer={tokenizer_path()}",
        "--ddtree-load-concurrency=2",
        "--ddtree-load-requests=4",
        "--ddtree-max-tokens=16",
        f"--ddtree-report={report}",
        "-p",
        "no:cacheprovider",
    )


def test_a_host_that_dies_mid_run_is_named_and_the_others_samples_are_kept(
    pytester: pytest.Pytester, fast_server: Any, servers: list[hostlab.Proc]
) -> None:
    _package(pytester, LOAD_THEN_DIE)
    a = _host(servers, pytester.path, "a")
    b = _host(servers, pytester.path, "b", prelude="import os; os.environ['HOST_DIES'] = '1'")
    report = pytester.path / "report"
    result = _two_hosts(pytester, a, b, fast_server.base_url, report)
    out = result.stdout.str()
    assert "Traceback" not in out + result.stderr.str()
    assert f"partial: {b} (gw1): died mid-run" in out
    (test,) = json.loads((report / "sweep.json").read_text())["load"]["tests"]
    assert test["partial"] and test["absent_hosts"][0].startswith(f"{b} (gw1): died mid-run")
    # the live host's share (2 of the 4 requests) is kept and counted
    assert test["requests"] == 2 and {s["worker"] for s in test["samples"]} == {"gw0"}
    rows = {r["host"]: r for r in test["hosts"]}
    assert rows[a]["requests"] == 2 and rows[b]["requests"] == 0


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port bound and never listened on: a connection to it is refused."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


def _refusing(port: int) -> str:
    """A host's prelude: its interpreter refuses connections to ``port`` (a firewall between
    this host and the endpoint, where loopback cannot tell hosts apart)."""
    return textwrap.dedent(
        f"""
        import socket
        _connect = socket.socket.connect
        def _refuse(self, address):
            if isinstance(address, tuple) and address[1] == {port}:
                raise ConnectionRefusedError(111, "Connection refused")
            return _connect(self, address)
        socket.socket.connect = _refuse
        """
    )


def _one_line(result: pytest.RunResult, start: str) -> str:
    """The failure line that starts with ``start``, which names the host once (pytest's short
    summary, with CI set, repeats it after ``FAILED ddtree::hosts[...] - ``)."""
    text = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in text and "Traceback" not in text
    (line,) = [line for line in result.stdout.lines if line.startswith(start)]
    return line


def test_a_worker_that_cannot_reach_the_endpoint_skips_its_tests_and_names_its_host(
    pytester: pytest.Pytester, closed_port: int
) -> None:
    """Was an INTERNALERROR: the worker's session ended at collection, its tests pending."""
    pytester.makepyfile("def test_talks(ddtree_client): pass\n\ndef test_offline(): pass\n")
    url = f"http://127.0.0.1:{closed_port}/v1"
    result = pytester.runpytest_subprocess(
        "-n", "1", "--dist=each", f"--ddtree-endpoint={url}", "-p", "no:cacheprovider", "-rs"
    )
    line = _one_line(result, "ddtree: host local (gw0) cannot reach the endpoint: ")
    assert f"{url}/models: cannot connect" in line
    # the usage error of a run without workers: no host reached the endpoint
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.assert_outcomes(passed=1, skipped=1, failed=1)
    result.stdout.fnmatch_lines(["SKIPPED * ddtree: not run, host local (gw0) cannot reach *"])


def test_a_host_that_cannot_reach_the_endpoint_is_named_and_the_others_samples_are_kept(
    pytester: pytest.Pytester, fast_server: Any, servers: list[hostlab.Proc]
) -> None:
    _package(pytester, LOAD_THEN_DIE)
    port = int(fast_server.base_url.rsplit(":", 1)[1].split("/")[0])
    a = _host(servers, pytester.path, "a")
    b = _host(servers, pytester.path, "b", prelude=_refusing(port))
    report = pytester.path / "report"
    result = _two_hosts(pytester, a, b, fast_server.base_url, report)
    assert "cannot connect" in _one_line(result, f"ddtree: host {b} (gw1) cannot reach the ")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    # host a ran both tests; host b skipped its load test and ran the one without endpoint
    result.assert_outcomes(passed=3, skipped=1, failed=1)
    assert f"partial: {b} (gw1): cannot reach the endpoint: " in result.stdout.str()
    (test,) = json.loads((report / "sweep.json").read_text())["load"]["tests"]
    assert test["partial"] and test["absent_hosts"][0].startswith(f"{b} (gw1): cannot reach")
    assert test["requests"] == 2 and {s["worker"] for s in test["samples"]} == {"gw0"}


def test_a_host_with_another_version_is_refused_in_one_line(
    pytester: pytest.Pytester, servers: list[hostlab.Proc]
) -> None:
    """The other version is simulated: the host's interpreter sets ``pytest_ddtree.__version__``
    before the socket server starts (the probe reads that attribute, as the worker would)."""
    from pytest_ddtree import __version__

    _package(pytester, "def test_nothing(): pass\n")
    other = _host(
        servers,
        pytester.path,
        "old",
        prelude="import pytest_ddtree; pytest_ddtree.__version__ = '0.0.1'",
    )
    result = pytester.runpytest_subprocess(
        "--pyargs", "hostsuite", f"--tx=socket={other}", "--dist=each"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    line = (
        f"ERROR: ddtree: host {other} (gw0) runs pytest-ddtree 0.0.1, the controller "
        f"{__version__}: install the same version on every host"
    )
    assert result.stderr.lines.count(line) == 1 or result.stdout.lines.count(line) == 1
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_proxy_carrying_several_workers_needs_the_thread_model() -> None:
    from pytest_ddtree.pytest_plugin.remote import crowded_proxy

    px = ["id=lg1//ssh=user@loadgen1//python=/opt/venv/bin/python"]
    line = crowded_proxy(px, ["4*popen//via=lg1"])
    assert line == (
        f"ddtree: --px {px[0]} carries 4 workers (--tx ...//via=lg1): add //execmodel=thread "
        "to it (pytest-xdist's default model takes one gateway per proxy; without it the run "
        "ends in an INTERNALERROR)"
    )
    assert "carries 2 workers" in crowded_proxy(px, ["popen//via=lg1", "popen//via=lg1"])
    assert crowded_proxy([f"{px[0]}//execmodel=thread"], ["4*popen//via=lg1"]) == ""
    # the model pytest-xdist would give it anyway, named
    assert crowded_proxy([f"{px[0]}//execmodel=main_thread_only"], ["2*popen//via=lg1"])
    # not a count (pytest-xdist reads the whole as one spec): no traceback
    assert crowded_proxy(px, ["x*popen//via=lg1"]) == ""
    assert crowded_proxy(px, ["popen//via=lg1", "socket=10.0.0.2:8888"]) == ""
    assert crowded_proxy([], ["2*popen"]) == ""


def test_a_crowded_proxy_is_refused_in_one_line_before_any_worker_starts(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile("def test_nothing(): pass\n")
    result = pytester.runpytest_subprocess(
        "--dist=each", "--px=id=p//popen", "--tx=2*popen//via=p", "-p", "no:cacheprovider"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    out = result.stdout.str() + result.stderr.str()
    assert "ERROR: ddtree: --px id=p//popen carries 2 workers" in out
    assert "INTERNALERROR>" not in out and "Traceback" not in out


def test_each_load_point_starts_together_on_every_host(
    pytester: pytest.Pytester, fast_server: Any, servers: list[hostlab.Proc]
) -> None:
    """Each run (a load point at a budget) of one host starts only once the other host's
    run before it has ended: the hosts go point by point together (they went on each at
    its own pace, after one common start)."""
    _package(pytester, LOAD_THEN_DIE)
    hosts = [_host(servers, pytester.path, name) for name in ("a", "b")]
    report = pytester.path / "report"
    result = pytester.runpytest_subprocess(
        "--pyargs",
        "hostsuite",
        *(f"--tx=socket={h}" for h in hosts),
        "--dist=each",
        f"--ddtree-endpoint={fast_server.base_url}",
        f"--ddtree-tokenizer={tokenizer_path()}",
        "--ddtree-load-concurrency=2,4,6",
        "--ddtree-load-requests=6",
        "--ddtree-max-tokens=16",
        f"--ddtree-report={report}",
        "-p",
        "no:cacheprovider",
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    (test,) = json.loads((report / "sweep.json").read_text())["load"]["tests"]
    runs: dict[int, list[tuple[float, float]]] = {}
    for s in test["samples"]:
        sent = (s["start"], s["start"] + s["end_to_end"])
        runs.setdefault(s["point"]["value"], []).append(sent)
    assert {s["worker"] for s in test["samples"]} == {"gw0", "gw1"}
    ordered = [runs[c] for c in (2, 4, 6)]
    for before, after in itertools.pairwise(ordered):
        assert min(start for start, _ in after) >= max(end for _, end in before)


@pytest.fixture
def one_lab() -> Iterator[None]:
    """One lab at a time on this machine: labs share 10.231.0.0/16, and a lab up on another
    xdist worker would read as a foreign route (held by a lock file for the test)."""
    import fcntl

    with open("/tmp/ddtree-hostlab.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.mark.slow
@pytest.mark.usefixtures("one_lab")
def test_three_hosts_in_namespaces_agree_with_one_host(tmp_path: Path) -> None:
    """Two worker namespaces and the controller, then the controller alone, the same load on
    one reference server in its own namespace: each host sends its share, with its clock read
    over execnet. Whether the medians agree is measured, not asserted (a noisy machine):
    ``benchmarks/bench_hosts.py`` prints both with their intervals."""
    hostlab.require_lab()
    spread_out, _, spread, alone = hostlab.three_hosts_and_one(tmp_path)
    assert spread["requests"] == alone["requests"] == 16
    hosts = {r["host"]: r for r in spread["hosts"]}
    assert len(hosts) == 2 and all(r["requests"] == 8 and r["valid"] == 8 for r in hosts.values())
    assert all(r["clock"]["start"] is not None for r in hosts.values())
    assert "start skew:" in spread_out and not spread["absent_hosts"]


@pytest.mark.slow
@pytest.mark.usefixtures("one_lab")
def test_hosts_reached_by_ssh_one_carrying_two_workers_through_a_proxy(tmp_path: Path) -> None:
    """Two worker namespaces, each with an sshd the lab starts (throwaway keys): one carries
    two workers through a ``--px`` proxy, the other one worker; no file is copied to them.
    The per-host table has one row per host, its workers together."""
    hostlab.require_lab(ssh=True)
    py = sys.executable
    with hostlab.lab(tmp_path) as made:
        url = made.endpoint()
        a, b = made.ssh_host("a"), made.ssh_host("b")
        out, test = hostlab.run_load(
            tmp_path,
            url,
            "ssh",
            f"--px=id=pa//{a}//python={py}//execmodel=thread",
            f"--tx=2*popen//via=pa//python={py}",
            f"--tx={b}//python={py}",
            requests=18,
        )
    hosts = {r["host"]: r for r in test["hosts"]}
    assert sorted(hosts) == ["root@10.231.2.2", "root@10.231.4.2"], out
    two, one = hosts["root@10.231.2.2"], hosts["root@10.231.4.2"]
    assert two["workers"] == ["gw0", "gw1"] and one["workers"] == ["gw2"], out
    # every request of the test came from one of the two hosts, and was valid
    assert two["requests"] + one["requests"] == test["requests"] == 18, out
    assert two["valid"] == two["requests"] > one["requests"] == one["valid"] > 0, out
    assert all(r["clock"]["start"] is not None for r in hosts.values()), out
    assert "root@10.231.2.2  gw0,gw1" in out and not test["absent_hosts"]
