"""Terminal transcripts in the docs, regenerated from real runs.

A transcript in README.md or a page of ``docs/`` sits between two markers naming its excerpt::

    <!-- ddtree:transcript suite-end -->
    ```text
    ...
    ```
    <!-- /ddtree:transcript -->

An excerpt is a choice of lines (``Piece``) of what one ``Scenario`` prints: a command run for
real in a fresh temporary directory (the embedded reference server, a bad option, a dead
endpoint, llama.cpp's server). ``python docs/generate.py`` runs the scenarios and writes the
blocks; a gap between the chosen lines shows as ``...``. Machine-specific parts are masked:
temporary directories and the checkout show as ``...``, the home directory as ``~``, the
ports the system picked as ``<port>``.

Timings and counts differ run to run, so ``drift`` compares what a reader relies on: every
shown line must still be a line the scenario prints now, in the same order, with digit runs,
rule widths and a few load-dependent notes (``VOLATILE``) masked, and a table's data rows only
as rows. A stale message, a renamed column or an old summary format fails.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
REGENERATE = "python docs/generate.py"
GAP = "..."


@dataclass(frozen=True)
class Scenario:
    """A command a reader runs, run for real.

    ``shown`` is the command as the docs show it (``pytest ...`` runs as ``python -m pytest``
    with this checkout first on the path). ``files`` are written into the empty directory it
    runs in (``dirname``). ``server``, when set, is started first in the background, its output
    read until a line holds ``ready``, and stopped at the end; its lines are the ``server``
    stream, the command's the ``run`` stream. ``baseline_server``, when set, is a second one
    (a target-only twin beside a speculative ``server``), started after it the same way; its
    lines are the ``baseline`` stream. ``engine`` names what the scenario needs beyond
    this package; such a scenario runs only when asked for (``--engine NAME``; ``--llamacpp``
    is ``--engine llamacpp``). ``passenv`` names variables of the caller's environment that
    reach the commands (where an engine's virtualenv is), which are otherwise left out.
    """

    name: str
    shown: str
    dirname: str = "your-project"
    files: Callable[[], dict[str, str]] = dict
    server: str | None = None
    ready: str = "serving http"
    baseline_server: str | None = None
    engine: str | None = None
    timeout: float = 900
    passenv: tuple[str, ...] = ()


@dataclass(frozen=True)
class Piece:
    """Lines of a stream: from the first line matching ``start`` (or the first line) on,
    ``count`` lines or up to and including the first later line matching ``stop`` (or the
    last line); ``last`` takes the last ``last`` lines instead."""

    start: str | None = None
    stop: str | None = None
    count: int | None = None
    last: int | None = None

    def select(self, lines: Sequence[str]) -> range:
        if self.last is not None:
            return range(max(0, len(lines) - self.last), len(lines))
        begin = 0
        if self.start is not None:
            begin = next((i for i, x in enumerate(lines) if re.search(self.start, x)), -1)
            if begin < 0:
                raise LookupError(f"no line matches {self.start!r}")
        end = len(lines)
        if self.count is not None:
            end = min(end, begin + self.count)
        elif self.stop is not None:
            end = next(
                (i + 1 for i in range(begin + 1, len(lines)) if re.search(self.stop, lines[i])),
                -1,
            )
            if end < 0:
                raise LookupError(f"no line matches {self.stop!r} after {self.start!r}")
        return range(begin, end)


@dataclass(frozen=True)
class Excerpt:
    """What one transcript block shows: pieces of a scenario's stream, after ``$ command``."""

    scenario: str
    pieces: tuple[Piece, ...] = (Piece(),)
    stream: str = "run"
    prompt: bool = True

    def command(self, scenario: Scenario) -> str:
        """The command whose output the excerpt shows."""
        if self.stream == "server":
            return scenario.server or ""
        if self.stream == "baseline":
            return scenario.baseline_server or ""
        return scenario.shown

    def render(self, scenario: Scenario, lines: Sequence[str]) -> list[str]:
        chosen = sorted({i for piece in self.pieces for i in piece.select(lines)})
        out = [f"$ {self.command(scenario)}"] if self.prompt else []
        if chosen and chosen[0] > 0 and self.prompt:
            out.append(GAP)
        previous = None
        for i in chosen:
            if previous is not None and i != previous + 1:
                out.append(GAP)
            out.append(lines[i])
            previous = i
        if previous is not None and previous < len(lines) - 1:
            out.append(GAP)
        return out


def _rivers_test() -> dict[str, str]:
    # the test of writing-tests.md is the first Python block of that page, run as written
    page = (DOCS / "writing-tests.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", page, re.DOTALL)
    assert code, "writing-tests.md has no Python block"
    return {"test_rivers.py": code.group(1)}


#: a server whose /models answers and whose every completion is an HTML 502, as a dead
#: deployment behind a proxy
_SERVER_502 = """\
import http.server, json, sys

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]})
        self._send(200, "application/json", body)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self._send(502, "text/html", "<html><body><h1>502 Bad Gateway</h1></body></html>")

    def _send(self, status, kind, body):
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
print(f"serving http://127.0.0.1:{server.server_port}/v1", flush=True)
server.serve_forever()
"""


def _server_502() -> dict[str, str]:
    return {"server_502.py": _SERVER_502}


def _user_check() -> dict[str, str]:
    # writing-tests.md's hook, as the page shows it, and a timed test of the README
    page = (DOCS / "writing-tests.md").read_text(encoding="utf-8")
    hook = next(
        block
        for block in re.findall(r"```python\n(.*?)```", page, re.DOTALL)
        if "def pytest_ddtree_check" in block
    )
    test = (
        "def test_timed(ddtree_benchmark, tree_budget):\n"
        '    ddtree_benchmark("Write a detailed essay about rivers.", max_tokens=128)\n'
    )
    return {"conftest.py": hook, "test_timed.py": test}


def _bad_prompts() -> dict[str, str]:
    return {
        "traffic.jsonl": (
            '{"id": "support-0007", "prompt": "Why was I charged twice?",'
            ' "expect": {"min_tokens": 16}}\n'
            '{"id": "sql-0012", "prompt": "Write a SQL query that lists the ten largest'
            ' invoices of 2025.", "expect": {"min_token": 24}}\n'
        )
    }


SUITE = "pytest --pyargs pytest_ddtree.suite"
FIRST_RUN = (
    f"{SUITE} --ddtree-endpoint http://127.0.0.1:8080/v1 --ddtree-budget-mode none"
    " --ddtree-load-concurrency 1,4 --ddtree-report ddtree-report"
)

SCENARIOS = {
    s.name: s
    for s in [
        Scenario("suite", SUITE),
        Scenario("early-eos", f"{SUITE} -x --ddtree-reference-fault early-eos"),
        Scenario("role-leak", f"{SUITE} -x --ddtree-reference-fault role-leak"),
        Scenario("overrun", f"{SUITE} -x --ddtree-reference-fault overrun"),
        Scenario("dead-endpoint", f"{SUITE} --ddtree-endpoint http://127.0.0.1:9/v1"),
        Scenario(
            "endpoint-502",
            f"{SUITE} --ddtree-endpoint http://127.0.0.1:8502/v1",
            files=_server_502,
            server="python server_502.py 8502",
        ),
        Scenario("bad-budgets", f"{SUITE} --ddtree-budgets 16,x"),
        Scenario("bad-slo", f"{SUITE} --ddtree-slo ttft=fast"),
        Scenario("bad-goodput", f"{SUITE} --ddtree-slo ttft=500ms,goodput=0.95"),
        Scenario(
            "bad-prompts",
            f"{SUITE} --ddtree-prompts traffic.jsonl",
            files=_bad_prompts,
        ),
        Scenario("rivers", "pytest test_rivers.py -q", files=_rivers_test),
        Scenario("init", "ddtree-suite init tests/ddtree"),
        Scenario("user-check", "pytest test_timed.py -q --ddtree-budgets 64", files=_user_check),
        Scenario(
            "first-run",
            FIRST_RUN,
            dirname="first-run",
            server="python -m pytest_ddtree.engines --speculation ngram --port 8080",
            engine="llamacpp",
            timeout=1800,
        ),
    ]
}

# the sections of the bundled suite's end
_SWEEP = r"^-+ pytest-ddtree budget sweep -+$"
_LEGEND = r"sweep\.md#columns\)$"  # the legend's last line
_RECOMMENDED = r"^(Recommended|Undecided|No budget)"
_LOAD = r"^-+ pytest-ddtree load -+$"
_ANSWER = r"^-+ pytest-ddtree: the answer -+$"
_FAILURE = r"^E\s+pytest_ddtree\.InvariantError"

EXCERPTS = {
    # README.md: the sweep table and the run's answer
    "suite-sweep-and-answer": Excerpt(
        "suite",
        (Piece(_SWEEP, stop=_LEGEND), Piece(_ANSWER)),
    ),
    # docs/index.md: the whole run, its long tables cut
    "suite-run": Excerpt(
        "suite",
        (
            Piece(stop=r"^test_load\.py"),
            Piece(_SWEEP, stop=_RECOMMENDED),
            Piece(_LOAD, stop=r"^\s+schedule:"),
            Piece(r"^ddtree: add --ddtree-report|^ddtree: sweep report written", count=1),
            Piece(_ANSWER),
        ),
    ),
    "early-eos-failure": Excerpt("early-eos", (Piece(_FAILURE, stop=r"what to do:"),)),
    "early-eos-end": Excerpt("early-eos", (Piece(_FAILURE, stop=r"what to do:"), Piece(last=2))),
    "role-leak-failure": Excerpt(
        "role-leak", (Piece(_FAILURE, stop=r"what to do:"),), prompt=False
    ),
    "role-leak-end": Excerpt("role-leak", (Piece(_FAILURE, stop=r"what to do:"),)),
    "overrun-failure": Excerpt("overrun", (Piece(_FAILURE, stop=r"what to do:"),)),
    "dead-endpoint": Excerpt("dead-endpoint", (Piece(last=2),)),
    "endpoint-502": Excerpt("endpoint-502", (Piece(r"^ddtree: stopped early"),), prompt=False),
    "bad-budgets": Excerpt("bad-budgets", (Piece(r"^ERROR", count=1),), prompt=False),
    "bad-slo": Excerpt("bad-slo", (Piece(r"^ERROR", count=1),), prompt=False),
    "bad-goodput": Excerpt("bad-goodput", (Piece(r"^ERROR", count=1),), prompt=False),
    "bad-prompts": Excerpt("bad-prompts", (Piece(r"^ERROR", count=1),), prompt=False),
    "rivers": Excerpt("rivers"),
    "init": Excerpt("init"),
    "user-check": Excerpt("user-check", (Piece(r"^E\s+\[no-source\]", count=2),), prompt=False),
    # docs/first-run.md
    "first-run-server": Excerpt("first-run", (Piece(r"serving http", count=1),), stream="server"),
    "first-run": Excerpt(
        "first-run",
        (
            Piece(stop=r"^test_load\.py"),
            *(
                Piece(rf"^_+ test_smoke\[{prompt}\] _+$", stop=r"what to do:")
                for prompt in ("list-garden", "capital", "tool-weather")
            ),
            # the sweep, not the load section: how many requests a one-slot server on a shared
            # machine answers in time under load differs run to run
            Piece(_SWEEP, stop=_RECOMMENDED),
            Piece(r"^ddtree: statistics dialect detected", count=1),
            Piece(_ANSWER, count=4),
            Piece(last=1),
        ),
        prompt=False,
    ),
}


# -- running ------------------------------------------------------------------------------

_EPHEMERAL_PORT = re.compile(r"(127\.0\.0\.1|localhost):(\d{5})\b")


def mask(text: str, workdir: Path) -> str:
    """``text`` without what belongs to this machine: paths, the home directory, the ports the
    system picked (from 32768 up: Linux's ephemeral range; a port a reader chooses stays)."""
    import pytest_ddtree

    package_parent = str(Path(pytest_ddtree.__file__).resolve().parent.parent)
    for path in sorted(
        {str(workdir.parent), str(workdir.resolve().parent), package_parent, str(ROOT)},
        key=len,
        reverse=True,
    ):
        text = text.replace(path + os.sep, "..." + os.sep).replace(path, "...")
    text = text.replace(str(Path.home()) + os.sep, "~" + os.sep)
    text = re.sub(re.escape(tempfile.gettempdir()) + r"/[^\s'\"):,;]+", ".../tmp", text)

    def port(match: re.Match[str]) -> str:
        return f"{match.group(1)}:<port>" if int(match.group(2)) >= 32768 else match.group(0)

    text = _EPHEMERAL_PORT.sub(port, text)
    return "\n".join(line.rstrip() for line in text.splitlines())


def _env() -> dict[str, str]:
    # the run a reader gets: none of this shell's pytest or ddtree settings, an 80-column
    # terminal, this checkout's package first
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DDTREE_", "PYTEST_", "PY_COLORS"))
        and k not in {"CI", "OPENAI_API_KEY", "COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR"}
    }
    env["COLUMNS"] = "80"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return env


def _argv(command: str) -> list[str]:
    words = shlex.split(command)
    if words[0] == "pytest":
        return [sys.executable, "-m", "pytest", *words[1:]]
    if words[0] == "python":
        return [sys.executable, *words[1:]]
    if words[0] == "ddtree-suite":  # the console script, from this checkout
        return [sys.executable, "-m", "pytest_ddtree.pytest_plugin.bundle", *words[1:]]
    return words


def _start_server(
    scenario: Scenario, cwd: Path, env: dict[str, str], command: str | None = None
) -> tuple[subprocess.Popen[str], list[str]]:
    command = command or scenario.server
    assert command
    proc = subprocess.Popen(
        _argv(command),
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    assert proc.stdout is not None
    deadline = time.monotonic() + 600
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if scenario.ready in line:
            # keep reading its log: a server whose pipe is full blocks on its next log line
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc, lines
        if time.monotonic() > deadline:
            break
    _stop(proc)
    raise RuntimeError(f"{command!r} did not get ready:\n" + "\n".join(lines[-20:]))


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)  # its own session: the engine and its children
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run(scenario: Scenario) -> dict[str, list[str]]:
    """Run ``scenario`` in a fresh directory; its streams, masked, one string a line."""
    env = _env()
    env.update({k: os.environ[k] for k in scenario.passenv if k in os.environ})
    with tempfile.TemporaryDirectory(prefix="ddtree-docs-") as tmp:
        workdir = Path(tmp) / scenario.dirname
        workdir.mkdir()
        for name, content in scenario.files().items():
            (workdir / name).write_text(content, encoding="utf-8")
        servers: list[subprocess.Popen[str]] = []
        server_lines: list[str] = []
        baseline_lines: list[str] = []
        try:
            if scenario.server:
                server, server_lines = _start_server(scenario, workdir, env)
                servers.append(server)
            if scenario.baseline_server:
                baseline, baseline_lines = _start_server(
                    scenario, workdir, env, scenario.baseline_server
                )
                servers.append(baseline)
            result = subprocess.run(
                _argv(scenario.shown),
                cwd=workdir,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=scenario.timeout,
            )
        finally:
            for proc in reversed(servers):
                _stop(proc)
        streams = {
            "run": result.stdout,
            "server": "\n".join(server_lines),
            "baseline": "\n".join(baseline_lines),
        }
        return {k: mask(v, workdir).splitlines() for k, v in streams.items()}


# -- the blocks in the pages --------------------------------------------------------------


@dataclass
class Block:
    page: Path
    name: str
    lines: list[str] = field(default_factory=list)


def _hooks() -> ModuleType:
    if str(DOCS) not in sys.path:
        sys.path.insert(0, str(DOCS))
    import hooks

    return hooks


def blocks(pages: Iterable[Path]) -> list[Block]:
    """Every transcript block of ``pages``; a marker without a known excerpt raises."""
    hooks = _hooks()
    found = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for section in hooks.sections(text):
            if section.name != "transcript":
                continue
            if section.arg not in EXCERPTS:
                raise hooks.DocsError(f"{page.name}: unknown transcript {section.arg!r}")
            body = text[section.body[0] : section.body[1]]
            code = re.fullmatch(r"\s*```text\n(.*?)\n```\s*", body, re.DOTALL)
            if code is None:
                raise hooks.DocsError(
                    f"{page.name}: transcript {section.arg} is not one ```text block"
                )
            found.append(Block(page, section.arg, code.group(1).splitlines()))
    return found


def _framed(lines: list[str]) -> str:
    return "\n\n```text\n" + "\n".join(lines) + "\n```\n\n"


#: the last run of each scenario, masked (not committed): ``--reuse`` renders excerpts from it
RUNS = ROOT / ".docs-runs"


def write(
    names: Iterable[str],
    pages: Sequence[Path],
    log: Callable[[str], object],
    reuse: bool = False,
) -> list[str]:
    """Run the scenarios ``names`` (or, with ``reuse``, read their last run) and rewrite the
    transcript blocks that show them."""
    hooks = _hooks()
    wanted = set(names)
    outputs = {}
    for name in SCENARIOS:
        if name not in wanted:
            continue
        saved = RUNS / f"{name}.json"
        if reuse:
            if not saved.exists():
                raise FileNotFoundError(f"no saved run of {name}: run without --reuse first")
            outputs[name] = json.loads(saved.read_text(encoding="utf-8"))
            continue
        started = time.monotonic()
        outputs[name] = run(SCENARIOS[name])
        log(f"scenario {name}: {time.monotonic() - started:.0f} s")
        RUNS.mkdir(exist_ok=True)
        saved.write_text(json.dumps(outputs[name], indent=1), encoding="utf-8")
    changed = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        out, pos = [], 0
        for section in hooks.sections(text):
            excerpt = EXCERPTS.get(section.arg or "") if section.name == "transcript" else None
            if excerpt is None or excerpt.scenario not in outputs:
                continue
            scenario = SCENARIOS[excerpt.scenario]
            lines = excerpt.render(scenario, outputs[excerpt.scenario][excerpt.stream])
            out += [text[pos : section.body[0]], _framed(lines)]
            pos = section.body[1]
        new = "".join(out) + text[pos:]
        if new != text:
            page.write_text(new, encoding="utf-8")
            changed.append(page.name)
    return changed


# -- drift --------------------------------------------------------------------------------

#: notes that depend on how loaded the machine is, removed from both sides before comparing
VOLATILE = [
    r"\s*\(UNRELIABLE[^)]*\)",
    r"\s*\(a tie at this noise\)",
    r"\s*\(\d+:\d\d:\d\d\)",  # pytest's h:mm:ss after a run of a minute or more
]
#: lines shown that a run prints or not depending on the machine's load
VOLATILE_LINES = re.compile(r"^\s*(UNRELIABLE points:|schedule:|best at C=|under load \()")
#: the environment a run was made in: the reader's differs
ENVIRONMENT = re.compile(r"^(platform |plugins: |benchmark: |rootdir: |cachedir: )")
#: a data row of a table: its values are the run's, its columns are the header's
ROW = re.compile(r"^\s*(?:[\d,]+\s|C=\d|server-default\s|test_\w+\[[^\]]*\]\s)")
PROGRESS = re.compile(r"^(?:\S+\.py )?[.sFEXx]+\s+\[\s*\d+%\]$")
#: the sweep's verdict: which one a run reaches depends on the machine's noise; its rule (the
#: mode, the margin, min n, the confidence: the last parentheses) must be the run's
VERDICT = re.compile(r"^(?:Recommended |Undecided: |Either |No budget )")


def key(line: str) -> str:
    """What a shown line must keep: its words, with numbers, rules and spacing masked."""
    for pattern in VOLATILE:
        line = re.sub(pattern, "", line)
    if PROGRESS.match(line.strip()):
        return "<progress " + line.split()[0] + ">" if ".py" in line else "<progress>"
    if ROW.match(line):
        return "<row>"
    if VERDICT.match(line):
        rule = re.findall(r"\(([^()]*)\)\s*$", line)
        line = "<verdict> " + (rule[0] if rule else "")
    line = re.sub(r"\d+", "0", line)
    line = re.sub(r"([=_\-])\1{2,}", r"\1\1\1", line)
    return " ".join(line.split())


def drift(shown: Sequence[str], current: Sequence[str]) -> list[str]:
    """The shown lines that the current output no longer prints (in order), masked by ``key``."""
    keys = [key(line) for line in current]
    missing = []
    pos = 0
    last = None
    for line in shown:
        if line == GAP or line.startswith("$ ") or ENVIRONMENT.match(line):
            continue
        if VOLATILE_LINES.match(line):
            continue
        wanted = key(line)
        if wanted == last:
            continue  # lines alike but for their numbers (a table's rows, the race's exits)
        try:
            pos = keys.index(wanted, pos) + 1
            last = wanted
        except ValueError:
            missing.append(line)
    return missing


def check(names: Iterable[str], pages: Sequence[Path]) -> list[str]:
    """Run the scenarios ``names``; one problem line per transcript that drifted."""
    wanted = set(names)
    outputs: dict[str, dict[str, list[str]]] = {}
    problems = []
    for block in blocks(pages):
        excerpt = EXCERPTS[block.name]
        if excerpt.scenario not in wanted:
            continue
        scenario = SCENARIOS[excerpt.scenario]
        if excerpt.scenario not in outputs:
            outputs[excerpt.scenario] = run(scenario)
        current = outputs[excerpt.scenario][excerpt.stream]
        command = excerpt.command(scenario)
        if excerpt.prompt and block.lines[:1] != [f"$ {command}"]:
            problems.append(
                f"{block.page.name}: transcript {block.name} does not start with '$ {command}'"
            )
        missing = drift(block.lines, current)
        if missing:
            problems.append(
                f"{block.page.name}: transcript {block.name} shows "
                f"{len(missing)} line(s) that `{command}` no longer prints, first: "
                f"{missing[0]!r}; run {REGENERATE} --only {excerpt.scenario}"
            )
    return problems


# -- docs/llamacpp.md, docs/vllm.md, docs/sglang.md: real engines, one at a time --------------
#
# Each engine scenario starts one engine (``python -m pytest_ddtree.engines``) on a port the
# page names, runs a few tests of the bundled suite against it, and stops it (the llama.cpp
# runs with a target-only baseline start a second engine beside it: the section at the end of
# this file). ``shared-server`` needs no engine:
# the reference server shared with a second client (the slow tier checks it).

#: where the launcher finds the vLLM and SGLang virtualenvs and the converted model
_ENGINE_ENV = ("DDTREE_VLLM_PYTHON", "DDTREE_SGLANG_PYTHON", "DDTREE_ENGINE_CACHE")


def _rivers_stop() -> dict[str, str]:
    # the bundled suite's essay prompt, cut at its first full stop by a stop string
    return {
        "rivers.jsonl": (
            '{"id": "essay-rivers", "prompt": "Write a long essay about rivers and the valleys'
            ' they shape.", "stop": ["."], "expect": {"min_tokens": 32}}\n'
        )
    }


def _sglang_prompts() -> dict[str, str]:
    # the bundled suite's essay prompt, and the capital question held to 40 tokens
    return {
        "prompts.jsonl": (
            '{"id": "essay-rivers", "prompt": "Write a long essay about rivers and the valleys'
            ' they shape.", "expect": {"min_tokens": 64}}\n'
            '{"id": "capital-long", "prompt": "What is the capital of France?",'
            ' "expect": {"min_tokens": 40}}\n'
        )
    }


#: a sweep whose budget 64 shares the reference server with a second client: while that budget
#: is timed, each request of the sweep starts two requests of another client beside it
_SHARED_SERVER = """\
import threading

import httpx


def test_sweep(ddtree_sweep, ddtree_runtime, ddtree_endpoint, ddtree_model):
    client = ddtree_runtime.client
    real = client.request

    def other_client():
        body = {"model": ddtree_model, "max_tokens": 16,
                "messages": [{"role": "user", "content": "Say hello."}]}
        with httpx.Client(timeout=30) as http:
            for _ in range(2):
                http.post(ddtree_endpoint + "/chat/completions", json=body).raise_for_status()

    def request(prompt, **kwargs):
        if kwargs.get("tree_budget") != 64:
            return real(prompt, **kwargs)
        other = threading.Thread(target=other_client)
        other.start()
        try:
            return real(prompt, **kwargs)
        finally:
            other.join(30)

    client.request = request
    prompts = {"a": "Write a short essay about rivers and the towns along them."}
    ddtree_sweep(prompts, max_tokens=48, rounds=2, warmup_rounds=1, order="fixed")
"""


def _shared_server() -> dict[str, str]:
    return {"test_shared.py": _SHARED_SERVER}


SCENARIOS.update(
    {
        s.name: s
        for s in [
            Scenario(
                "sglang-invariants",
                "pytest --pyargs pytest_ddtree.suite --ddtree-endpoint http://127.0.0.1:30000/v1"
                " --ddtree-budget-mode none --ddtree-prompts prompts.jsonl -k test_invariants",
                files=_sglang_prompts,
                server="python -m pytest_ddtree.engines --engine sglang --port 30000",
                engine="sglang",
                passenv=_ENGINE_ENV,
            ),
            Scenario(
                "vllm-sweep",
                "pytest --pyargs pytest_ddtree.suite --ddtree-endpoint http://127.0.0.1:8000/v1"
                " --ddtree-budget-mode none --ddtree-timeout connect=10,read=300,total=600"
                " -k test_sweep",
                server="python -m pytest_ddtree.engines --engine vllm --speculation ngram"
                " --port 8000",
                engine="vllm",
                passenv=_ENGINE_ENV,
                timeout=1500,
            ),
            Scenario(
                "shared-server",
                "pytest test_shared.py --ddtree-budgets 16,64,256 --ddtree-sweep exhaustive"
                " --ddtree-reference-latency off",
                files=_shared_server,
            ),
            Scenario(
                "llamacpp-stop",
                "pytest --pyargs pytest_ddtree.suite --ddtree-endpoint http://127.0.0.1:8080/v1"
                " --ddtree-budget-mode none --ddtree-prompts rivers.jsonl -k test_invariants",
                files=_rivers_stop,
                server="python -m pytest_ddtree.engines --speculation ngram --port 8080",
                engine="llamacpp",
            ),
        ]
    }
)

EXCERPTS.update(
    {
        # docs/llamacpp.md: llama.cpp names no stop; its /metrics line in the header
        "llamacpp-stop": Excerpt(
            "llamacpp-stop", (Piece(r"^E\s+\[early-stop\]", stop=r"^E\s+diagnosis:"),)
        ),
        "llamacpp-metrics": Excerpt(
            "llamacpp-stop", (Piece(r"^ddtree: server metrics:", count=1),), prompt=False
        ),
    }
)

EXCERPTS.update(
    {
        # docs/sglang.md: what SGLang's server says, and the stop it names
        "sglang-run": Excerpt(
            "sglang-invariants",
            (
                Piece(r"^ddtree: serving", count=2),
                Piece(r"^test_invariants\.py", count=1),
                Piece(r"^ddtree: statistics dialect detected", count=1),
                Piece(r"^FAILED"),
            ),
        ),
        "sglang-early-stop": Excerpt(
            "sglang-invariants",
            (Piece(r"^E\s+\[early-stop\]", stop=r"^E\s+stop_kind:"),),
            prompt=False,
        ),
        # docs/llamacpp.md, its SGLang section: the same evidence, with its request
        "sglang-early-stop-request": Excerpt(
            "sglang-invariants", (Piece(r"^E\s+\[early-stop\]", stop=r"^E\s+diagnosis:"),)
        ),
    }
)

EXCERPTS.update(
    {
        # docs/llamacpp.md, "Other traffic": the sweep's marks of a shared server
        "shared-server": Excerpt(
            "shared-server",
            (
                Piece(r"^tree_budget\s+valid", stop=_LEGEND),
                Piece(
                    r"^WARNING: tree_budget 64: shared server",
                    stop=r"^server counters, tree_budget 256",
                ),
            ),
            prompt=False,
        ),
    }
)

EXCERPTS.update(
    {
        # docs/vllm.md: the launcher's line, and what the sweep reads from vLLM
        "vllm-server": Excerpt("vllm-sweep", (Piece(r"serving http", count=1),), stream="server"),
    }
)

EXCERPTS.update(
    {
        "vllm-sweep": Excerpt(
            "vllm-sweep",
            (
                Piece(r"^ddtree: serving", count=2),
                Piece(_SWEEP, stop=_RECOMMENDED),
                Piece(r"^server counters", count=1),
                Piece(r"^ddtree: statistics dialect detected", count=2),
                Piece(last=1),
            ),
        ),
    }
)


# -- docs/llamacpp.md: runs with a target-only baseline, two llama.cpp servers at once -------
#
# Each starts a speculative llama.cpp server on 8080 and its target-only twin on 8081 (one
# thread each), as the page's commands name them, and runs the bundled suite against the pair:
# the diagnoses then have a baseline to replay on, and the test of losslessness in
# distribution a second server to sample from.

_LLAMACPP_BASELINE = (
    "pytest --pyargs pytest_ddtree.suite --ddtree-endpoint http://127.0.0.1:8080/v1"
    " --ddtree-baseline-endpoint http://127.0.0.1:8081/v1 --ddtree-budget-mode none"
    " --ddtree-timeout connect=5,read=60,total=120"
)
_LLAMACPP_ENGINE = "python -m pytest_ddtree.engines --speculation {} --port {} --threads 1"

SCENARIOS.update(
    {
        s.name: s
        for s in [
            # the whole suite, its load test at C=1 and 4 only (C=8 on a one-slot server is
            # minutes of queueing that show nothing more)
            Scenario(
                "llamacpp-baseline",
                f"{_LLAMACPP_BASELINE} --ddtree-load-concurrency 1,4",
                server=_LLAMACPP_ENGINE.format("ngram", 8080),
                baseline_server=_LLAMACPP_ENGINE.format("none", 8081),
                engine="llamacpp",
                timeout=1800,
            ),
            # another seed of the test of losslessness in distribution
            Scenario(
                "llamacpp-seed-1",
                f"{_LLAMACPP_BASELINE} -k test_lossless_in_distribution --ddtree-sweep-seed 1",
                server=_LLAMACPP_ENGINE.format("ngram", 8080),
                baseline_server=_LLAMACPP_ENGINE.format("none", 8081),
                engine="llamacpp",
            ),
            # above temperature 0, with a drafter that drafts: the sweep at both temperatures
            # and the test of losslessness in distribution at 0.7
            Scenario(
                "llamacpp-temperatures",
                f"{_LLAMACPP_BASELINE} --ddtree-temperatures 0,0.7"
                ' -k "test_sweep or test_lossless_in_distribution"',
                server=_LLAMACPP_ENGINE.format("draft", 8080),
                baseline_server=_LLAMACPP_ENGINE.format("none", 8081),
                engine="llamacpp",
                timeout=1500,
            ),
        ]
    }
)

EXCERPTS.update(
    {
        # docs/llamacpp.md: the whole suite with a baseline, from the progress to the summary
        "llamacpp-baseline": Excerpt(
            "llamacpp-baseline",
            (
                Piece(r"^test_smoke\.py", stop=r"^test_load\.py"),
                # two of the smoke test's diagnoses: list-garden's and tool-weather's
                Piece(r"^E\s+diagnosis:", count=2),
                Piece(r"^E\s+diagnosis: serving stack", count=2),
                Piece(_SWEEP, stop=_RECOMMENDED),
                Piece(_LOAD, stop=r"^\s+WARNING: no speculative"),
                Piece(r"^ddtree: statistics dialect detected", count=2),
                Piece(_ANSWER),
            ),
        ),
        # its seed 1: a sampled answer the baseline writes too, named in a warning
        "llamacpp-seed-1": Excerpt(
            "llamacpp-seed-1",
            (
                Piece(r"^test_lossless\.py", count=1),
                Piece(r"^=+ warnings summary", count=4),
                Piece(last=1),
            ),
        ),
        # the sweep at temperatures 0 and 0.7 with a drafter that drafts
        "llamacpp-temperatures": Excerpt(
            "llamacpp-temperatures",
            (
                Piece(r"^test_lossless\.py", stop=r"^test_sweep\.py"),
                Piece(_SWEEP, stop=r"^server counters"),
                Piece(r"^ddtree: sampling check", count=1),
                Piece(_ANSWER),
            ),
        ),
    }
)
