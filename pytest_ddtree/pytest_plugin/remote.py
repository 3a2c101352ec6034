"""Load hosts over execnet: the controller's side of a run over ``--tx`` gateways.

Before each worker starts, the controller sends ``_hostprobe`` to its host: the host says
which pytest-ddtree it runs (another version than the controller's is refused, in one line
naming both) and leaves a clock channel answered from execnet's receiver thread. Over it the
controller reads the host's wall-clock offset NTP-style (the quickest of a few exchanges,
± half its round trip) at the start, and again when the worker goes down; a worker that
goes down with an error marks its host as died mid-run. The ledger (``measure.load.hosts``)
then aligns the send instants and draws the per-host table.

The socket and ssh gateways need no copy of the tests: run an installed package with
``--pyargs`` (pytest-xdist rewrites only arguments that are existing local paths).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from pytest_ddtree.core import __version__
from pytest_ddtree.measure.load.hosts import (
    LOCAL,
    UNREACHABLE,
    ClockReading,
    HostClock,
    Hosts,
    Release,
)
from pytest_ddtree.pytest_plugin.session import HOST_KEY

#: exchanges per offset reading (the quickest one counts)
ROUNDS = 8
#: seconds to wait for a host's answer before its offset counts as unknown
PROBE_TIMEOUT = 10.0
#: guards the barrier: workers arrive from execnet's receiver threads, tests end and
#: workers go down on the main thread
_LOCK = threading.Lock()


def host_name(spec: Any, group: Any = None) -> str:
    """The host of an execnet spec: ``local`` (popen), the ssh target, the socket address;
    a worker reached through a ``--px`` proxy (``via=``) is on the proxy's host."""
    via = getattr(spec, "via", None)
    if via and group is not None:
        try:
            return host_name(group[via].spec)
        except (KeyError, AttributeError):
            return str(via)
    if getattr(spec, "ssh", None):
        return str(spec.ssh)
    if getattr(spec, "socket", None):
        return str(spec.socket)
    return LOCAL


def configure(config: pytest.Config) -> None:
    """Controller side, before pytest-xdist starts: under ``--dist each`` a worker that dies
    is not replaced (the replacement would take another id, so another share of the load):
    its host is named in a partial answer instead. ``--max-worker-restart`` given wins."""
    option = config.option
    if getattr(option, "dist", "no") == "each" and getattr(option, "maxworkerrestart", 0) is None:
        option.maxworkerrestart = "0"
    crowded = crowded_proxy(getattr(option, "px", None) or (), getattr(option, "tx", None) or ())
    if crowded:
        raise pytest.UsageError(crowded)


def crowded_proxy(px: Sequence[str], tx: Sequence[str]) -> str:
    """Why these ``--px``/``--tx`` would end in an INTERNALERROR (empty: they would not).

    pytest-xdist (3.6 and later) runs its gateways in the ``main_thread_only`` execution
    model; making a second gateway through one proxy (``--tx 2*popen//via=ID``) calls
    ``remote_exec`` on the proxy while the first one's is still running, which that model
    refuses ("concurrent remote_exec would cause deadlock"), whether it is the default or
    named. A proxy in the ``thread`` model takes several.
    """
    import execnet

    through: dict[str, int] = {}
    for raw in tx:
        count, star, rest = raw.partition("*")
        try:  # as pytest-xdist reads it: N*spec, else one
            n, spec = (int(count), rest) if star else (1, raw)
        except ValueError:
            n, spec = 1, raw
        via = execnet.XSpec(spec).via
        if via:
            through[via] = through.get(via, 0) + n
    for raw in px:
        proxy = execnet.XSpec(raw)
        carried = through.get(str(proxy.id), 0)
        if carried > 1 and proxy.execmodel in (None, "main_thread_only"):
            return (
                f"ddtree: --px {raw} carries {carried} workers (--tx ...//via="
                f"{proxy.id}): add //execmodel=thread to it (pytest-xdist's default model "
                "takes one gateway per proxy; without it the run ends in an INTERNALERROR)"
            )
    return ""


def node_up(hosts: Hosts, node: Any) -> None:
    """Controller side, a worker's gateway is up: check its version, read its clock."""
    gateway = node.gateway
    worker = str(gateway.id)
    name = host_name(gateway.spec, getattr(gateway, "_group", None))
    from pytest_ddtree.pytest_plugin import _hostprobe

    channel = gateway.remote_exec(_hostprobe)
    try:
        hello = channel.receive(timeout=PROBE_TIMEOUT)
    except Exception as exc:  # an old host without the probe's answer: its version is unknown
        raise pytest.UsageError(
            f"ddtree: host {name} ({worker}) did not say which pytest-ddtree it runs "
            f"({_first_line(exc)}); the controller runs {__version__}"
        ) from None
    theirs = str(hello.get("version"))
    if theirs != __version__:
        raise pytest.UsageError(
            f"ddtree: host {name} ({worker}) runs pytest-ddtree {theirs}, the controller "
            f"{__version__}: install the same version on every host"
        )
    node.workerinput[HOST_KEY] = name  # the worker names its host in its own lines
    node.ddtree_clock = hello["clock"]
    clock = None if name == LOCAL else HostClock(start=read_offset(hello["clock"]))
    hosts.add(worker, name, clock)
    gate = hello.get("start")
    if gate is not None:
        join(hosts, worker, gate)


def join(hosts: Hosts, worker: str, gate: Any) -> None:
    """The worker's runs of split load tests pass the barrier through ``gate``."""
    barrier = hosts.barrier
    host = hosts.by_worker[worker]
    if host.clock is not None and host.clock.start is not None:
        barrier.lead = max(barrier.lead, 4 * host.clock.start.error)

    def arrive(mark: Any) -> None:
        nodeid, call, run = mark
        with _LOCK:
            release(hosts, barrier.arrive(worker, (str(nodeid), int(call), int(run)), time.time()))

    with _LOCK:
        hosts.gates[worker] = gate
        barrier.join(worker)
    gate.setcallback(arrive)


def release(hosts: Hosts, releases: list[Release]) -> None:
    """Send each released worker its run's start, on its host's clock (under ``_LOCK``)."""
    for each in releases:
        for worker in each.workers:
            host, gate = hosts.by_worker.get(worker), hosts.gates.get(worker)
            if host is None or gate is None:
                continue
            offset = host.clock.offset_at(each.at) if host.clock is not None else 0.0
            try:
                gate.send((list(each.mark), each.at + (offset or 0.0)))
            except Exception:  # gone already: node_down names it
                continue


def test_done(hosts: Hosts, worker: str, nodeid: str) -> None:
    """Controller side, a worker has finished a test: no run of it waits for that worker."""
    with _LOCK:
        release(hosts, hosts.barrier.finish(worker, nodeid, time.time()))


def node_down(hosts: Hosts, node: Any, error: Any, start_error: str | None) -> None:
    """Controller side, a worker went down: its host's offset at the end, or its fault."""
    worker = str(node.gateway.id)
    with _LOCK:
        release(hosts, hosts.barrier.leave(worker, time.time()))
        gate = hosts.gates.pop(worker, None)
    if gate is not None:  # open, with its callback, it holds the gateway's exit 10 s
        gate.close()
    if error is not None:
        hosts.update(worker, fault=f"died mid-run ({_first_line(error)})")
        return
    channel = getattr(node, "ddtree_clock", None)
    host = hosts.by_worker.get(worker)
    end = None
    if channel is not None and host is not None and not host.local:
        end = read_offset(channel, timeout=2.0)
    fault = f"{UNREACHABLE}: {start_error}" if start_error else ""
    hosts.update(worker, end=end, fault=fault)
    if channel is not None:
        channel.close()


def read_offset(channel: Any, *, timeout: float = PROBE_TIMEOUT) -> ClockReading | None:
    """The host's offset from ``ROUNDS`` exchanges over its clock channel (None: no answer)."""
    exchanges = []
    for _ in range(ROUNDS):
        try:
            sent = time.time()
            channel.send(None)
            remote = float(channel.receive(timeout=timeout))
            exchanges.append((sent, remote, time.time()))
        except Exception:
            break
    return ClockReading.best(exchanges)


def _first_line(error: Any) -> str:
    text = str(getattr(error, "value", error)).strip()
    return (text.splitlines() or ["no reason given"])[0][:200]
