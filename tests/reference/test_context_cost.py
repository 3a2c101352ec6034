"""The reference server and a long prompt: verification grows dearer and acceptance falls
past a knee, so speculation stops paying at some depth; a short prompt is untouched."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pytest_ddtree.core.context import prompts_at
from pytest_ddtree.reference import CostModel, optimal_budget
from pytest_ddtree.reference.cost import DEFAULT_PROMPTS, draft_keep
from pytest_ddtree.reference.model import get_model
from pytest_ddtree.reference.server import ServerOptions


def _count(text: str) -> int:
    return len(get_model().encode(text))


def _overhead() -> int:
    model = get_model()
    return _count(model.render_chat([("user", "")], False))


def _prompts(depth: int) -> list[str]:
    return [p.text for p in prompts_at(depth, 3, _count, overhead=_overhead(), salt="t")]


def test_the_prompt_costs_nothing_below_the_knee_then_grows_with_each_verified_position() -> None:
    cost = CostModel(verify_context_ms=0.01, context_free_tokens=512)
    assert cost.context_seconds(65, 512) == 0.0
    assert cost.context_seconds(65, 1512) == pytest.approx(65 * 0.01 / 1000)
    assert cost.context_seconds(1, 1512) == pytest.approx(cost.context_seconds(65, 1512) / 65)


def test_the_drafter_keeps_track_up_to_its_context_then_halves_every_halflife() -> None:
    assert draft_keep(512, 512, 2048) == 1.0
    assert draft_keep(512 + 2048, 512, 2048) == pytest.approx(0.5)
    assert draft_keep(10**6, 512, 0) == 1.0  # halflife 0: never decays


def test_a_drafter_that_loses_track_accepts_less_and_writes_the_same_text() -> None:
    model = get_model()
    text = _prompts(3000)[0]
    rendered = model.render_chat([("user", text)], False)
    plan = model.plan(text, rendered)
    lost = replace(plan, draft_keep=draft_keep(3000))

    def run(p, budget):  # type: ignore[no-untyped-def]
        passes = list(model.generate(p, 96, budget))
        return [t for rd in passes for t in rd.tokens][:96], len(passes)

    target, _ = run(plan, None)
    sharp, sharp_passes = run(plan, 64)
    blurred, blurred_passes = run(lost, 64)
    assert sharp == blurred == target  # lossless either way
    assert blurred_passes > 1.5 * sharp_passes  # fewer tokens accepted per pass


def test_short_prompts_keep_their_optimum_and_long_ones_lose_to_the_target_alone() -> None:
    cost = CostModel()
    plain = optimal_budget([16, 32, 64, 128], cost=replace(cost, verify_context_ms=0.0))
    assert optimal_budget([16, 32, 64, 128])[1] == plain[1]  # the default prompts: untouched

    def speedup(depth: int) -> float:
        _, table = optimal_budget([16, 32, 64], prompts=_prompts(depth))
        target = 1.0 / (cost.verify_seconds(0) + cost.context_seconds(1, depth))
        return max(r["tok_per_sec"] for r in table.values()) / target

    assert speedup(512) > 1.5 and speedup(4096) < 1.0


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--draft-halflife", "-1"], "--draft-halflife: must be an integer >= 0, got -1"),
        (["--verify-context-ms", "nan"], "--verify-context-ms: must be a number >= 0"),
        (["--context-free-tokens", "-5"], "--context-free-tokens: must be an integer >= 0"),
    ],
)
def test_a_bad_context_knob_is_one_line_naming_the_flag(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_ddtree.reference.__main__ import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and needle in err and err.count("\n") == 1


def test_the_knobs_are_server_options_with_their_defaults() -> None:
    opts = ServerOptions()
    assert (opts.draft_context, opts.draft_halflife) == (512, 2048)
    assert opts.draft_keep(100) == 1.0 and opts.draft_keep(4608) == pytest.approx(0.25)
    assert DEFAULT_PROMPTS  # the defaults' own prompts are far below every knee
