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
    stream, the command's the ``run`` stream. ``engine`` names what the scenario needs beyond
    this package; such a scenario runs only when asked for (``--llamacpp``). ``setup`` are
    commands run first, in order, in the same directory and after the server started (two
    runs whose results the shown command compares); their output is not shown, and one that
    fails stops the scenario.
    """

    name: str
    shown: str
    dirname: str = "your-project"
    files: Callable[[], dict[str, str]] = dict
    server: str | None = None
    ready: str = "serving http"
    engine: str | None = None
    timeout: float = 900
    setup: tuple[str, ...] = ()


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
        return (scenario.server or "") if self.stream == "server" else scenario.shown

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
    text = re.sub(re.escape(tempfile.gettempdir()) + r"/[^\s'\"):,]+", ".../tmp", text)

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
    words = command.split()
    if words[0] == "pytest":
        return [sys.executable, "-m", "pytest", *words[1:]]
    if words[0] == "python":
        return [sys.executable, *words[1:]]
    if words[0] == "ddtree-suite":  # the console script, from this checkout
        return [sys.executable, "-m", "pytest_ddtree.pytest_plugin.bundle", *words[1:]]
    if words[0] == "ddtree-compare":
        return [sys.executable, "-m", "pytest_ddtree.report.compare", *words[1:]]
    return words


def _start_server(
    scenario: Scenario, cwd: Path, env: dict[str, str]
) -> tuple[subprocess.Popen[str], list[str]]:
    assert scenario.server
    proc = subprocess.Popen(
        _argv(scenario.server),
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
    raise RuntimeError(f"{scenario.server!r} did not get ready:\n" + "\n".join(lines[-20:]))


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
    with tempfile.TemporaryDirectory(prefix="ddtree-docs-") as tmp:
        workdir = Path(tmp) / scenario.dirname
        workdir.mkdir()
        for name, content in scenario.files().items():
            (workdir / name).write_text(content, encoding="utf-8")
        server: subprocess.Popen[str] | None = None
        server_lines: list[str] = []
        if scenario.server:
            server, server_lines = _start_server(scenario, workdir, env)
        try:
            for command in scenario.setup:
                done = subprocess.run(
                    _argv(command),
                    cwd=workdir,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    timeout=scenario.timeout,
                )
                if done.returncode != 0:
                    raise RuntimeError(
                        f"setup {command!r} of {scenario.name} exited {done.returncode}:\n"
                        + "\n".join(done.stdout.splitlines()[-20:])
                    )
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
            if server is not None:
                _stop(server)
        streams = {"run": result.stdout, "server": "\n".join(server_lines)}
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
#: lines shown that a run prints or not depending on the machine's load (a steady server's
#: ``no drift`` reads ``DRIFT`` when the machine got busier during the sweep)
VOLATILE_LINES = re.compile(
    r"^\s*(UNRELIABLE points:|schedule:|best at C=|under load \(|no drift: )"
)
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
        # the rule's parentheses close the line ("... (n=18). (adaptive sweep, ...)") or its
        # sentence ("No budget is recommended (adaptive sweep, ...)."), and a drifting sweep
        # says so after them
        rule = re.findall(r"\(((?:adaptive sweep|exhaustive sweep|one budget)[^()]*)\)", line)
        line = "<verdict> " + (rule[-1].rstrip(".") if rule else "")
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


# -- docs/sweep.md and docs/ci.md ---------------------------------------------------------


def _budgets_test() -> dict[str, str]:
    # the ddtree_sweep test of sweep.md's "The table", as the page shows it
    page = (DOCS / "sweep.md").read_text(encoding="utf-8")
    test = next(
        block
        for block in re.findall(r"```python\n(.*?)```", page, re.DOTALL)
        if block.startswith("# test_budgets.py")
    )
    return {"test_budgets.py": test}


def _passing_test() -> dict[str, str]:
    return {"test_ok.py": "def test_ok():\n    pass\n"}


#: the embedded server as sweep.md's tables run it: the bundled suite's speed, 5% noise
_JITTERED = "--ddtree-reference-slowdown 0.4 --ddtree-reference-jitter 5%"
_BUDGETS = "pytest test_budgets.py -q"
#: the timed sweep of the bundled suite, one budget and one pass: the shortest timed run
_ONE_TEST_A_PROMPT = f"{SUITE} -k test_sweep --ddtree-budgets 64 --ddtree-sweep-passes 1"

SCENARIOS.update(
    {
        s.name: s
        for s in [
            Scenario(
                "sweep-exhaustive",
                f"{_BUDGETS} --ddtree-sweep exhaustive {_JITTERED}",
                files=_budgets_test,
            ),
            Scenario("sweep-adaptive", f"{_BUDGETS} {_JITTERED}", files=_budgets_test),
            Scenario(
                "sweep-drift",
                f"{_BUDGETS} --ddtree-sweep exhaustive --ddtree-budgets 16,64,256"
                " --ddtree-rounds 2 --ddtree-reference-slowdown 0.4"
                " --ddtree-reference-slowdown-after 30:2",
                files=_budgets_test,
            ),
            Scenario("sweep-one-budget", f"{SUITE} -k test_sweep --ddtree-budget-mode none"),
            Scenario(
                "sweep-probe", "pytest test_ok.py -q --ddtree-probe gpu-stats", files=_passing_test
            ),
            Scenario(
                "sweep-compare",
                "ddtree-compare main/sweep.json candidate/sweep.json",
                files=_budgets_test,
                setup=tuple(
                    f"{_BUDGETS} --ddtree-sweep exhaustive --ddtree-budgets 64,256,1024"
                    f" --ddtree-rounds 2 --ddtree-reference-slowdown 0.4 --ddtree-report {run}"
                    for run in ("main", "candidate")
                ),
            ),
            Scenario(
                "sweep-budget-ignored",
                f"{SUITE} -k test_sweep --ddtree-budgets 16,64,1024"
                " --ddtree-reference-fault budget-ignored",
            ),
            Scenario(
                "distribution-lossy",
                f"{SUITE} -k test_lossless_in_distribution --ddtree-reference-latency off"
                " --ddtree-reference-fault draft-confidence",
            ),
            Scenario(
                "distribution-seed",
                f"{SUITE} -k test_lossless_in_distribution --ddtree-reference-latency off"
                " --ddtree-reference-fault seed-dropped --ddtree-distribution-samples 6",
            ),
            Scenario(
                "ci-regression",
                f"{_ONE_TEST_A_PROMPT} --ddtree-reference-slowdown 0.8"
                " --benchmark-compare --benchmark-compare-fail=median:10%",
                setup=(f"{_ONE_TEST_A_PROMPT} --benchmark-autosave",),
            ),
            Scenario(
                "ci-folded",
                f"{SUITE} -k json-person --ddtree-budgets 16 --ddtree-reference-latency off"
                " --ddtree-reference-fault schema-ignored",
            ),
        ]
    }
)

_TABLE = r"^\s*tree_budget\s+valid\s"
_VERDICT_LINE = r"^(Recommended|Undecided|Either|No budget)"

EXCERPTS.update(
    {
        # docs/sweep.md
        "sweep-exhaustive": Excerpt(
            "sweep-exhaustive",
            (Piece(_TABLE, stop=_VERDICT_LINE), Piece(r"^acceptance by depth", count=1)),
        ),
        "sweep-steady": Excerpt(
            "sweep-exhaustive", (Piece(r"^no drift:", count=1), Piece(_VERDICT_LINE, count=1))
        ),
        "sweep-adaptive": Excerpt("sweep-adaptive", (Piece(_TABLE, stop=_VERDICT_LINE),)),
        "sweep-drift": Excerpt("sweep-drift", (Piece(_TABLE, stop=_VERDICT_LINE),)),
        "sweep-suite-race": Excerpt("suite", (Piece(r"^race: ", stop=_VERDICT_LINE),)),
        "sweep-one-budget": Excerpt("sweep-one-budget", (Piece(_TABLE, stop=_VERDICT_LINE),)),
        "sweep-probe": Excerpt("sweep-probe", (Piece(r"--ddtree-probe", count=2), Piece(last=1))),
        # without its "recommended tree_budget: 64 -> 64": two rounds on a busy machine may
        # leave a run undecided ("64 -> none")
        "sweep-compare": Excerpt(
            "sweep-compare", (Piece(stop=r"^1024 "), Piece(r"^(OK|FAIL)\b", count=1))
        ),
        "sweep-budget-ignored": Excerpt(
            "sweep-budget-ignored",
            (Piece(r"^FAILED sweep: ", count=1), Piece(r"^FAILED ddtree::sweep", count=1)),
        ),
        "distribution-lossy": Excerpt(
            "distribution-lossy",
            (Piece(r"^E\s+pytest_ddtree\.InvariantError", stop=r"diagnosis:"),),
        ),
        "distribution-seed": Excerpt(
            "distribution-seed",
            (Piece(r"^E\s+pytest_ddtree\.InvariantError", stop=r"what to do:"),),
        ),
        # docs/ci.md
        "ci-regression": Excerpt(
            "ci-regression",
            (
                Piece(r"^Comparing against benchmarks from", count=1),
                Piece(_SWEEP, count=1),
                Piece(r"--benchmark-compare-fail: \d+ regression", stop=r"^=+ short test summary"),
                Piece(r"^FAILED ddtree::benchmark-compare"),
            ),
        ),
        "ci-folded": Excerpt("ci-folded", (Piece(r"^_+ test_invariants\[json-person", count=4),)),
    }
)
