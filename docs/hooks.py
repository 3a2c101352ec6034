"""Generated parts of the documentation, and the MkDocs hook that checks them.

Pages hold sections generated from the code itself, between a begin and an end marker, so the
Markdown reads whole on GitHub and cannot drift from the code::

    <!-- ddtree:options -->
    ...generated text, committed...
    <!-- /ddtree:options -->

``python docs/generate.py`` writes them (and the terminal transcripts, ``docs/transcripts.py``);
``tests/docs`` fails when the committed text differs from what the code generates now, and so
does the MkDocs build. The sections:

``<!-- ddtree:options -->``
    the option reference, from ``pytest_ddtree.core.options.OPTIONS``;
``<!-- ddtree:marker -->``
    the ``@pytest.mark.ddtree`` keywords, from ``pytest_ddtree.core.options.MARKER_KEYS``;
``<!-- ddtree:codes -->``
    the table of violation codes, from ``pytest_ddtree.checks.invariants.CODES``;
``<!-- ddtree:code NAME -->``
    the one-line meaning of one code (in its section of the invariants page);
``<!-- ddtree:faults -->``
    the reference server's faults, from ``pytest_ddtree.reference.FAULTS``;
``<!-- ddtree:server-options -->``
    the reference server's command-line options, from its argument parser;
``<!-- ddtree:dialects -->``
    the statistics dialects, from the registry ``pytest_ddtree.core.dialects.REGISTRY``;
``<!-- ddtree:fixtures -->``
    the signatures and docstrings of the fixture objects, from
    ``pytest_ddtree.pytest_plugin.fixtures``.

The invariants page must have one ``## `code` `` section per code and no other code
sections; the build fails otherwise (and so does ``tests/docs``). ``<!-- ddtree:transcript
NAME -->`` sections hold terminal transcripts: ``docs/transcripts.py`` writes and checks those,
this module leaves them alone.
The functions here are plain Python so the tests can call them without MkDocs.
"""

from __future__ import annotations

import argparse
import enum
import html
import inspect
import re
from typing import Any

from pytest_ddtree.checks.invariants import CODE_LAYERS, CODES, LAYERS
from pytest_ddtree.core.codes import UNJUDGED_CODES
from pytest_ddtree.core.options import MARKER_KEYS, OPTIONS, OPTIONS_BY_ATTR, OptionDef

#: A begin marker, ``<!-- ddtree:NAME -->`` or ``<!-- ddtree:NAME ARG -->``; the section runs
#: to the next ``<!-- /ddtree:NAME -->``.
BEGIN = re.compile(r"<!--\s*ddtree:([a-z-]+)(?:\s+([a-z0-9-]+))?\s*-->")
END = "<!-- /ddtree:{name} -->"
#: sections another module writes (terminal transcripts, ``docs/transcripts.py``)
FOREIGN = frozenset({"transcript"})
REGENERATE = "python docs/generate.py"
CODE_HEADING = re.compile(r"^## `([a-z0-9-]+)`\s*$", re.MULTILINE)
INVARIANTS_PAGE = "invariants.md"


class DocsError(Exception):
    """A generated section or page that does not match the code."""


def _text(text: str) -> str:
    # prose from the code quotes markup such as '<think>': show it, do not render it
    return html.escape(text, quote=False)


def _cell(text: str) -> str:
    return _text(text).replace("|", "\\|").replace("\n", " ")


def _option_usage(opt: OptionDef) -> str:
    return f"`{opt.cli}`" if opt.flag else f"`{opt.cli}={opt.metavar}`"


def _option_default(opt: OptionDef) -> str:
    if opt.default is not None:
        return f"`{opt.default}`"
    return "not set"


def options_markdown() -> str:
    """The option reference: a summary table, then one section per option."""
    lines = [
        "| Option | ini key | Environment | Default |",
        "|---|---|---|---|",
    ]
    for opt in OPTIONS:
        env = ", ".join(f"`{v}`" for v in opt.env) or "-"
        lines.append(
            f"| [`{opt.cli}`](#{opt.cli.lstrip('-')}) | `{opt.ini}` | {env} | "
            f"{_option_default(opt)} |"
        )
    lines.append("")
    for opt in OPTIONS:
        lines += [f"### `{opt.cli}` {{#{opt.cli.lstrip('-')}}}", "", _option_usage(opt), ""]
        lines += [_text(opt.help), ""]
        facts = [f"ini key: `{opt.ini}`"]
        if opt.env:
            facts.append("environment: " + ", ".join(f"`{v}`" for v in opt.env))
        facts.append(f"default: {_option_default(opt)}")
        if opt.repeatable:
            facts.append("repeatable (in an ini file: one value per line)")
        if opt.flag:
            facts.append("a flag on the command line; `true`/`false` in an ini file")
        if opt.secret:
            facts.append("secret: never printed, never written to a report")
        lines += [f"- {fact}" for fact in facts]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def marker_markdown() -> str:
    """The keywords of ``@pytest.mark.ddtree`` and the option each one overrides."""
    lines = ["| Marker keyword | Overrides |", "|---|---|"]
    for key in MARKER_KEYS:
        opt = OPTIONS_BY_ATTR.get(key)
        target = f"[`{opt.cli}`](options.md#{opt.cli.lstrip('-')})" if opt else f"`{key}`"
        lines.append(f"| `{key}` | {target} |")
    return "\n".join(lines) + "\n"


def codes_markdown() -> str:
    """Every violation code with its one-line meaning, linking to its section."""
    lines = ["| Code | Meaning | Layer |", "|---|---|---|"]
    for code, meaning in CODES.items():
        layer = CODE_LAYERS[code]
        where = LAYERS[layer] if layer else "told by the baseline replay"
        if code in UNJUDGED_CODES:
            where = "none: no verdict drawn"
        lines.append(f"| [`{code}`](invariants.md#{code}) | {_cell(meaning)} | {where} |")
    return "\n".join(lines) + "\n"


def code_meaning(code: str) -> str:
    """The meaning line of one code, as an admonition-free paragraph."""
    if code not in CODES:
        raise DocsError(f"unknown violation code {code!r} in a ddtree:code section")
    return f"**Meaning:** {_text(CODES[code])}.\n"


def faults_markdown() -> str:
    """The reference server's faults and which layer each one imitates."""
    from pytest_ddtree.reference.faults import FAULT_LAYERS, FAULTS

    lines = ["| Fault | Layer | What the server does |", "|---|---|---|"]
    for name, text in FAULTS.items():
        lines.append(f"| `{name}` | {LAYERS[FAULT_LAYERS[name]]} | {_cell(text)} |")
    return "\n".join(lines) + "\n"


def server_options_markdown() -> str:
    """The reference server's command-line options, from its own parser."""
    from pytest_ddtree.reference.__main__ import build_parser

    lines = ["| Option | Default | Meaning |", "|---|---|---|"]
    for action in build_parser()._actions:
        if isinstance(action, argparse._HelpAction) or not action.option_strings:
            continue
        flag = max(action.option_strings, key=len)
        if action.metavar:
            flag += f" {action.metavar}"
        elif action.nargs != 0:
            flag += f" {action.dest.upper()}"
        default = action.default
        unset = isinstance(default, bool) or default in (None, [], ())
        shown = "-" if unset else f"`{default}`"
        text = (action.help or "").replace("%(default)s", str(default))
        text = re.sub(r"\s*\(default [^)]*\)", "", text)
        if action.choices and action.dest != "fault":
            text += " (one of " + ", ".join(f"`{c}`" for c in action.choices) + ")"
        lines.append(f"| `{flag}` | {shown} | {_cell(text)} |")
    return "\n".join(lines) + "\n"


#: Each fixture returning an object, and the object's class in
#: ``pytest_ddtree.pytest_plugin.fixtures``.
FIXTURE_CLASSES = (
    ("ddtree_check", "DDTreeCheck"),
    ("ddtree_benchmark", "DDTreeBenchmark"),
    ("ddtree_sweep", "DDTreeSweep"),
    ("ddtree_lossless", "DDTreeLossless"),
    ("ddtree_determinism", "DDTreeDeterminism"),
    ("ddtree_distribution", "DDTreeDistribution"),
    ("ddtree_cold_warm_batched", "DDTreeColdWarmBatched"),
    ("ddtree_load", "LoadTester"),
)


def fixture_signature(fixture: str, cls: type) -> str:
    """``fixture(arg: type = default, ...) -> result``, from the class's ``__call__``."""
    parts: list[str] = []
    star = False
    for param in list(inspect.signature(cls.__call__).parameters.values())[1:]:  # no self
        if param.kind is param.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        prefix = "**" if param.kind is param.VAR_KEYWORD else ""
        text = f"{prefix}{param.name}: {param.annotation}"
        if param.default is not param.empty:
            default = param.default
            if isinstance(default, enum.Enum):
                # a sentinel (ddtree_benchmark's tree_budget): say what it stands for
                text = f"{param.name}: int | None = <{default.value}>"
            else:
                text += f" = {default!r}"
        parts.append(text)
    result = inspect.signature(cls.__call__).return_annotation
    one_line = f"{fixture}(" + ", ".join(parts) + f") -> {result}"
    if len(one_line) <= 88:
        return one_line
    return f"{fixture}(\n" + "".join(f"    {part},\n" for part in parts) + f") -> {result}"


def _docstring(text: str | None) -> str:
    # Sphinx roles read as code in Markdown
    return _text(re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", inspect.cleandoc(text or "")))


def fixtures_markdown() -> str:
    """One section per fixture object: its real signature, then its documentation."""
    from pytest_ddtree.pytest_plugin import fixtures

    lines: list[str] = []
    for fixture, name in FIXTURE_CLASSES:
        cls = getattr(fixtures, name)
        lines += [f"### `{fixture}` {{#{fixture.replace('_', '-')}}}", ""]
        lines += ["```python", fixture_signature(fixture, cls), "```", ""]
        lines += [f"A `pytest_ddtree.{name}`.", ""]
        for doc in (cls.__doc__, cls.__call__.__doc__):
            lines += [_docstring(doc), ""]
    return "\n".join(lines).rstrip() + "\n"


def dialects_markdown() -> str:
    """One row per registered dialect: where its statistics are, where a per-request budget
    goes, which fields name the stop that fired, its ``/tokenize`` and its ``/metrics`` names."""
    from pytest_ddtree.core.dialects import REGISTRY

    lines = [
        "| Dialect | Statistics | Budget field | Stop named by | `/tokenize` | `/metrics` |",
        "|---|---|---|---|---|---|",
    ]
    for d in REGISTRY.values():
        budget = f"`{d.budget_field}`" if d.budget_field else "-"
        stops = ", ".join(f"`{f}`" for f in d.stop_fields) or "-"
        tokenize = f"`{d.tokenize.path}`" if d.tokenize else "-"
        metrics = f"`{d.metrics.prefix}:...`" if d.metrics else "-"
        lines.append(
            f"| `{d.name}` | {_cell(d.summary)} | {budget} | {stops} | {tokenize} | {metrics} |"
        )
    return "\n".join(lines) + "\n"


GENERATORS = {
    "dialects": dialects_markdown,
    "options": options_markdown,
    "marker": marker_markdown,
    "codes": codes_markdown,
    "faults": faults_markdown,
    "server-options": server_options_markdown,
    "fixtures": fixtures_markdown,
}


def generate(name: str, arg: str | None) -> str:
    """The text of one generated section; an unknown one raises ``DocsError``."""
    if name == "code":
        if not arg:
            raise DocsError("a ddtree:code section needs a code name")
        return code_meaning(arg)
    if name not in GENERATORS or arg:
        raise DocsError(f"unknown generated section {_begin(name, arg)!r}")
    return GENERATORS[name]()


def _begin(name: str, arg: str | None = None) -> str:
    return f"<!-- ddtree:{name} {arg} -->" if arg else f"<!-- ddtree:{name} -->"


class Section:
    """One begin/end pair of a page: its name, argument and the committed text between."""

    def __init__(
        self,
        name: str,
        arg: str | None,
        start: int,
        body: tuple[int, int],
        end: int,
        closed: bool = True,
    ):
        self.name, self.arg = name, arg
        self.start, self.body, self.end = start, body, end
        self.closed = closed  # False: a lone begin marker, not generated yet

    @property
    def label(self) -> str:
        return f"ddtree:{self.name} {self.arg}" if self.arg else f"ddtree:{self.name}"


def sections(markdown: str) -> list[Section]:
    """Every begin/end section of ``markdown``, in order.

    A generated section's lone begin marker (a page just written, or merged from a branch that
    added one) is a section not generated yet: ``render`` fills and closes it. A transcript
    without its end marker raises ``DocsError``."""
    found: list[Section] = []
    pos = 0
    while match := BEGIN.search(markdown, pos):
        name, arg = match.group(1), match.group(2)
        end_marker = END.format(name=name)
        close = markdown.find(end_marker, match.end())
        nested = BEGIN.search(markdown, match.end(), close) if close >= 0 else None
        if (close < 0 or nested) and name not in FOREIGN:
            found.append(Section(name, arg, match.start(), (match.end(),) * 2, match.end(), False))
            pos = match.end()
            continue
        if close < 0:
            line = markdown.count("\n", 0, match.start()) + 1
            raise DocsError(f"line {line}: {match.group(0)} has no end marker {end_marker}")
        if nested:
            raise DocsError(f"{match.group(0)} holds another section: {nested.group(0)}")
        end = close + len(end_marker)
        found.append(Section(name, arg, match.start(), (match.end(), close), end))
        pos = end
    return found


def _framed(text: str) -> str:
    # a blank line each side: the generated text is its own Markdown block
    return "\n\n" + text.strip("\n") + "\n\n"


def render(markdown: str) -> str:
    """``markdown`` with every generated section filled with the text the code gives now.

    Transcript sections are left as they are; a lone begin marker gets its text and its end
    marker; an unknown section raises ``DocsError``."""
    out: list[str] = []
    pos = 0
    for section in sections(markdown):
        if section.name in FOREIGN:
            continue
        out.append(markdown[pos : section.body[0]])
        out.append(_framed(generate(section.name, section.arg)))
        if not section.closed:
            out.append(END.format(name=section.name))
        pos = section.body[1]
    out.append(markdown[pos:])
    return "".join(out)


def stale(markdown: str) -> list[str]:
    """The generated sections of ``markdown`` whose committed text is not what the code gives."""
    return [
        s.label
        for s in sections(markdown)
        if s.name not in FOREIGN
        and (not s.closed or markdown[s.body[0] : s.body[1]] != _framed(generate(s.name, s.arg)))
    ]


def check_invariants_page(markdown: str) -> None:
    """Every code has exactly one ``## `code` `` section, and no section names an unknown code."""
    headings = CODE_HEADING.findall(markdown)
    missing = [c for c in CODES if c not in headings]
    unknown = [h for h in headings if h not in CODES]
    repeated = sorted({h for h in headings if headings.count(h) > 1})
    problems = []
    if missing:
        problems.append("no section for " + ", ".join(missing))
    if unknown:
        problems.append("sections for unknown codes " + ", ".join(unknown))
    if repeated:
        problems.append("repeated sections " + ", ".join(repeated))
    if problems:
        raise DocsError(f"{INVARIANTS_PAGE}: " + "; ".join(problems))


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs event: the committed generated sections must be what the code gives now."""
    from mkdocs.exceptions import PluginError

    try:
        if page.file.src_uri == INVARIANTS_PAGE:
            check_invariants_page(markdown)
        old = stale(markdown)
    except DocsError as exc:
        raise PluginError(f"{page.file.src_uri}: {exc}") from None
    if old:
        raise PluginError(
            f"{page.file.src_uri}: generated section(s) out of date: {', '.join(old)}; "
            f"run {REGENERATE}"
        )
    return markdown
