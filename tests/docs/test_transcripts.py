"""The terminal transcripts in the README and the docs are what the commands print now.

Each transcript block names its excerpt (``docs/transcripts.py``); ``python docs/generate.py``
runs the scenarios and writes the blocks. Here a scenario runs again and every line its block
shows must still be one it prints, in order, numbers masked (``transcripts.drift``). The
error scenarios take seconds and run in the default tier; the bundled suite and the fault
runs start the embedded server and run in the slow tier; the runs against real engines are in
``tests/engines/test_{llamacpp,vllm,sglang}_docs.py``, each run only when asked. A scenario whose
command another test runs anyway (``Scenario.checked_by``: the fault matrix of
``tests/example_suite``) is checked there, on that run, and has no run here.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs import load_transcripts

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


transcripts = load_transcripts.transcripts()

FAST = [
    "bad-budgets",
    "bad-slo",
    "bad-goodput",
    "bad-prompts",
    "dead-endpoint",
    "endpoint-502",
    "init",
    "sweep-probe",
]
# a scenario another test checks against the run it makes anyway (``checked_by``) has no run here
SLOW = [
    name
    for name, s in transcripts.SCENARIOS.items()
    if name not in FAST and s.engine is None and s.measurement is None and s.checked_by is None
]


def _assert_current(names: list[str]) -> None:
    problems = transcripts.check(names, PAGES)
    assert not problems, "\n".join(problems)


def test_every_transcript_is_an_excerpt_of_a_scenario() -> None:
    blocks = transcripts.blocks(PAGES)  # an unknown name or a block that is not ```text raises
    shown = {b.name for b in blocks}
    assert shown == set(transcripts.EXCERPTS), "an excerpt no page shows, or a page without one"
    for block in blocks:
        excerpt = transcripts.EXCERPTS[block.name]
        scenario = transcripts.SCENARIOS[excerpt.scenario]
        if excerpt.prompt:
            assert block.lines[0] == f"$ {excerpt.command(scenario)}", (block.page.name, block.name)
        assert [x for x in block.lines if x not in (transcripts.GAP,)], block.name


@pytest.mark.parametrize("scenario", FAST)
def test_the_error_transcripts_are_current(scenario: str) -> None:
    _assert_current([scenario])


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SLOW)
def test_the_embedded_server_transcripts_are_current(scenario: str) -> None:
    _assert_current([scenario])


# lines first-run.md showed in 2026-12 that the run no longer printed (a stale warning, another
# sweep mode), among lines that only differ in their numbers
FIRST_RUN_SHOWN = [
    "ddtree: endpoint http://127.0.0.1:8080/v1; model first listed; dialect auto",
    "test_smoke.py ....F.F.                                                   [ 20%]",
    "server-default    9/9                124 [96-132] n=9          14 / 40        no drafts",
    "WARNING: speculation never drafted at every budget server-default: 0 draft tokens in 9 "
    "request(s) that reported their drafts",
    "Recommended tree_budget=server-default: median decode 124 tok/s [95% CI 96-132] (n=9). "
    "(exhaustive sweep, 2% margin, min n 6, 95% confidence.)",
    "============== 6 failed, 33 passed, 1 skipped in 95.84s (0:01:35) ==============",
]


def test_drift_masks_numbers_and_keeps_words() -> None:
    now = [
        "ddtree: endpoint http://127.0.0.1:8080/v1; model first listed; dialect auto",
        "test_smoke.py ......F.F..                                                [ 12%]",
        "server-default  18/18             98 [97-101] n=18          9 / 31        no stats",
        "WARNING: no speculative statistics came back: is speculation on?",
        "Recommended tree_budget=server-default: median decode 98 tok/s [95% CI 97-101] (n=18). "
        "(adaptive sweep, 12 requests, 2% margin, min n 6, 95% confidence.)",
        "========== 7 failed, 30 passed, 2 skipped in 193.10s (0:03:13) ==========",
    ]
    missing = transcripts.drift(FIRST_RUN_SHOWN, now)
    # the words changed: the stale warning and the sweep mode are caught ...
    assert missing == [FIRST_RUN_SHOWN[3], FIRST_RUN_SHOWN[4]]
    # ... the numbers, the progress dots, the rules' widths and a row's values are not
    same = [FIRST_RUN_SHOWN[i] for i in (0, 1, 2, 5)]
    assert transcripts.drift(same, now) == []
    # the order is the output's
    assert transcripts.drift([now[5], now[0]], now) == [now[0]]


def test_drift_checks_the_verdicts_rule_not_which_verdict() -> None:
    rule = "(adaptive sweep, 66 requests, 2% margin, min n 6, 95% confidence.)"
    now = [f"Either tree_budget=32 or 64: ... slower by more than the margin. {rule}"]
    recommended = f"Recommended tree_budget=64: median decode 2,906 tok/s (n=18). {rule}"
    assert transcripts.drift([recommended], now) == []
    exhaustive = (
        "Recommended tree_budget=64: ... (exhaustive sweep, 2% margin, min n 6, 95% confidence.)"
    )
    assert transcripts.drift([exhaustive], now) == [exhaustive]


def test_drift_checks_that_the_break_even_answer_is_there_not_which_it_is() -> None:
    # a loaded machine decided 256 and left 1024 undecided where a quiet one decided both
    shown = (
        "  Break-even: up to 1024 prompt tokens: tree_budget=64, 1.60x [1.57, 1.62] over the "
        "target alone; at 4096: speculation off (best budget 0.52x [0.51, 0.54])."
    )
    now = (
        "  Break-even: at 256 prompt tokens: tree_budget=64, 1.91x [1.66, 2.21] over the target "
        "alone; at 1024: undecided among 64, off (64 leads); at 4096: speculation off (best "
        "budget 0.52x [0.51, 0.53])."
    )
    assert transcripts.drift([shown], [now]) == []
    assert transcripts.drift([shown], ["  end to end, the best budget over the target"]) == [shown]


def test_the_verdicts_rule_is_read_however_the_verdict_ends() -> None:
    # a run that recommends closes the line with the rule, one that does not closes its
    # sentence after it; the shown verdict's rule is found in either
    shown = (
        "Recommended tree_budget=64: median decode 2,886 tok/s (n=144). Every other valid "
        "budget is slower. (adaptive sweep, 324 of 630 requests, 2% margin, min n 6, "
        "95% confidence.)"
    )
    undecided = (
        "Undecided: tree_budget=64 leads ... would decide. No budget is recommended (adaptive "
        "sweep, 630 of 630 requests, 2% margin, min n 6, 95% confidence)."
    )
    either = (
        "Either tree_budget=32 or 64: ... to name one: more rounds (--ddtree-rounds) would "
        "decide (adaptive sweep, 630 of 630 requests, 2% margin, min n 6, 95% confidence)."
    )
    assert transcripts.drift([shown], [undecided]) == []
    assert transcripts.drift([shown], [either]) == []
    exhaustive = undecided.replace("adaptive sweep, 630 of 630 requests", "exhaustive sweep")
    assert transcripts.drift([shown], [exhaustive]) == [shown]


def test_a_steady_servers_no_drift_line_is_the_machines_load_a_drift_is_not() -> None:
    steady = (
        "no drift: tree_budget=128 measured again at the end: median decode +5% (ratio 1.05, "
        "99% CI 0.94-1.13, 9 pairs); within the rule (interval includes 1 or change <= 5%)"
    )
    drifted = (
        "DRIFT: tree_budget=128 measured again at the end: median decode -9% (ratio 0.91, "
        "99% CI 0.88-0.95, 9 pairs); the server changed during the sweep (throttling, another "
        "tenant, a restart?), so the budgets measured at different times are not comparable"
    )
    # a busy machine slows the end of a sweep on a steady server: the shown line may go ...
    assert transcripts.drift([steady], [drifted]) == []
    # ... but a drift the docs show must still be printed
    assert transcripts.drift([drifted], [steady]) == [drifted]


def test_drift_ignores_the_environment_and_the_machines_load() -> None:
    now = [
        "platform linux -- Python 3.12.1, pytest-9.0.3, pluggy-1.6.0",
        "  best at C=1: 64 (TPOT p50 0.35 ms [0.35, 0.35] n=16); runner-up 32 is +7.6% slower "
        "[+0.9%, +10.2%] n=16 (UNRELIABLE: client saturated or stalled)",
    ]
    shown = [
        "$ pytest --pyargs pytest_ddtree.suite",
        "platform linux -- Python 3.11.7, pytest-9.2.0, pluggy-1.7.0",
        "plugins: ddtree-0.1.0, benchmark-5.3.1",
        "...",
        "  best at C=1: 64 (TPOT p50 0.35 ms [0.35, 0.35] n=16); runner-up 32 is +7.6% slower "
        "[+0.9%, +10.2%] n=16",
    ]
    assert transcripts.drift(shown, now) == []
    assert transcripts.drift(["a line no run prints"], now) == ["a line no run prints"]


def test_mask_hides_machine_paths_and_the_ports_the_system_picked(tmp_path: Path) -> None:
    workdir = tmp_path / "your-project"
    text = (
        f"rootdir: {workdir}\n"
        f"tokenizer tokenizer.json ({ROOT}/pytest_ddtree/reference/tokenizer.json)\n"
        f"log {Path.home()}/.cache/x.log\n"
        "serving http://127.0.0.1:42731/v1 and http://127.0.0.1:8080/v1  \n"
    )
    assert transcripts.mask(text, workdir).splitlines() == [
        "rootdir: .../your-project",
        "tokenizer tokenizer.json (.../pytest_ddtree/reference/tokenizer.json)",
        "log ~/.cache/x.log",
        "serving http://127.0.0.1:<port>/v1 and http://127.0.0.1:8080/v1",
    ]


def test_an_excerpt_marks_its_gaps() -> None:
    lines = ["head", "a", "b", "--- the answer ---", "answer", "end"]
    excerpt = transcripts.Excerpt(
        "suite",
        (transcripts.Piece(count=1), transcripts.Piece("^--- the answer", stop="^answer")),
    )
    scenario = transcripts.SCENARIOS["suite"]
    assert excerpt.render(scenario, lines) == [
        f"$ {scenario.shown}",
        "head",
        "...",
        "--- the answer ---",
        "answer",
        "...",
    ]
    with pytest.raises(LookupError, match="no line matches"):
        transcripts.Piece("^nowhere").select(lines)


def _collected() -> int:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "pytest_ddtree.suite", "--collect-only", "-q"],
        cwd=DOCS,
        env=transcripts._env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = re.search(r"^(\d+) tests? collected", result.stdout, re.MULTILINE)
    assert found, result.stdout[-2000:] + result.stderr[-2000:]
    return int(found.group(1))


def test_the_suites_test_count_in_the_docs_is_what_pytest_collects() -> None:
    count = _collected()
    prose = (DOCS / "writing-tests.md").read_text(encoding="utf-8")
    said = re.findall(r"the whole suite \((\d+) tests", prose)
    assert said == [str(count)], f"writing-tests.md says {said}, the suite collects {count}"
    runs = [b for b in transcripts.blocks(PAGES) if b.name == "suite-run"]
    assert runs
    for block in runs:
        assert f"collected {count} items" in block.lines, (
            f"{block.page.name}: the transcript's count is stale; run "
            f"{transcripts.REGENERATE} --only suite"
        )


def test_generate_runs_an_engines_scenarios_only_when_asked() -> None:
    spec = importlib.util.spec_from_file_location("ddtree_docs_generate", DOCS / "generate.py")
    assert spec is not None and spec.loader is not None
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    engine_of = {name: s.engine for name, s in transcripts.SCENARIOS.items()}

    def chosen(*argv: str) -> set[str]:
        return set(generate.scenarios(generate.parser().parse_args(argv)))

    measured = {name for name, s in transcripts.SCENARIOS.items() if s.measurement}
    plain = {name for name, engine in engine_of.items() if engine is None} - measured
    assert chosen() == plain
    for engine in ("llamacpp", "vllm", "sglang"):
        mine = {name for name, e in engine_of.items() if e == engine}
        assert mine, f"no scenario starts {engine}"
        assert chosen("--engine", engine) == plain | mine
    # --llamacpp is --engine llamacpp, and adds to other engines
    assert chosen("--llamacpp") == chosen("--engine", "llamacpp")
    both = chosen("--engine", "vllm", "--llamacpp")
    assert both == chosen("--engine", "vllm") | chosen("--engine", "llamacpp")
    assert chosen("--only", "llamacpp-stop") == {"llamacpp-stop"}
    with pytest.raises(SystemExit):
        generate.parser().parse_args(["--engine", "tgi"])


@pytest.mark.parametrize(
    ("page", "scenario"), [("llamacpp.md", "llamacpp-stop"), ("sglang.md", "sglang-invariants")]
)
def test_an_engine_pages_prompt_file_is_the_one_its_run_uses(page: str, scenario: str) -> None:
    # the page shows the prompt file its transcript's command names, line by line
    text = (DOCS / page).read_text(encoding="utf-8")
    shown = "\n".join(re.findall(r"```json\n(.*?)```", text, re.DOTALL))
    (content,) = transcripts.SCENARIOS[scenario].files().values()
    for line in content.splitlines():
        assert line in shown.splitlines(), f"{page} does not show {line!r}"


def test_drift_takes_an_slo_withheld_at_a_stalled_point_for_the_same_miss() -> None:
    # load.md's SLO transcript: a busy machine turns "missed" into "withheld" at its points
    point = (
        "E       C=4 tree_budget=64: goodput 0.0% < 100% required by e2e=125ms "
        "(TTFT p99 5.4 ms, TPOT p99 1.6 ms, e2e p99 219.1 ms)"
    )
    shown = ["E       pytest_ddtree.LoadError: SLO missed at 1 load point(s):", point]
    now = [
        "E       pytest_ddtree.LoadError: SLO verdict withheld: the client was saturated or "
        "stalled, so its own delay is in the latencies (lower the concurrency or spread the "
        "load over processes with -n):",
        point + "; client stalled: the event loop woke late for 9% of the point (> 5%)",
    ]
    assert transcripts.drift(shown, now) == []
    # the point's own words are still checked
    stale = point.replace("required by", "wanted by")
    assert transcripts.drift([shown[0], stale], now) == [stale]


def test_an_excerpt_shows_a_failures_evidence_without_pytests_column() -> None:
    lines = [
        "E   pytest_ddtree.InvariantError: 2 output-quality invariant(s) broken: a, b",
        "E   [a] the first",
        "E       x: 1",
        "E   [b] the second",
        "E   diagnosis: serving stack - the baseline fails the same way (a, b)",
        "E       what to do: fix it",
        "----------------------------- Captured stdout call -----------------------------",
    ]
    excerpt = transcripts.Excerpt(
        "suite",
        (
            transcripts.Piece(r"^\[a\] ", until=r"^\S"),
            transcripts.Piece(r"^diagnosis: ", until=r"^\S"),
        ),
        prompt=False,
        strip=r"^E   ",
    )
    assert excerpt.render(transcripts.SCENARIOS["suite"], lines) == [
        "[a] the first",
        "    x: 1",
        "...",
        "diagnosis: serving stack - the baseline fails the same way (a, b)",
        "    what to do: fix it",
        "...",
    ]
    # without a later line to end before, a piece runs to the last line
    assert transcripts.Piece(r"^E   \[b\]", until=r"^nowhere").select(lines) == range(3, 7)


def test_a_transcript_is_checked_against_a_run_already_made(tmp_path: Path) -> None:
    # the fault matrix's run of a command is the docs' run of it: its lines, pytest's column
    # and all, are compared with the block, which shows them without it
    scenario = transcripts.SCENARIOS["fault-early-eos"]
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- ddtree:transcript ev-early-stop -->\n\n```text\n"
        f"$ {scenario.shown}\n...\n[early-stop] finished with 'stop' after 6 token(s)\n"
        "    tokens: 6\n...\n```\n\n<!-- /ddtree:transcript -->\n",
        encoding="utf-8",
    )
    run = ["E   [early-stop] finished with 'stop' after 5 token(s)", "E       tokens: 5"]
    outputs = {"fault-early-eos": {"run": run, "server": []}}
    assert transcripts.check(["fault-early-eos"], [page], outputs=outputs) == []
    outputs["fault-early-eos"]["run"] = ["E   [early-stop] finished after 5 token(s)"]
    (problem,) = transcripts.check(["fault-early-eos"], [page], outputs=outputs)
    assert "ev-early-stop shows 2 line(s)" in problem and "--only fault-early-eos" in problem


def test_a_quoted_selection_is_one_word_as_in_a_shell() -> None:
    assert transcripts._argv("pytest -q -k 'test_smoke and essay-rivers'") == [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-k",
        "test_smoke and essay-rivers",
    ]


def test_a_scenario_runs_a_baseline_server_beside_its_server() -> None:
    # two background servers on ports the system picks, both ready before the command runs,
    # each its own stream, both stopped at the end
    server = "python server_502.py 0"
    scenario = transcripts.Scenario(
        "two-servers",
        "python -c \"print('ran')\"",
        files=transcripts._server_502,
        server=server,
        baseline_server=server,
    )
    streams = transcripts.run(scenario)
    assert streams["run"] == ["ran"]
    for stream in ("server", "baseline"):
        assert streams[stream] == ["serving http://127.0.0.1:<port>/v1"], stream
    excerpt = transcripts.Excerpt("two-servers", stream="baseline")
    assert excerpt.command(scenario) == server
