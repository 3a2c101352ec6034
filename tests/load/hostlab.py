"""Load hosts for tests and benchmarks: execnet socket servers on loopback, and a lab of
network namespaces joined by veth pairs (hosts on one machine), reached by execnet's socket
server or by ssh (an sshd the lab starts in the namespace, with throwaway keys).

The lab's traffic stays on loopback and on the veth pairs it creates, with the addresses it
assigns (``10.231.0.0/16``); every name carries a per-run tag, and everything it made is
removed when it closes (servers stopped by pid, namespaces deleted, which deletes their
veths and routes). Needs root and ``ip`` (``Lab.unavailable`` says why not, in one line).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import execnet.script.socketserver as _socketserver

SOCKETSERVER = _socketserver.__file__
SSHD = "/usr/sbin/sshd"
#: the endpoint's service address in the lab (on its namespace's loopback, routed to by all)
SERVICE = "10.231.9.9"
_LISTENING = re.compile(r"Entering Accept loop \('[\d.]+', (\d+)\)")


@dataclass
class Proc:
    """A process the lab started (stopped by its pid), its output in ``log``."""

    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stop(self) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        self.popen.wait(timeout=10)

    def wait_for(self, pattern: re.Pattern[str], timeout: float = 20.0) -> re.Match[str]:
        """The first match of ``pattern`` in the output (the process failing is an error)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = pattern.search(self.log.read_text(errors="replace"))
            if found:
                return found
            if self.popen.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"no {pattern.pattern!r} from pid {self.pid}: {self.log.read_text()}")


def start(argv: Sequence[str], log: Path, env: dict[str, str] | None = None) -> Proc:
    with log.open("wb") as out:
        popen = subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            cwd=log.parent,
        )
    return Proc(popen, log)


def socket_server_argv(address: str, prelude: str = "") -> list[str]:
    """A Python running execnet's socket server on ``address`` (port 0: a free one), after
    ``prelude`` (code run first, in the same interpreter the workers then run in)."""
    code = f"{prelude}\nimport runpy\nrunpy.run_path({SOCKETSERVER!r}, run_name='__main__')"
    return [sys.executable, "-u", "-c", code, address]


def socket_server(
    directory: Path,
    name: str,
    address: str = "127.0.0.1:0",
    prelude: str = "",
    netns: str | None = None,
    env: dict[str, str] | None = None,
) -> tuple[Proc, str]:
    """Start a socket server (in ``netns`` if given, with ``env`` added to this process's
    environment); the process and its ``host:port``."""
    home = directory / name
    home.mkdir(parents=True, exist_ok=True)
    argv = socket_server_argv(address, prelude)
    if netns:
        argv = ["ip", "netns", "exec", netns, *argv]
    proc = start(argv, home / "server.log", env)
    port = proc.wait_for(_LISTENING).group(1)
    return proc, f"{address.rsplit(':', 1)[0]}:{port}"


def run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


@dataclass
class Lab:
    """Network namespaces as hosts: ``endpoint`` serving ``SERVICE``, worker hosts, and the
    controller in the root namespace. ``host(name, reach_endpoint)`` adds a worker host."""

    directory: Path
    tag: str = field(default_factory=lambda: secrets.token_hex(2))
    namespaces: list[str] = field(default_factory=list)
    procs: list[Proc] = field(default_factory=list)
    subnet: int = 0
    endpoint_ns: str = ""

    @staticmethod
    def unavailable(ssh: bool = False) -> str:
        """Why namespaces (and with ``ssh``, hosts reached by ssh) cannot be made here
        (empty: they can)."""
        if ssh and not (Path(SSHD).exists() and shutil.which("ssh") and shutil.which("ssh-keygen")):
            return f"ssh hosts: no {SSHD} or ssh client (openssh-server, openssh-client)"
        if shutil.which("ip") is None:
            return "network namespaces: no `ip` command (iproute2)"
        if os.geteuid() != 0:
            return "network namespaces: not root (ip netns add needs CAP_SYS_ADMIN)"
        probe = f"ddp{secrets.token_hex(3)}"
        made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
        if made.returncode != 0:
            return f"network namespaces: ip netns add failed: {made.stderr.strip()}"
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
        routes = subprocess.run(["ip", "route"], capture_output=True, text=True).stdout
        if "10.231." in routes:
            return "network namespaces: 10.231.0.0/16 is already routed on this machine"
        return ""

    def namespace(self, name: str) -> str:
        ns = f"dd{self.tag}{name}"
        run("ip", "netns", "add", ns)
        self.namespaces.append(ns)
        run("ip", "-n", ns, "link", "set", "lo", "up")
        return ns

    def link(self, left: str | None, right: str) -> tuple[str, str]:
        """A veth pair from ``left`` (None: the root namespace) to ``right``; their addresses
        (``10.231.N.1`` on the left, ``.2`` on the right)."""
        self.subnet += 1
        n = self.subnet
        a, b = f"d{self.tag}{n}a", f"d{self.tag}{n}b"
        run("ip", "link", "add", a, "type", "veth", "peer", "name", b)
        ends = [(left, a, f"10.231.{n}.1"), (right, b, f"10.231.{n}.2")]
        for ns, dev, address in ends:
            if ns is not None:
                run("ip", "link", "set", dev, "netns", ns)
            pre = ["ip", "-n", ns] if ns else ["ip"]
            run(*pre, "addr", "add", f"{address}/24", "dev", dev)
            run(*pre, "link", "set", dev, "up")
        return ends[0][2], ends[1][2]

    def route_to_service(self, ns: str | None, via: str) -> None:
        pre = ["ip", "-n", ns] if ns else ["ip"]
        run(*pre, "route", "add", f"{SERVICE}/32", "via", via)

    def endpoint(self, *server_args: str) -> str:
        """The namespace ``e`` serving the reference server on ``SERVICE``, reached from the
        root namespace (the controller) over its own pair; its URL."""
        ns = self.namespace("e")
        run("ip", "-n", ns, "addr", "add", f"{SERVICE}/32", "dev", "lo")
        _, there = self.link(None, ns)
        self.route_to_service(None, there)
        self.endpoint_ns = ns
        home = self.directory / "endpoint"
        home.mkdir(parents=True, exist_ok=True)
        argv = ["ip", "netns", "exec", ns, sys.executable, "-m", "pytest_ddtree.reference"]
        proc = start([*argv, "--host", SERVICE, "--port", "8000", *server_args], home / "log")
        self.procs.append(proc)
        proc.wait_for(re.compile(r"listening on (http://\S+)"))
        return f"http://{SERVICE}:8000/v1"

    def _joined(self, name: str, reach_endpoint: bool) -> tuple[str, str]:
        """A host's namespace, joined to the controller's and (``reach_endpoint``) routed to
        the endpoint's; the namespace and its address on the controller's side."""
        ns = self.namespace(name)
        _, here = self.link(None, ns)
        if reach_endpoint:
            _, there = self.link(ns, self.endpoint_ns)
            self.route_to_service(ns, there)
        return ns, here

    def worker_host(self, name: str, *, reach_endpoint: bool = True) -> tuple[Proc, str]:
        """A worker host: a namespace joined to the controller's (for execnet) and, unless
        told otherwise, to the endpoint's; its socket server and ``host:port``."""
        ns, here = self._joined(name, reach_endpoint)
        proc, address = socket_server(self.directory, name, f"{here}:8888", netns=ns)
        self.procs.append(proc)
        return proc, address

    def ssh_host(self, name: str, *, reach_endpoint: bool = True) -> str:
        """A worker host reached by ssh: a namespace joined like ``worker_host``, with an sshd
        the lab starts in it (its own host key; root logs in with the lab's throwaway key
        only); the ``--tx``/``--px`` spec of it (``ssh=root@ADDRESS//ssh_config=...``)."""
        ns, here = self._joined(name, reach_endpoint)
        home = self.directory / name
        home.mkdir(parents=True, exist_ok=True)
        keys = self._ssh_keys()
        run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(home / "host_key"))
        config = home / "sshd_config"
        config.write_text(
            "\n".join(
                (
                    f"ListenAddress {here}:22",
                    f"HostKey {home / 'host_key'}",
                    f"AuthorizedKeysFile {keys / 'id.pub'}",
                    "PermitRootLogin prohibit-password",
                    "AllowUsers root",
                    "AuthenticationMethods publickey",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "StrictModes no",
                    "PidFile none",
                    "",
                )
            )
        )
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege separation
        argv = ["ip", "netns", "exec", ns, SSHD, "-D", "-e", "-f", str(config)]
        proc = start(argv, home / "sshd.log")
        self.procs.append(proc)
        proc.wait_for(re.compile(r"Server listening on"))
        return f"ssh=root@{here}//ssh_config={keys / 'ssh_config'}"

    def _ssh_keys(self) -> Path:
        """The lab's client key and the ssh_config that uses it (made once)."""
        keys = self.directory / "ssh"
        if not (keys / "id").exists():
            keys.mkdir(parents=True, exist_ok=True)
            run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "id"))
            (keys / "ssh_config").write_text(
                "\n".join(
                    (
                        "Host 10.231.*",
                        f"  IdentityFile {keys / 'id'}",
                        "  IdentitiesOnly yes",
                        "  BatchMode yes",
                        "  StrictHostKeyChecking no",
                        "  UserKnownHostsFile /dev/null",
                        "  LogLevel ERROR",
                        "",
                    )
                )
            )
        return keys

    def close(self) -> None:
        for proc in reversed(self.procs):
            with contextlib.suppress(Exception):
                proc.stop()
        for n in range(1, self.subnet + 1):  # the root namespace's ends, gone at once
            subprocess.run(["ip", "link", "del", f"d{self.tag}{n}a"], capture_output=True)
        for ns in reversed(self.namespaces):  # takes its veths, their peers and routes along
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.procs.clear()
        self.namespaces.clear()


#: set (by CI): a lab test fails where namespaces cannot be made, instead of skipping
REQUIRE_ENV = "DDTREE_REQUIRE_NAMESPACES"


def require_lab(ssh: bool = False) -> None:
    """Skip a lab test with the one-line reason namespaces (with ``ssh``, ssh hosts) cannot
    be made here (fail instead when ``DDTREE_REQUIRE_NAMESPACES`` is set: a tier that should
    run cannot pass by skipping)."""
    import pytest

    why = Lab.unavailable(ssh)
    if not why:
        return
    if os.environ.get(REQUIRE_ENV):
        pytest.fail(f"{REQUIRE_ENV} is set, but {why}", pytrace=False)
    pytest.skip(why)


@contextlib.contextmanager
def lab(directory: Path) -> Iterator[Lab]:
    """A lab, always closed."""
    made = Lab(directory)
    try:
        yield made
    finally:
        made.close()


#: a tiny load: one budget, total concurrency 4, 16 requests, short answers
LOAD_ARGS = (
    "--pyargs",
    "pytest_ddtree.suite",
    "-k",
    "test_load",
    "--ddtree-budgets=16",
    "--ddtree-load-concurrency=4",
    "--ddtree-max-tokens=32",
    "-p",
    "no:cacheprovider",
)


def run_load(
    directory: Path, url: str, name: str, *tx: str, requests: int = 16
) -> tuple[str, dict[str, object]]:
    """The bundled suite's load test (``requests`` in all) against ``url`` from ``tx`` hosts
    (socket addresses, or whole ``--tx=...``/``--px=...`` arguments; none: this process
    alone); its terminal output and its ``load`` test from sweep.json."""
    import json

    report = directory / f"report-{name}"
    gateways = [t if t.startswith("--") else f"--tx=socket={t}" for t in tx]
    spread = ["--dist=each", *gateways] if tx else []
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *LOAD_ARGS,
            f"--ddtree-load-requests={requests}",
            f"--ddtree-endpoint={url}",
            f"--ddtree-report={report}",
            *spread,
        ],
        capture_output=True,
        text=True,
        cwd=directory,
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"the {name} run failed ({done.returncode}):\n{done.stdout}{done.stderr}"
        )
    (test,) = json.loads((report / "sweep.json").read_text())["load"]["tests"]
    return done.stdout, test


def medians(test: dict[str, object]) -> dict[str, tuple[float, tuple[float, float]]]:
    """Median TPOT and TTFT (ms) of a load test's valid samples, each with its 95% bootstrap
    interval."""
    import statistics

    from pytest_ddtree.measure.sweep.bootstrap import bootstrap_median_ci

    samples = [s for s in test["samples"] if s["valid"]]  # type: ignore[attr-defined]
    figures = {
        "TPOT": [
            1000 / s["decode_tokens_per_second"]
            for s in samples
            if s.get("decode_tokens_per_second")
        ],
        "TTFT": [1000 * s["ttft"] for s in samples if s.get("ttft") is not None],
    }
    out = {}
    for name, values in figures.items():
        ci = bootstrap_median_ci(values, seed=0)
        assert ci is not None
        out[name] = (statistics.median(values), ci)
    return out


def agree(
    a: dict[str, tuple[float, tuple[float, float]]], b: dict[str, tuple[float, tuple[float, float]]]
) -> dict[str, bool]:
    """Per figure: each run's median within the other's interval."""
    return {
        k: b[k][1][0] <= a[k][0] <= b[k][1][1] and a[k][1][0] <= b[k][0] <= a[k][1][1] for k in a
    }


def three_hosts_and_one(directory: Path) -> tuple[str, str, dict[str, object], dict[str, object]]:
    """The same load from the controller plus two worker namespaces, then from the controller
    alone, against one reference server in its own namespace: both outputs and tests."""
    with lab(directory) as made:
        url = made.endpoint()
        _, a = made.worker_host("a")
        _, b = made.worker_host("b")
        spread_out, spread = run_load(directory, url, "three-hosts", a, b)
        alone_out, alone = run_load(directory, url, "one-host")
    return spread_out, alone_out, spread, alone
