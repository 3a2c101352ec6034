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
class Screenshot:
    """A page a scenario's run wrote (``page``, relative to its directory), drawn by headless
    Chromium in a ``window`` (width, height) into ``image``, a PNG of the docs.

    A PNG cannot be compared with a new run byte for byte, so beside it ``record`` (the image
    with ``.json``) says what it shows (:func:`page_record`): the page's stylesheet (its
    hash), the per-budget table's columns and the recommendation, with the PNG's own hash.
    ``tests/docs/test_screenshot.py`` checks them against the current report and against the
    transcript of the same run; ``python docs/generate.py --only NAME`` draws both again.
    """

    page: str
    image: Path
    window: tuple[int, int] = (1280, 1330)

    @property
    def record(self) -> Path:
        return self.image.with_suffix(".json")


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
    ``shell`` runs ``shown`` with bash (pipes, quotes), the server's URL (the first in its
    ``ready`` line) in ``$URL``. ``measurement`` says why a scenario's output is a measurement
    (minutes long, or an outcome the machine's noise decides): it runs only when named
    (``--only``) and no test checks it for drift.
    ``setup`` are commands run first, in order, in the same directory and after the server
    started (two runs whose results the shown command compares); their output is not shown,
    and one that fails stops the scenario. ``screenshot``: a page the run writes, kept as the
    ``page`` stream (unmasked) and drawn into an image of the docs by ``write``.
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
    shell: bool = False
    measurement: str | None = None
    #: the test that checks this scenario's transcripts against a run of the same command it
    #: makes anyway (no run of its own in tests/docs)
    checked_by: str | None = None
    setup: tuple[str, ...] = ()
    #: a page the run writes, drawn into an image of the docs (its ``page`` stream)
    screenshot: Screenshot | None = None


@dataclass(frozen=True)
class Piece:
    """Lines of a stream: from the first line matching ``start`` (or the first line) on,
    ``count`` lines or up to and including the first later line matching ``stop`` (or the
    last line); ``last`` takes the last ``last`` lines instead. ``until`` ends it before the
    first later line matching it (or at the last line), where ``stop`` ends it on that line."""

    start: str | None = None
    stop: str | None = None
    count: int | None = None
    last: int | None = None
    until: str | None = None

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
        elif self.until is not None:
            until = re.compile(self.until)
            end = next((i for i in range(begin + 1, len(lines)) if until.search(lines[i])), end)
        return range(begin, end)


@dataclass(frozen=True)
class Excerpt:
    """What one transcript block shows: pieces of a scenario's stream, after ``$ command``.

    ``strip``, when set, is a prefix (a regular expression) taken off every line that starts
    with it before the pieces are chosen: ``"E   "`` shows a failure's evidence as the
    violation prints it, without the column pytest puts before each line of a failure."""

    scenario: str
    pieces: tuple[Piece, ...] = (Piece(),)
    stream: str = "run"
    prompt: bool = True
    strip: str | None = None

    def command(self, scenario: Scenario) -> str:
        """The command whose output the excerpt shows."""
        if self.stream == "server":
            return scenario.server or ""
        if self.stream == "baseline":
            return scenario.baseline_server or ""
        return scenario.shown

    def source(self, lines: Sequence[str]) -> list[str]:
        """The stream's lines as the excerpt reads them (``strip`` taken off)."""
        if self.strip is None:
            return list(lines)
        prefix = re.compile(self.strip)
        return [prefix.sub("", line, count=1) if prefix.match(line) else line for line in lines]

    def render(self, scenario: Scenario, lines: Sequence[str]) -> list[str]:
        lines = self.source(lines)
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


def _loopback(handler: str, path: str = "/v1") -> str:
    """A loopback server script a scenario writes: ``handler`` (its imports, then a class
    ``Handler`` whose methods answer with ``self._send(status, content_type, body)``), and
    what every such script shares: that method, no request log, and serving on the port given
    as its argument, its ready line naming the URL with ``path``."""
    return (
        handler
        + """
    def _send(self, status, kind, body):
        body = body if isinstance(body, bytes) else body.encode()
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
print(f"serving http://127.0.0.1:{server.server_port}"""
        + path
        + """", flush=True)
server.serve_forever()
"""
    )


#: a server whose /models answers and whose every completion is an HTML 502, as a dead
#: deployment behind a proxy
_SERVER_502 = _loopback("""\
import http.server, json, sys

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]})
        self._send(200, "application/json", body)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self._send(502, "text/html", "<html><body><h1>502 Bad Gateway</h1></body></html>")
""")


def _shown_code(page: str, needle: str) -> str:
    """The first ```python block of docs/``page`` holding ``needle``: a test or hook as the
    page shows it, run as a reader would copy it."""
    text = (DOCS / page).read_text(encoding="utf-8")
    return next(
        block for block in re.findall(r"```python\n(.*?)```", text, re.DOTALL) if needle in block
    )


def _server_502() -> dict[str, str]:
    return {"server_502.py": _SERVER_502}


def _user_check() -> dict[str, str]:
    # writing-tests.md's hook, as the page shows it, and a timed test of the README
    hook = _shown_code("writing-tests.md", "def pytest_ddtree_check")
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
        Scenario(
            "suite",
            f"{SUITE} --ddtree-report ddtree-report",
            screenshot=Screenshot("ddtree-report/sweep.html", DOCS / "img" / "sweep-report.png"),
        ),
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
            Piece(_ANSWER, until=r"^=+ short test summary info =+$"),
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
    words = shlex.split(command)  # quotes as a shell reads them
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
            command = _argv(scenario.shown)
            if scenario.shell:
                command = ["bash", "-c", scenario.shown]
                url = re.search(r"https?://[^\s,;]+", server_lines[-1]) if server_lines else None
                env = {**env, "URL": url.group(0) if url else ""}
                path = [str(Path(sys.executable).parent), env.get("PATH", "")]
                env["PATH"] = os.pathsep.join(path)
            for step in scenario.setup:
                done = subprocess.run(
                    _argv(step),
                    cwd=workdir,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    timeout=scenario.timeout,
                )
                if done.returncode != 0:
                    raise RuntimeError(
                        f"setup {step!r} of {scenario.name} exited {done.returncode}:\n"
                        + "\n".join(done.stdout.splitlines()[-20:])
                    )
            result = subprocess.run(
                command,
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
        out = {k: mask(v, workdir).splitlines() for k, v in streams.items()}
        if scenario.screenshot is not None:  # as written: a page is no text to mask
            page = workdir / scenario.screenshot.page
            out["page"] = page.read_text(encoding="utf-8").splitlines() if page.exists() else []
        return out


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
    for name, output in outputs.items():
        shot = SCENARIOS[name].screenshot
        if shot is not None:
            draw(shot, "\n".join(output.get("page", [])))
            log(f"screenshot drawn: {shot.image.relative_to(ROOT)}")
            changed.append(shot.image.name)
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


# -- screenshots --------------------------------------------------------------------------


def chromium() -> str | None:
    """Headless Chromium, where installed (Debian: ``apt-get install chromium``)."""
    import shutil

    return shutil.which("chromium") or shutil.which("chromium-browser")


def page_record(html: str) -> dict[str, object]:
    """What a report page shows that a drawing of it must keep: its stylesheet's hash, the
    per-budget table's columns and the recommendation (no figure a run changes but that)."""
    import hashlib
    from html import unescape

    style = re.search(r"<style>(.*?)</style>", html, re.DOTALL)
    head = re.search(r'<table class="stats one-line"><thead>(.*?)</thead>', html, re.DOTALL)
    columns = re.findall(r"<th>(.*?)</th>", head.group(1)) if head else []
    rec = re.search(r'<p class="rec-msg">(.*?)</p>', html, re.DOTALL)
    return {
        "stylesheet_sha256": hashlib.sha256(style.group(1).encode()).hexdigest() if style else "",
        "columns": [" ".join(unescape(re.sub(r"<[^>]+>", " ", c)).split()) for c in columns],
        "recommendation": unescape(rec.group(1)) if rec else "",
    }


def draw(shot: Screenshot, html: str) -> None:
    """Draw ``html`` (a page a run wrote) into ``shot.image`` with headless Chromium, and
    write its record beside it."""
    import hashlib

    browser = chromium()
    if browser is None:
        raise RuntimeError("headless Chromium draws the screenshots: apt-get install chromium")
    if not html.strip():
        raise RuntimeError(f"the run wrote no {shot.page} to draw")
    with tempfile.TemporaryDirectory(prefix="ddtree-docs-shot-") as tmp:
        page = Path(tmp) / "page.html"
        page.write_text(html, encoding="utf-8")
        png = Path(tmp) / "page.png"
        width, height = shot.window
        subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--force-device-scale-factor=1",
                f"--window-size={width},{height}",
                f"--screenshot={png}",
                page.as_uri(),
            ],
            capture_output=True,
            timeout=120,
            check=True,
        )
        shot.image.write_bytes(png.read_bytes())
    record = {
        "drawn_by": f"{REGENERATE} --only "
        + next(name for name, s in SCENARIOS.items() if s.screenshot == shot),
        "window": list(shot.window),
        **page_record(html),
        "png_sha256": hashlib.sha256(shot.image.read_bytes()).hexdigest(),
    }
    shot.record.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


# -- drift --------------------------------------------------------------------------------

#: notes that depend on how loaded the machine is, removed from both sides before comparing
VOLATILE = [
    r"\s*\(UNRELIABLE[^)]*\)",
    r"\s*\(a tie at this noise\)",
    r"\s*\(\d+:\d\d:\d\d\)",  # pytest's h:mm:ss after a run of a minute or more
    # an SLO missed at a point where the client was stalled is withheld, not missed: which of
    # the two a run says depends on the machine's load; the points' lines must be the run's
    r"SLO (?:missed at \d+ load point\(s\)|verdict withheld: [^:]*):",
    r";\s*client (?:saturated|stalled): .*$",
]
#: lines shown that a run prints or not depending on the machine's load (a steady server's
#: ``no drift`` reads ``DRIFT`` when the machine got busier during the sweep)
VOLATILE_LINES = re.compile(
    r"^\s*(UNRELIABLE points:|schedule:|best at C=|under load \(|no drift: "
    # the answer's caveats of the machine's load: a stalled client, a busier machine
    r"|caveat: the speed claim of |caveat: DRIFT )"
)
#: the environment a run was made in: the reader's differs
ENVIRONMENT = re.compile(r"^(platform |plugins: |benchmark: |rootdir: |cachedir: )")
#: a data row of a table: its values are the run's, its columns are the header's (a
#: benchmark's regression line is one: which prompts regress past the limit is the run's)
ROW = re.compile(r"^\s*(?:[\d,]+\s|C=\d|server-default\s|(?:REGRESSION )?test_\w+\[[^\]]*\]\s)")
PROGRESS = re.compile(r"^(?:\S+\.py )?[.sFEXx]+\s+\[\s*\d+%\]$")
#: the sweep's verdict: which one a run reaches depends on the machine's noise; its rule (the
#: mode, the margin, min n, the confidence: the last parentheses) must be the run's
VERDICT = re.compile(r"^(?:Recommended |Undecided: |Either |No budget )")
#: the break-even map's answer: which depths a run decides, and so how it groups them ("up to
#: 1024 prompt tokens" or "at 256 ...; at 1024: undecided"), depends on the machine's noise
BREAK_EVEN = re.compile(r"^\s*Break-even: ")


def key(line: str) -> str:
    """What a shown line must keep: its words, with numbers, rules and spacing masked."""
    for pattern in VOLATILE:
        line = re.sub(pattern, "", line)
    if PROGRESS.match(line.strip()):
        return "<progress " + line.split()[0] + ">" if ".py" in line else "<progress>"
    if ROW.match(line):
        return "<row>"
    if BREAK_EVEN.match(line):
        return "<break-even>"
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


def check(
    names: Iterable[str],
    pages: Sequence[Path],
    outputs: dict[str, dict[str, list[str]]] | None = None,
) -> list[str]:
    """Run the scenarios ``names`` (those not in ``outputs``, a run already made of the same
    command, masked); one problem line per transcript that drifted."""
    wanted = set(names)
    outputs = dict(outputs or {})
    problems = []
    for block in blocks(pages):
        excerpt = EXCERPTS[block.name]
        if excerpt.scenario not in wanted:
            continue
        scenario = SCENARIOS[excerpt.scenario]
        if excerpt.scenario not in outputs:
            outputs[excerpt.scenario] = run(scenario)
        current = excerpt.source(outputs[excerpt.scenario][excerpt.stream])
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
                f"{missing[0]!r}; run {REGENERATE} --only {excerpt.scenario}\n"
                # what the run printed instead, to tell a drifted page from a run gone wrong
                f"its output ended:\n" + "\n".join(current[-12:])
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


# -- docs/load.md, docs/options.md, docs/reference-server.md ------------------------------


def _load_test() -> dict[str, str]:
    # the load test of load.md ("What a call costs"), run as the page shows it
    code = _shown_code("load.md", "def test_under_load")
    return {"test_under_load.py": code}


def _race_test() -> dict[str, str]:
    # load.md's first load test, with 32 among its budgets: what "A raced load grid" races
    page = (DOCS / "load.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", page, re.DOTALL)
    assert code and "tree_budgets=[16, 64, 256]" in code.group(1), "load.md's first test moved"
    return {"test_race.py": code.group(1).replace("[16, 64, 256]", "[16, 32, 64, 256]")}


#: a page that is not Prometheus text (a dashboard's login page) at /html; 404 elsewhere
_SERVER_HTML = _loopback(
    """\
import http.server, sys

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        found = self.path == "/html"
        body = "<html><body>Grafana login</body></html>" if found else "not found"
        self._send(200 if found else 404, "text/html", body)
""",
    path="",
)


def _server_html() -> dict[str, str]:
    return {"server_html.py": _SERVER_HTML}


_UNDER_LOAD = "pytest test_under_load.py -q"
_ONE_TEST = f"{SUITE} -q -k 'test_smoke and capital'"  # one short request
_REFERENCE = "python -m pytest_ddtree.reference --port 0"
_CAPITAL = (
    '{"model": "ddtree-reference", "messages": [{"role": "user", "content":'
    ' "What is the capital of France?"}], "max_tokens": 64, "tree_budget": 128}'
)
_WEATHER = (
    '{"model": "ddtree-reference", "stream": true, "messages": [{"role": "user", "content":'
    ' "What is the weather in Paris?"}], "tools": [{"type": "function", "function": {"name":'
    ' "get_weather", "parameters": {"type": "object", "properties": {"city": {"type":'
    ' "string"}}, "required": ["city"], "additionalProperties": false}}}]}'
)
_CURL = "curl -s $URL/chat/completions -H 'content-type: application/json' -d"

SCENARIOS.update(
    {
        s.name: s
        for s in [
            # load.md: the page's load test, with an SLO its busiest point misses
            Scenario("load", f"{_UNDER_LOAD} --ddtree-slo e2e=125ms", files=_load_test),
            Scenario(
                "load-early-eos",
                f"{_UNDER_LOAD} --ddtree-reference-latency off --ddtree-reference-fault early-eos",
                files=_load_test,
            ),
            Scenario(
                "load-hang",
                f"{_UNDER_LOAD} --ddtree-reference-fault hang --ddtree-timeout read=1,total=30",
                files=_load_test,
            ),
            Scenario(
                "load-xdist",
                "pytest test_under_load.py -n 2 --dist each --ddtree-endpoint http://127.0.0.1:8311/v1",
                files=_load_test,
                server="python -m pytest_ddtree.reference --port 8311 --no-simulated-latency",
                ready="listening on",
            ),
            Scenario(
                "load-race",
                "pytest test_race.py -q --ddtree-sweep adaptive --ddtree-reference-jitter 0.05"
                " --ddtree-load-concurrency 1,4 --ddtree-load-requests 16",
                files=_race_test,
                measurement="which budgets a race tells apart depends on the machine's noise",
            ),
            # options.md: the /metrics probe's header line and warning
            Scenario(
                "metrics-404",
                f"{_ONE_TEST} --ddtree-metrics-url http://127.0.0.1:8312/nothing",
                files=_server_html,
                server="python server_html.py 8312",
            ),
            Scenario(
                "metrics-html",
                f"{_ONE_TEST} --ddtree-metrics-url http://127.0.0.1:8312/html",
                files=_server_html,
                server="python server_html.py 8312",
            ),
            Scenario("metrics-off", f"{_ONE_TEST} --ddtree-metrics-url off"),
            # reference-server.md: the standalone server and curl
            Scenario(
                "reference-chat",
                f"{_CURL} '{_CAPITAL}' | python -m json.tool",
                server=_REFERENCE,
                ready="listening on",
                shell=True,
            ),
            Scenario(
                "reference-tool-stream",
                f"{_CURL.replace('curl -s', 'curl -sN')} '{_WEATHER}'",
                server=_REFERENCE,
                ready="listening on",
                shell=True,
            ),
            Scenario(
                "reference-metrics",
                f"{_CURL} '{_CAPITAL}' -o /dev/null && curl -s ${{URL%/v1}}/metrics"
                " | grep -v -e '^#' -e _created",
                server=_REFERENCE,
                ready="listening on",
                shell=True,
            ),
        ]
    }
)

_LOAD_ERROR = r"^E\s+pytest_ddtree\.LoadError: "

EXCERPTS.update(
    {
        # docs/load.md
        # the verdict and its first point: which points miss, or are withheld at a stalled
        # client, depends on the machine's load
        "load-slo": Excerpt("load", (Piece(_LOAD_ERROR + "SLO", count=2),)),
        "load-early-eos": Excerpt(
            "load-early-eos", (Piece(_LOAD_ERROR + r"\d+ of", stop=r"^E\s+\[early-stop\]"),)
        ),
        "load-hang": Excerpt("load-hang", (Piece(_LOAD_ERROR + r"\d+ of", count=2),)),
        "load-best": Excerpt(
            "load", (Piece(r"^\s+best at C=", stop=r"^\s+schedule:"),), prompt=False
        ),
        "load-columns": Excerpt("load", (Piece(r": merged from ", stop=r"^\s+schedule:"),)),
        "load-xdist": Excerpt(
            "load-xdist", (Piece(r"^ddtree load:", count=1), Piece(r": merged from ", count=1))
        ),
        "load-race": Excerpt("load-race", (Piece(r"^\s+best at C=", stop=r"^\s+raced points:"),)),
        # docs/options.md
        "metrics-default": Excerpt(
            "load", (Piece(r"^ddtree: server metrics:", count=1),), prompt=False
        ),
        "metrics-404": Excerpt(
            "metrics-404", (Piece(r"^ddtree: server metrics:", count=1),), prompt=False
        ),
        "metrics-off": Excerpt(
            "metrics-off", (Piece(r"^ddtree: server metrics:", count=1),), prompt=False
        ),
        "metrics-html": Excerpt(
            "metrics-html",
            (
                Piece(r"^ddtree: server metrics:", count=1),
                Piece(r"^ddtree: WARNING: server metrics", count=1),
            ),
        ),
        # docs/reference-server.md
        "reference-start": Excerpt("reference-chat", stream="server"),
        "reference-chat": Excerpt(
            "reference-chat",
            (Piece(stop=r'"acceptance_histogram"'), Piece(r'"draft_ms"')),
        ),
        "reference-tool-stream": Excerpt(
            "reference-tool-stream",
            (
                Piece(r'"name":"get_weather"', count=1),
                Piece(r'"arguments":"\{', count=1),
                Piece(r'"finish_reason":"tool_calls"', count=1),
            ),
        ),
        "reference-metrics": Excerpt("reference-metrics"),
    }
)


# -- docs/invariants.md and docs/troubleshooting.md: the evidence of each code ---------------
#
# A violation's evidence as a failure prints it, from a real run: the bundled suite against the
# embedded server with one fault (one test selected, two budgets, no simulated latency), or a
# test of a reader's own against a small loopback server that answers what the check is about.
# The blocks show the evidence without pytest's ``E   `` column (``strip``).

#: the options that keep one fault's run short: the bundled-suite fault matrix's
#: (tests/example_suite/test_example_suite.py), two budgets either side of 64
FAULT_OPTIONS = "--ddtree-budgets 16,256 --ddtree-reference-latency off"
#: the faults the fault matrix runs with these options, and the test it selects: its
#: test_fault_fails_with_its_code checks their transcripts against the run it makes anyway
MATRIX = {
    "early-eos": "test_smoke and essay-rivers",
    "role-leak": "test_smoke and essay-rivers",
    "think-leak": "test_smoke and essay-rivers",
    "finish-always-stop": "test_smoke and essay-rivers",
    "overrun": "test_smoke and essay-rivers",
    "stats-inflated": "test_smoke and essay-rivers",
    "stream-no-done": "test_smoke and essay-rivers",
    "logprobs-zero": "test_logprobs",
    "logprobs-draft": "test_logprobs",
    "lossy": "test_lossless and essay-rivers",
    "draft-confidence": "test_lossless_in_distribution",
    "state-leak": "test_deterministic_and_stateless and 16",
    "grammar-skip": "test_invariants and json-person and 256",
    "stop-missed-in-block": "test_smoke and list-stop",
    "usage-past-stop": "test_smoke and list-stop",
    "tool-call-no-id": "test_smoke and tool-weather",
    "empty-200": "test_smoke and essay-rivers",
    "usage-mismatch": "test_smoke and essay-rivers",
    "stream-error-event": "test_smoke and essay-rivers",
}
#: faults no test of the matrix runs: their own run, in the slow tier
OWN_RUN = {
    "near-tie": "test_lossless and essay-rivers",
    "reasoning-only": "test_smoke and essay-rivers",
    "intermittent-5xx": "test_invariants and essay-rivers",
    "nondeterministic": "test_stream_matches_plain and essay-rivers",
}


def fault_command(fault: str, select: str, extra: str = "") -> str:
    """The bundled suite's run that shows ``fault``: one test, two budgets, no latency."""
    return (
        f"{SUITE} -q -k {shlex.quote(select)} {FAULT_OPTIONS}{extra}"
        f" --ddtree-reference-fault {fault}"
    )


SCENARIOS.update(
    {
        f"fault-{fault}": Scenario(
            f"fault-{fault}",
            fault_command(fault, select),
            checked_by="tests/example_suite/test_example_suite.py::test_fault_fails_with_its_code"
            if fault in MATRIX
            else None,
        )
        for fault, select in {**MATRIX, **OWN_RUN}.items()
    }
)
SCENARIOS.update(
    {
        f"fault-{fault}": Scenario(
            f"fault-{fault}",
            fault_command(fault, "test_sweep and essay-rivers", " --ddtree-temperatures 0.7"),
        )
        for fault in ("temperature-ignored", "seed-ignored")
    }
)

#: a loopback server that answers each test of ``test_answers.py`` with the answer its check is
#: about: the user message names the case. Its tokens are words, counted by a ``/tokenize`` of
#: llama.cpp's shape, and its usage counts them (but where the case is a usage that hides some).
_SERVER_ANSWERS = _loopback(r"""import http.server, json, re, sys

ANSWERS = {
    "special": "A tree budget bounds the nodes the drafter may propose per round."
    "<|im_end|>\n<|endoftext|>",
    "control": "\u0000\u0001\u0002\ufffd\ufffd" * 80 + "abc",
    "budget": "A tree budget bounds the nodes the drafter may propose per round.",
    "json-object": "[1, 2]",
    "long": "The river runs to the sea. " * 80,
    "large": "The river runs to the sea. " * 4000,
    "hidden": " ".join(f"river{i}" for i in range(103)),
}
CUT = {"long", "large", "hidden", "short-length"}  # finish_reason 'length'


def tokens(text):
    return re.findall(r"\s*\S+", text)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if not self.path.endswith("/models"):
            return self._json({"error": "not found"}, 404)
        self._json({"object": "list", "data": [{"id": "m", "object": "model"}]})

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        if self.path == "/tokenize" and "content" in request:  # llama.cpp's shape
            vocabulary = {}
            ids = [vocabulary.setdefault(t, len(vocabulary)) for t in tokens(request["content"])]
            return self._json({"tokens": ids})
        if "messages" not in request:
            return self._json({"error": "not found"}, 404)
        case = request["messages"][-1]["content"]
        if case == "schema":
            return self._json({"id": 3, "choices": "nope"})
        text = ANSWERS.get(case, "The river runs to the sea.")
        # /baseline/v1 is the target-only baseline: the same answers, another chat template
        prompt = 37 if self.path.startswith("/baseline/") and case == "template" else 9
        answer = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "length" if case in CUT else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": 96 if case == "hidden" else len(tokens(text)),
                "total_tokens": prompt + (96 if case == "hidden" else len(tokens(text))),
            },
        }
        if case == "budget":  # the budget it ran with, not the one asked for
            stats = {"tree_budget": 64, "cycles": 4, "avg_acceptance": 3.0, "tok_per_sec": 50.0}
            answer["ddtree_stats"] = stats
        body = json.dumps(answer).encode()
        if case == "encoding":  # one byte that is not UTF-8, inside the content
            body = body.replace(b"to the sea", b"to the \xff sea")
        self._json(body)

    def _json(self, body, status=200):
        body = body if isinstance(body, bytes) else json.dumps(body)
        self._send(status, "application/json", body)
""")

#: one test a case; each sends the case as its prompt and checks the answer
_TEST_ANSWERS = """\
def test_schema(ddtree_client, ddtree_check):
    ddtree_check(ddtree_client.chat("schema", max_tokens=16, stream=False))


def test_special_tokens(ddtree_client, ddtree_check):
    ddtree_check(ddtree_client.chat("special", max_tokens=32, stream=False))


def test_control_characters(ddtree_client, ddtree_check):
    ddtree_check(ddtree_client.chat("control", max_tokens=96, stream=False))


def test_echoed_budget(ddtree_client, ddtree_check):
    ddtree_check(ddtree_client.chat("budget", max_tokens=32, tree_budget=256, stream=False))


def test_encoding(ddtree_client, ddtree_check):
    ddtree_check(ddtree_client.chat("encoding", max_tokens=16, stream=False))


def test_json_object(ddtree_client, ddtree_check):
    answer = ddtree_client.chat(
        "json-object", max_tokens=16, response_format={"type": "json_object"}, stream=False
    )
    ddtree_check(answer)


def test_length_too_early(ddtree_client, ddtree_check):
    ddtree_check(ddtree_client.chat("short-length", max_tokens=96, stream=False), min_tokens=1)


def test_usage_hides_tokens(ddtree_client, ddtree_check):
    ddtree_check(ddtree_client.chat("hidden", max_tokens=96, stream=False))


def test_text_past_max_tokens(ddtree_client, ddtree_check):
    ddtree_check(ddtree_client.chat("long", max_tokens=4, stream=False))


def test_too_large(ddtree_client, ddtree_check):
    ddtree_check(ddtree_client.chat("large", max_tokens=96, stream=False))


def test_lossless_beside_another_template(ddtree_lossless):
    ddtree_lossless("template", max_tokens=16, stream=False)
"""


def _answers() -> dict[str, str]:
    return {"server_answers.py": _SERVER_ANSWERS, "test_answers.py": _TEST_ANSWERS}


SCENARIOS["answers"] = Scenario(
    "answers",
    "pytest test_answers.py -q --ddtree-endpoint http://127.0.0.1:8503/v1"
    " --ddtree-baseline-endpoint http://127.0.0.1:8503/baseline/v1"
    " --ddtree-max-response-bytes 65536",
    files=_answers,
    server="python server_answers.py 8503",
)

#: the column pytest puts before a failure's lines, and the exception's name on its first
_E_COLUMN = r"^E   (?:pytest_ddtree\.InvariantError: )?"


def _evidence(
    scenario: str,
    *codes: str,
    diagnosis: bool = True,
    first: str | None = None,
    every: bool = False,
) -> Excerpt:
    """A failure's evidence for ``codes`` (each code's first violation, or the violation
    matching ``first``; with ``every``, the violations of that code that follow it too), then
    its diagnosis; without pytest's column."""
    pieces = [
        Piece(
            rf"^\[{re.escape(code)}\] " + (first or ""),
            until=rf"^(?!\[{re.escape(code)}\]|\s)" if every else r"^\S",
        )
        for code in codes
    ]
    if diagnosis:
        pieces.append(Piece(r"^diagnosis: ", until=r"^\S"))
    return Excerpt(scenario, tuple(pieces), strip=_E_COLUMN)


def _header(scenario: str, header: str, code: str, diagnosis: bool = True) -> Excerpt:
    """A comparison's failure: its header line, its violations of ``code``, the diagnosis."""
    pieces = [Piece(header, until=rf"^(?!\[{re.escape(code)}\]|\s)")]
    if diagnosis:
        pieces.append(Piece(r"^diagnosis: ", until=r"^\S"))
    return Excerpt(scenario, tuple(pieces), strip=_E_COLUMN)


EXCERPTS.update(
    {
        "ev-http-error": _evidence("fault-intermittent-5xx", "http-error"),
        "ev-empty": _evidence("fault-empty-200", "empty"),
        "ev-schema": _evidence("answers", "schema", diagnosis=False),
        "ev-early-stop": _evidence("fault-early-eos", "early-stop"),
        "ev-finish-reason": _evidence("answers", "finish-reason", diagnosis=False, first="fin"),
        "ev-finish-lie": _evidence("fault-finish-always-stop", "finish-lie"),
        "ev-overrun": _evidence("fault-overrun", "overrun", diagnosis=False),
        "ev-overrun-counted": _evidence(
            "answers", "overrun", diagnosis=False, first=r"\d+ completion tokens counted"
        ),
        "ev-overrun-after-eos": _evidence(
            "answers", "overrun", diagnosis=False, first=r".*after the end-of-sequence"
        ),
        "ev-overrun-characters": _evidence(
            "answers", "overrun", diagnosis=False, first=r"[\d,]+ characters of text: more than"
        ),
        "ev-role-leak": _evidence("fault-role-leak", "role-leak"),
        "ev-special-token-leak": _evidence("answers", "special-token-leak", diagnosis=False),
        "ev-reasoning-leak": _evidence("fault-think-leak", "reasoning-leak"),
        "ev-reasoning-only": _evidence("fault-reasoning-only", "reasoning-only"),
        "ev-usage-mismatch": _evidence(
            "fault-usage-mismatch",
            "usage-mismatch",
            diagnosis=False,
            first="total_tokens",
            every=True,
        ),
        "ev-usage-past-stop": _evidence("fault-usage-past-stop", "usage-mismatch"),
        "ev-non-printable": _evidence("answers", "non-printable", diagnosis=False),
        "ev-budget-mismatch": _evidence("answers", "budget-mismatch", diagnosis=False),
        "ev-stats-inconsistent": _evidence(
            "fault-usage-mismatch", "stats-inconsistent", diagnosis=False, first="acceptance"
        ),
        "ev-stats-histogram": _evidence("fault-overrun", "stats-inconsistent"),
        "ev-stats-inflated": _evidence("fault-stats-inflated", "stats-inflated", first="accept"),
        "ev-stream-integrity": _evidence(
            "fault-stream-no-done", "stream-integrity", first="the stream ended"
        ),
        "ev-stream-error": _evidence("fault-stream-error-event", "stream-error"),
        "ev-encoding": _evidence("answers", "encoding", diagnosis=False),
        "ev-too-large": _evidence("answers", "too-large", diagnosis=False),
        "ev-nondeterministic": _header(
            "fault-nondeterministic",
            r"^streamed and non-streamed answers differ",
            "nondeterministic",
            diagnosis=False,
        ),
        "ev-state-leak": _evidence("fault-state-leak", "state-leak", diagnosis=False),
        "ev-not-lossless": _header("fault-lossy", r"^not lossless: ", "not-lossless"),
        "ev-near-tie": Excerpt(
            "fault-near-tie",
            (Piece(r"^pytest-ddtree: tree_budget \d+ diverges", count=1),),
            strip=r"^  \S+:\d+: UserWarning: ",
        ),
        "ev-not-lossless-in-distribution": _header(
            "fault-draft-confidence",
            r"^not lossless in distribution",
            "not-lossless-in-distribution",
        ),
        "ev-temperature-ignored": _header(
            "fault-temperature-ignored", r"^sampling check before timing", "temperature-ignored"
        ),
        "ev-seed-ignored": _header(
            "fault-seed-ignored", r"^sampling check before timing", "seed-ignored"
        ),
        "ev-json-schema": _evidence("fault-grammar-skip", "json-schema"),
        "ev-json-object": _evidence("answers", "json-object", diagnosis=False),
        "ev-tool-call": _evidence("fault-tool-call-no-id", "tool-call"),
        "ev-degenerate": _evidence(
            "answers", "degenerate", diagnosis=False, first="output loops until max_tokens"
        ),
        "ev-not-comparable-template": _evidence("answers", "not-comparable", diagnosis=False),
        "ev-logprobs-zero": _evidence("fault-logprobs-zero", "logprobs"),
        "ev-logprobs-draft": _evidence("fault-logprobs-draft", "logprobs"),
        "ev-stop-sequence": _evidence("fault-stop-missed-in-block", "stop-sequence"),
    }
)


# docs/troubleshooting.md: a near-tie flip, then the model's own path fails. A test of a
# reader's own that expects a long answer, on the bundled suite's json-person question sent as
# plain text: with the near-tie fault the answer parts from the baseline's where the target's
# top two are within 0.15 nats, and the model's own path from there ends sooner.
def _test_ada() -> dict[str, str]:
    # the test as troubleshooting.md shows it
    test = _shown_code("troubleshooting.md", "def test_describe_ada")
    return {"test_ada.py": test}


SCENARIOS["near-tie-flip"] = Scenario(
    "near-tie-flip",
    "pytest test_ada.py -q --ddtree-reference-fault near-tie --ddtree-reference-latency off",
    files=_test_ada,
)
EXCERPTS["near-tie-flip"] = Excerpt(
    "near-tie-flip", (Piece(r"^E   \[early-stop\]", count=1), Piece(r"^E   diagnosis: ", count=1))
)

# docs/invariants.md: the verdicts that draw none, and the log-probability comparison
SCENARIOS.update(
    {
        "json-cut": Scenario(
            "json-cut",
            f"{SUITE} -q -k 'test_smoke and json-person' {FAULT_OPTIONS} --ddtree-max-tokens 6",
        ),
        "lossless-stream-no-done": Scenario(
            "lossless-stream-no-done",
            fault_command("stream-no-done", "test_lossless and essay-rivers"),
        ),
    }
)


def _lossless_logprobs() -> dict[str, str]:
    # the test as invariants.md shows it
    test = _shown_code("invariants.md", "def test_lossless_logprobs")
    return {"test_lossless_logprobs.py": test}


SCENARIOS["lossless-logprobs"] = Scenario(
    "lossless-logprobs",
    "pytest test_lossless_logprobs.py -q --ddtree-budgets 64 --ddtree-reference-latency off"
    " --ddtree-reference-fault logprobs-zero",
    files=_lossless_logprobs,
)
EXCERPTS.update(
    {
        "ev-json-cut": _evidence("json-cut", "json-cut"),
        "ev-not-comparable": _header(
            "lossless-stream-no-done", r"^not comparable: ", "not-comparable"
        ),
        "ev-logprobs-lossless": _header(
            "lossless-logprobs", r"^log-probabilities apart: ", "logprobs"
        ),
    }
)


# -- docs/sweep.md and docs/ci.md ---------------------------------------------------------


def _budgets_test() -> dict[str, str]:
    # the ddtree_sweep test of sweep.md's "The table", as the page shows it
    test = _shown_code("sweep.md", "# test_budgets.py")
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
            Scenario(
                "sweep-adaptive",
                f"{_BUDGETS} {_JITTERED}",
                files=_budgets_test,
                # 32 and 64 are 5% apart under 5% jitter: on a loaded machine the race can end
                # later, or with the two as one answer ("Either ..."); seen in a gate run
                measurement="how long a race between budgets 5% apart runs, and whether it "
                "tells them apart, depends on the machine's noise",
            ),
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
            (
                Piece(r"^FAILED sweep: ", count=1),
                Piece(r"^No budget is recommended: the server does not use", count=1),
                Piece(r"^FAILED ddtree::sweep", count=1),
            ),
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
                # the count's line and the first regression (which prompts pass the limit is
                # the machine's noise: the slowed server makes at least one of them)
                Piece(r"--benchmark-compare-fail: \d+ regression", count=2),
                Piece(r"^FAILED ddtree::benchmark-compare"),
            ),
        ),
        "ci-folded": Excerpt("ci-folded", (Piece(r"^_+ test_invariants\[json-person", count=4),)),
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

# docs/breakeven.md: the break-even map on the embedded server, drawn as a heat-map
_BREAKEVEN = f"{SUITE} -k break_even"
SCENARIOS.update(
    {
        s.name: s
        for s in [
            Scenario(
                "breakeven",
                f"{_BREAKEVEN} --ddtree-context 256,1024,4096 --ddtree-budgets 64"
                " --ddtree-reference-slowdown 1 --ddtree-report ddtree-report",
                measurement="which depths a race decides is the machine's noise: beside the "
                "CI gate's other runs it decided fewer, and once failed on one answer",
                screenshot=Screenshot(
                    "ddtree-report/sweep.html", DOCS / "img" / "breakeven.png", (1280, 470)
                ),
            ),
        ]
    }
)
_MAP = r"^-+ pytest-ddtree break-even -+$"
EXCERPTS.update(
    {
        "breakeven-map": Excerpt("breakeven", (Piece(_MAP, stop=r"^\s+Break-even: "),)),
    }
)
