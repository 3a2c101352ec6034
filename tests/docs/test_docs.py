"""The documentation cannot drift from the code.

The option reference, the marker table, the code table and the reference server's faults and
options are generated at build time by ``docs/hooks.py``; these tests check that the
generated text covers everything, that the hand-written invariants page has one section per
violation code, and that every option, fixture and code the pages (and the README and the
example suite) mention exists. When MkDocs is installed (the ``docs`` extra) the site is also
built, to see the generated text reach the built pages (a strict build passes without the hook
too: CI's docs step, ``mkdocs build --strict``, proves only that the site builds).
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import shutil
import subprocess
import sys
from html import escape
from pathlib import Path
from types import ModuleType

import pytest

from pytest_ddtree.checks.invariants import CODES
from pytest_ddtree.core.options import MARKER_KEYS, OPTIONS
from pytest_ddtree.reference import FAULTS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
PROSE = [*PAGES, ROOT / "README.md", *sorted((ROOT / "example_suite").glob("*.py"))]


def _load_hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ddtree_docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hooks = _load_hooks()


def _rendered(name: str) -> str:
    return str(hooks.render((DOCS / name).read_text(encoding="utf-8")))


def test_every_option_is_in_the_reference() -> None:
    page = _rendered("options.md")
    for opt in OPTIONS:
        assert f"### `{opt.cli}`" in page, opt.cli
        assert f"`{opt.ini}`" in page, opt.ini
        assert hooks._text(opt.help) in page, opt.cli
        for var in opt.env:
            assert f"`{var}`" in page, var
        if opt.default is not None:
            assert f"`{opt.default}`" in page, opt.default


def test_option_reference_is_generated_not_copied() -> None:
    source = (DOCS / "options.md").read_text(encoding="utf-8")
    assert "<!-- ddtree:options -->" in source
    # a hand-written option section would not follow the table when an option changes
    assert not re.search(r"^#+ `--ddtree-", source, re.MULTILINE)


def test_every_marker_keyword_is_listed() -> None:
    for page in ("options.md", "writing-tests.md"):
        text = _rendered(page)
        for key in MARKER_KEYS:
            assert f"| `{key}` |" in text, (page, key)


def test_every_code_has_a_section() -> None:
    source = (DOCS / "invariants.md").read_text(encoding="utf-8")
    hooks.check_invariants_page(source)  # raises on a missing, unknown or repeated section
    page = _rendered("invariants.md")
    for code, meaning in CODES.items():
        assert f"## `{code}`" in page
        assert hooks._text(meaning) in page, code


def test_each_code_section_states_meaning_evidence_and_fix() -> None:
    source = (DOCS / "invariants.md").read_text(encoding="utf-8")
    sections = re.split(r"^## `", source, flags=re.MULTILINE)[1:]
    assert len(sections) == len(CODES)
    for section in sections:
        code = section.split("`", 1)[0]
        assert f"<!-- ddtree:code {code} -->" in section, code
        assert "**How to fix the server.**" in section, code
        # evidence: a real violation block, except for checks across a whole sweep
        if code != "budget-ignored":
            assert f"[{code}]" in section, code


def test_check_invariants_page_rejects_a_missing_section() -> None:
    source = (DOCS / "invariants.md").read_text(encoding="utf-8")
    broken = source.replace("## `early-stop`", "## early stop")
    with pytest.raises(hooks.DocsError, match="no section for early-stop"):
        hooks.check_invariants_page(broken)
    with pytest.raises(hooks.DocsError, match="unknown codes made-up"):
        hooks.check_invariants_page(source + "\n## `made-up`\n")


def test_every_fault_is_documented() -> None:
    page = _rendered("reference-server.md")
    for name, description in FAULTS.items():
        assert f"| `{name}` |" in page, name
        assert hooks._cell(description) in page, name


def test_server_options_come_from_its_parser() -> None:
    from pytest_ddtree.reference.__main__ import build_parser

    page = _rendered("reference-server.md")
    for action in build_parser()._actions:
        for flag in action.option_strings:
            if flag.startswith("--") and flag != "--help":
                assert f"`{flag}" in page, flag


def test_unknown_placeholders_are_rejected() -> None:
    with pytest.raises(hooks.DocsError):
        hooks.render("<!-- ddtree:nonsense -->")
    with pytest.raises(hooks.DocsError):
        hooks.render("<!-- ddtree:code not-a-code -->")


def test_every_page_renders() -> None:
    for page in PAGES:
        text = _rendered(page.name)
        assert "<!-- ddtree:" not in text, page.name


def test_mentioned_options_exist() -> None:
    known = {opt.cli for opt in OPTIONS}
    for path in PROSE:
        for flag in re.findall(r"--ddtree-[a-z0-9-]*[a-z0-9]", path.read_text(encoding="utf-8")):
            assert flag in known, f"{path.name} mentions {flag}, which is not an option"


def test_mentioned_fixtures_and_ini_keys_exist() -> None:
    import pytest_ddtree.plugin as plugin

    fixtures = set(re.findall(r"def (ddtree_\w+)\(", Path(plugin.__file__ or "").read_text()))
    # JUnit XML properties the plugin records on a test
    properties = {
        name
        for module in (ROOT / "pytest_ddtree").rglob("*.py")
        for name in re.findall(r'\("(ddtree_\w+)",', module.read_text(encoding="utf-8"))
    }
    known = fixtures | properties | {opt.ini for opt in OPTIONS} | {"ddtree_stats"}
    for path in PAGES:
        for name in re.findall(r"`(ddtree_[a-z_]+)", path.read_text(encoding="utf-8")):
            assert name in known, f"{path.name} mentions {name}, which does not exist"


def test_mentioned_codes_exist() -> None:
    for path in PAGES:
        text = path.read_text(encoding="utf-8")
        for code in re.findall(r"\(invariants\.md#([a-z-]+)\)", text):
            assert code in CODES, f"{path.name} links to unknown code {code}"
        for code in re.findall(r"--ddtree-skip-check[ =]([a-z-]+)", text):
            assert code in CODES, f"{path.name} skips unknown code {code}"


@pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
    reason="mkdocs and mkdocs-material are in the docs extra",
)
def test_the_built_site_shows_the_generated_text(tmp_path: Path) -> None:
    mkdocs = shutil.which("mkdocs") or ""
    command = ([mkdocs] if mkdocs else [sys.executable, "-m", "mkdocs"]) + [
        "build",
        "--strict",
        "--quiet",
        "--site-dir",
        str(tmp_path / "site"),
    ]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    # the hook ran in the build: options.md names no option by hand, the generated reference does
    html = (tmp_path / "site" / "options" / "index.html").read_text(encoding="utf-8")
    assert "--ddtree-endpoint" in html
    # markup quoted in generated text is shown, not swallowed by the browser: the meanings of
    # role-leak, special-token-leak and reasoning-leak quote tags ('<think>'); the hand-written
    # code blocks and spans are escaped whatever the hook does
    invariants = (tmp_path / "site" / "invariants" / "index.html").read_text(encoding="utf-8")
    quoting = [meaning for meaning in CODES.values() if "<" in meaning]
    assert quoting
    for meaning in quoting:
        assert escape(meaning, quote=False) in invariants, meaning
    for page in sorted((tmp_path / "site").rglob("*.html")):
        assert "<think>" not in page.read_text(encoding="utf-8"), page


def test_prose_has_no_raw_markup() -> None:
    # '<think>' or '<|im_end|>' outside a code span would be swallowed as HTML
    for path in PAGES:
        text = path.read_text(encoding="utf-8")
        text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
        text = re.sub(r"`[^`\n]*`|<!--.*?-->", "", text)
        raw = re.findall(r"<[A-Za-z/|][^>]*>", text)
        assert not raw, f"{path.name}: put {raw[0]!r} in backticks"


def test_fixture_reference_shows_the_real_signatures() -> None:
    source = (DOCS / "writing-tests.md").read_text(encoding="utf-8")
    assert "<!-- ddtree:fixtures -->" in source
    page = _rendered("writing-tests.md")
    from pytest_ddtree.pytest_plugin import fixtures

    for fixture, name in hooks.FIXTURE_CLASSES:
        cls = getattr(fixtures, name)
        assert hooks.fixture_signature(fixture, cls) in page, fixture
        for param in list(inspect.signature(cls.__call__).parameters)[1:]:
            assert param in hooks.fixture_signature(fixture, cls), (fixture, param)


def test_the_dialect_table_has_one_row_per_registered_dialect() -> None:
    from pytest_ddtree.core.dialects import REGISTRY

    rows = [line for line in _rendered("options.md").splitlines() if line.startswith("| `")]
    dialect_rows = [
        r.split("|")[1].strip(" `") for r in rows if r.split("|")[1].strip(" `") in REGISTRY
    ]
    assert dialect_rows == list(REGISTRY)


def test_every_code_and_fault_has_one_layer_vocabulary() -> None:
    from pytest_ddtree.checks.diagnose import TRANSPORT_CODES, VERDICT_TITLES
    from pytest_ddtree.checks.invariants import CODE_LAYERS, CODES, LAYERS
    from pytest_ddtree.reference.faults import FAULT_LAYERS, FAULTS

    assert CODE_LAYERS.keys() == CODES.keys()
    assert set(CODE_LAYERS.values()) - {None} <= LAYERS.keys()
    assert FAULT_LAYERS.keys() == FAULTS.keys() and set(FAULT_LAYERS.values()) <= LAYERS.keys()
    assert {k: VERDICT_TITLES[k] for k in LAYERS} == LAYERS
    assert {
        "http-error",
        "stream-integrity",
        "stream-error",
        "usage-mismatch",
        "finish-lie",
        "schema",
        "encoding",
        "too-large",
        # the sampling check: the request's sampling parameters never reach the sampler
        "temperature-ignored",
        "seed-ignored",
        # the structure the request asked for: the server's grammar or tool-call parser
        "json-schema",
        "json-object",
        "tool-call",
        # the serving stack matches stops (the replay tells a speculation-only miss)
        "stop-sequence",
    } == TRANSPORT_CODES
    faults = _rendered("reference-server.md")
    for name, layer in FAULT_LAYERS.items():
        assert f"| `{name}` | {LAYERS[layer]} |" in faults, name


# An absolute path of somebody's machine: a home or work directory, a temporary directory,
# a Windows drive, or pytest's own `rootdir:` line showing one. A reader's paths differ.
MACHINE_PATH = re.compile(
    r"(?<![\w.~])/(?:home|Users|work|root|tmp|var/folders|mnt|srv)/"
    r"|\b[A-Za-z]:\\"
    r"|^rootdir: /",
    re.MULTILINE,
)


def machine_paths(text: str) -> list[str]:
    """The lines of ``text`` that show an absolute path of a particular machine."""
    return [line for line in text.splitlines() if MACHINE_PATH.search(line)]


def test_docs_show_no_machine_paths() -> None:
    for path in [*PROSE, *sorted((ROOT / "pytest_ddtree" / "suite").glob("*.ini"))]:
        found = machine_paths(path.read_text(encoding="utf-8"))
        assert not found, f"{path.name} shows a machine path: {found[0]!r}"


@pytest.mark.parametrize(
    "line",
    [
        "rootdir: /work/main/example_suite",
        "rootdir: /srv/ci/checkout",
        "tokenizer tokenizer.json (/home/ana/venv/lib/pytest_ddtree/tokenizer.json)",
        "cd /Users/bo/src/app",
        r"C:\Users\bo\app",
        "report written to /tmp/pytest-of-root/pytest-3/report",
    ],
)
def test_the_machine_path_check_catches(line: str) -> None:
    assert machine_paths(f"text\n{line}\n") == [line]


@pytest.mark.parametrize(
    "line",
    [
        "rootdir: .../first-run",
        "tokenizer tokenizer.json (.../pytest_ddtree/reference/tokenizer.json)",
        "POST http://127.0.0.1:8080/v1/chat/completions",
        "--ddtree-budget-field /speculative.n_max",
        "pip install ./pytest-ddtree",
    ],
)
def test_the_machine_path_check_lets_through(line: str) -> None:
    assert machine_paths(line) == []
