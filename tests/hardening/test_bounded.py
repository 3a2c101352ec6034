"""Bounded time and memory on every path: the load runner against every hostile mode, and
whole pytest runs against a server that sends too much (a server that never answers:
test_stop_early).

The ``timeout`` of each inner run is a hang guard (the run is killed and the test fails
when it is exceeded), not a performance assertion.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_ddtree.checks.invariants import check
from pytest_ddtree.core.settings import Timeout
from pytest_ddtree.measure.load import LoadTester
from pytest_ddtree.measure.load.tester import LoadError
from pytest_ddtree.report.load_text import failure_text
from pytest_ddtree.wire.protocol import EndpointConfig, StallGuard

from ._hostile import HostileServer

# mode -> the codes its load test must fail with (every one of them, and no other)
LOAD_CODES: dict[str, set[str]] = {
    "silent": {"client-timeout", "not-sent"},
    "trickle": {"client-timeout", "not-sent"},
    "trickle-headers": {"client-timeout", "not-sent"},
    "trickle-body": {"client-timeout", "not-sent"},
    "endless": {"too-large", "not-sent"},
    "huge": {"too-large", "not-sent"},
    "reset": {"stream-integrity"},
    "reset-before": {"http-error"},
    "bad-utf8": {"encoding"},
    "bad-utf8-plain": {"stream-integrity"},
    "deep": {"stream-integrity", "early-stop"},
    "deep-plain": {"stream-integrity"},
    "json-stream": {"stream-integrity"},
    "429": {"http-error"},
    "stale": {"stream-integrity"},
}


@pytest.mark.parametrize("mode", sorted(LOAD_CODES))
def test_every_hostile_mode_fails_a_load_test_with_its_code(
    mode: str, hostile: Callable[..., HostileServer]
) -> None:
    server = hostile(mode, interval=0.2, trickle_for=30)
    config = EndpointConfig(server.base_url, timeout=Timeout(connect=2, read=3, total=2))
    guard = StallGuard()
    tester = LoadTester(
        config,
        judge=lambda c, **e: check(c, **e),
        concurrencies=[2],
        requests=6,
        guard=guard,
        describe=failure_text,
    )
    with pytest.raises(LoadError) as info:  # and nothing else: no traceback of our own
        tester(["Tell me about rivers."])
    message = str(info.value)
    samples = [s for s in _samples_of(tester, mode)]
    codes = {code for s in samples for code in s.codes}
    assert codes == LOAD_CODES[mode], message
    if "client-timeout" in codes:
        # the client's limit, said as such, never as broken output-quality invariants
        assert "client's time limits" in message and "--ddtree-timeout" in message, message
        assert "broke output-quality invariants" not in message, message
    if "not-sent" in codes:
        assert "not sent" in message, message
        # a dead or runaway endpoint: the session's later requests are refused at once
        assert guard.tripped, message


def _samples_of(tester: LoadTester, mode: str) -> list[object]:
    """The samples of the tester's last call (recorded through its sink)."""
    return list(_SAMPLES.get(id(tester), ()))


_SAMPLES: dict[int, tuple[object, ...]] = {}


@pytest.fixture(autouse=True)
def _keep_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    original = LoadTester.__init__

    def init(self: LoadTester, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)  # type: ignore[arg-type]
        self.sink = lambda result: _SAMPLES.__setitem__(id(self), result.samples)

    monkeypatch.setattr(LoadTester, "__init__", init)


# The peak resident memory of the inner process itself: VmHWM belongs to the process image
# and starts afresh at exec, unlike ru_maxrss, which keeps the forking parent's peak.
RSS_CONFTEST = """
import json, re

PEAKS = {}

def pytest_runtest_teardown(item):
    with open("/proc/self/status") as f:
        PEAKS[item.name] = int(re.search(r"VmHWM:\\s+(\\d+) kB", f.read()).group(1))

def pytest_sessionfinish(session):
    with open("peak.json", "w") as f:
        json.dump(PEAKS, f)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
def test_load_against_hostile_answers_ends_cleanly_in_bounded_memory(
    pytester: pytest.Pytester, hostile: Callable[..., HostileServer]
) -> None:
    server = hostile(tokenize="flaky", interval=0.2, trickle_for=60)
    pytester.makeconftest(RSS_CONFTEST)
    pytester.makepyfile(
        """
        import pytest

        def _load(ddtree_load, mode):
            return ddtree_load(["Tell me about rivers.", "Tell me about lakes."],
                               concurrencies=[4], requests=8, tree_budgets=[16],
                               extra={"hostile_mode": mode})

        def test_a_counter_that_fails(ddtree_load):
            _load(ddtree_load, "healthy")

        def test_b_deep(ddtree_load):
            _load(ddtree_load, "deep")

        def test_c_endless(ddtree_load):
            _load(ddtree_load, "endless")

        def test_d_huge(ddtree_load):  # refused at once: the endless streams tripped the guard
            _load(ddtree_load, "huge")
        """
    )
    # a subprocess: the inner conftest reads its process's peak memory (/proc/self/status)
    result = pytester.runpytest_subprocess(
        f"--ddtree-endpoint={server.base_url}",
        "--ddtree-tokenizer=server",
        "--ddtree-timeout=connect=2,read=5,total=10",
        "-p",
        "no:randomly",
        timeout=120,
    )
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output and "INTERNALERROR" not in output, output[-4000:]
    # no exception escaped (the counter's own error is named in its summary line only)
    escaped = re.search(r"^E?\s*(\w+\.)*(RuntimeError|RecursionError)", output, re.MULTILINE)
    assert escaped is None, output[-4000:]
    result.assert_outcomes(passed=1, failed=3)
    # the failing /tokenize is named once, and the checks that needed it said they did not
    # run; the answer restates it as one of its caveats
    lines = [line for line in output.splitlines() if "the token counter failed" in line]
    assert [line.split(":", 1)[0] for line in lines] == ["ddtree", "caveat"], output[-4000:]
    assert all("did not run" in line for line in lines), output[-4000:]
    assert "[stream-integrity]" in output and "too-large" in output, output[-4000:]
    # endless streams cost at most the byte cap per request in flight, until the guard trips
    assert "not sent: the endpoint sent 2 answers in a row past the byte cap" in output
    peaks = {k: v // 1024 for k, v in json.loads((pytester.path / "peak.json").read_text()).items()}
    assert max(peaks.values()) < 150, peaks


def test_timeouts_under_load_are_the_clients_limit_not_broken_outputs(
    hostile: Callable[..., HostileServer],
) -> None:
    """A one-slot server queues a load of 4: the requests that wait past the read timeout
    are reported as the client's limit (with the option to raise), never as invariants the
    outputs broke, and the session's later requests still go (the server is only slow)."""
    server = hostile("one-slot", interval=0.4)
    config = EndpointConfig(server.base_url, timeout=Timeout(connect=2, read=1, total=10))
    guard = StallGuard()
    tester = LoadTester(
        config,
        judge=lambda c, **e: check(c, **e),
        concurrencies=[4],
        requests=8,
        guard=guard,
        describe=failure_text,
    )
    with pytest.raises(LoadError) as info:
        tester(["Tell me about rivers."])
    message = str(info.value)
    assert "client's time limits (connect=2,read=1,total=10), at C=4" in message, message
    assert "raise --ddtree-timeout" in message, message
    assert "broke output-quality invariants" not in message, message
    codes = {code for s in _samples_of(tester, "one-slot") for code in s.codes}
    assert "client-timeout" in codes and codes <= {"client-timeout", "not-sent"}, codes
    assert not guard.tripped  # some answers came: later requests of the session still go


def test_the_stall_note_counts_this_clients_unsent_requests_only_when_there_are_some() -> None:
    from pytest_ddtree.wire.client import DDTreeClient

    # a load point tripped the shared guard; the load test's failure counts its own requests
    guard = StallGuard()
    guard.trip("the endpoint stalled twice in a row at C=4")
    client = DDTreeClient("http://127.0.0.1:9/v1", guard=guard)
    try:
        (note,) = client.transport_notes()
        stalled = "the endpoint stalled twice in a row at C=4"
        assert str(note) == f"the stall guard stopped sending: {stalled}"
        client.not_sent = 3
        (note,) = client.transport_notes()
        assert str(note).endswith("; 3 request(s) of this client were not sent"), note
    finally:
        client.close()
