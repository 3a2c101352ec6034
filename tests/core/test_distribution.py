"""Losslessness in distribution: the permutation test, and ``ddtree_distribution`` end to end."""

from __future__ import annotations

import random

import pytest

from pytest_ddtree.checks.distribution import (
    compare_answers,
    opening,
    request_seeds,
    run_distribution,
    words,
)
from pytest_ddtree.reference import ReferenceServer

FAST = ("--ddtree-reference-latency=off",)
VOCAB = [f"w{i}" for i in range(40)]


def _answers(rng: random.Random, n: int, weights: list[float]) -> list[str]:
    return [" ".join(rng.choices(VOCAB, weights, k=rng.randint(20, 40))) + "." for _ in range(n)]


def test_words_and_opening() -> None:
    assert words("The river, at Dawn!") == ["the", "river", ",", "at", "dawn", "!"]
    assert opening("The river, at Dawn!") == "the river"
    assert opening("") == ""


def test_request_seeds_are_distinct_31_bit_and_repeatable() -> None:
    seeds = request_seeds(1, 500)
    assert len(set(seeds)) == 500 and all(0 <= s < 2**31 for s in seeds)
    assert request_seeds(1, 500) == seeds and request_seeds(2, 500) != seeds
    assert request_seeds(1, 10) == seeds[:10]


def test_the_same_answers_give_the_same_p_value() -> None:
    rng = random.Random(1)
    flat = [1.0] * len(VOCAB)
    a, b = _answers(rng, 20, flat), _answers(rng, 20, flat)
    first = compare_answers(a, b, permutations=199)
    assert compare_answers(a, b, permutations=199) == first
    assert 0 < first.p_value <= 1
    assert [s.name for s in first.statistics] == ["opening", "words", "bigrams", "length"]


def test_identical_sides_are_never_told_apart() -> None:
    rng = random.Random(2)
    a = _answers(rng, 15, [1.0] * len(VOCAB))
    assert compare_answers(a, list(a), permutations=199).p_value > 0.5


def test_a_sharper_side_is_found_and_named() -> None:
    rng = random.Random(3)
    flat = [1.0] * len(VOCAB)
    sharp = [8.0 if i < 3 else 1.0 for i in range(len(VOCAB))]
    result = compare_answers(_answers(rng, 30, sharp), _answers(rng, 30, flat), permutations=499)
    assert result.differs and result.p_value <= 0.01
    assert {w for w, _, _ in result.words[:3]} == {"w0", "w1", "w2"}
    diff = result.differences()
    assert "more frequent on the server" in diff["words"]
    assert "N = 30 server and 30 baseline answers, 499 permutations" in result.summary()


def test_false_alarms_stay_near_alpha_under_the_null() -> None:
    # the permutation test is exact: 200 pairs of samples from one distribution
    rng = random.Random(4)
    weights = [1.0 / (i + 1) for i in range(len(VOCAB))]  # Zipf-like, as words are
    rejected = sum(
        compare_answers(
            _answers(rng, 12, weights), _answers(rng, 12, weights), permutations=99
        ).differs
        for _ in range(200)
    )
    assert rejected <= 20  # expected 10 at alpha 0.05; 20 is 3 standard deviations above


def test_bad_arguments_are_one_line() -> None:
    with pytest.raises(ValueError, match="both sides need at least one answer"):
        compare_answers([], ["a"])
    with pytest.raises(ValueError, match="permutations must be >= 1"):
        compare_answers(["a"], ["b"], permutations=0)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"temperature": 0}, r"temperature must be above 0 .* ddtree_lossless"),
        ({"temperature": 2.5}, r"temperature must be above 0 and at most 2, got 2.5"),
        ({"samples": 1}, "samples must be at least 2, got 1"),
        ({"alpha": 0.9}, r"alpha must be from 0.001 .* to 0.5, got 0.9"),
        ({"alpha": 0.0005}, r"alpha must be from 0.001 \(the smallest p-value"),
    ],
)
def test_bad_arguments_are_refused_before_any_request(kw: dict[str, float], message: str) -> None:
    server = _Side(13)
    args = {"temperature": 0.7, "samples": 5, "alpha": 0.05, **kw}
    with pytest.raises(ValueError, match=message):
        run_distribution(server, server, "hi", max_tokens=8, **args)  # type: ignore[arg-type]
    assert server.seeds == []


DISTRIBUTION_TESTS = """
import pytest

PROMPT = "Write a detailed essay about harbours and ships."

@pytest.mark.parametrize("fault", ["", "draft-confidence"])
def test_distribution(ddtree_distribution, fault):
    headers = {"X-DDTree-Fault": fault} if fault else {}
    result = ddtree_distribution(PROMPT, temperature=0.7, max_tokens=96, headers=headers)
    assert not result.differs and result.samples == (40, 40)
"""


def test_healthy_passes_and_a_verifier_that_favours_the_drafter_fails(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(DISTRIBUTION_TESTS)
    result = pytester.runpytest("--ddtree-budgets=1024", "--junitxml=out.xml", *FAST)
    result.assert_outcomes(passed=1, failed=1)
    seeds = request_seeds(0, 82)  # --ddtree-sweep-seed's default
    result.stdout.fnmatch_lines(
        [
            "*not lossless in distribution at temperature 0.7",
            "*[[]not-lossless-in-distribution[]] at temperature 0.7 the server's 40 answers are "
            "not distributed as the target-only baseline's 40 (p = 0.0* <= alpha 0.05)",
            "*test: p = 0.0* (alpha 0.05; N = 40 server and 40 baseline answers, 999 "
            "permutations; opening p=*, words p=*, bigrams p=*, length p=*)",
            "*openings: more frequent on the server (of 40 vs 40 answers): '*' * vs *",
            "*words: more frequent on the server (count in all answers): *",
            # the seeds named are the ones sent, and the call named draws them again
            f"*seeds: server {seeds[0]}, {seeds[1]}, ... (40 seeds), baseline {seeds[40]}, "
            f"{seeds[41]}, ... (40 seeds): pytest_ddtree.checks.distribution.request_seeds(0, 82)*",
            "*diagnosis: speculative decoding*",
        ]
    )
    xml = (pytester.path / "out.xml").read_text()
    assert 'name="ddtree_distribution_p"' in xml
    # a level-alpha rejection at 0.7 does not bar the budget from timing (at 0 or elsewhere)
    assert "INVALID (not-lossless)" not in result.stdout.str()


def test_a_server_that_drops_the_seed_is_named_not_judged(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_distribution(ddtree_distribution):
            ddtree_distribution("Write a detailed essay about harbours and ships.",
                                samples=6, max_tokens=32,
                                headers={"X-DDTree-Fault": "seed-dropped"})
        """
    )
    result = pytester.runpytest("--ddtree-budgets=64", *FAST)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*not comparable: the server's and the baseline's samples at temperature 0.7 cannot "
            "be compared; no verdict on losslessness in distribution",
            "*[[]not-comparable[]] no verdict on losslessness at temperature 0.7: the server gave "
            "one answer to 6 distinct seeds: it ignores seed (the same sample whatever the seed)",
            "*diagnosis: undetermined - not comparable",
            "*what to do: pass the request's seed and temperature through to the sampler*",
        ]
    )
    assert "not-lossless-in-distribution" not in result.stdout.str()


def test_answers_cut_short_are_not_comparable(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_distribution(ddtree_distribution):
            ddtree_distribution("Write a detailed essay about harbours and ships.",
                                samples=5, max_tokens=32,
                                headers={"X-DDTree-Fault": "stream-no-done"})
        """
    )
    result = pytester.runpytest("--ddtree-budgets=64", *FAST)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*[[]not-comparable[]] no verdict on losslessness at temperature 0.7: 5 of the "
            "server's 5 answers did not arrive whole (first: stream-integrity: the stream ended "
            "without [[]DONE[]]*",
        ]
    )


def test_without_a_baseline_it_skips(
    pytester: pytest.Pytester, reference_server: ReferenceServer
) -> None:
    pytester.makepyfile(
        """
        def test_distribution(ddtree_distribution):
            ddtree_distribution("Write a detailed essay about harbours and ships.", samples=5)
        """
    )
    result = pytester.runpytest(f"--ddtree-endpoint={reference_server.base_url}", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*needs a target-only baseline*--ddtree-baseline-endpoint*"])


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (
            "--ddtree-distribution-samples=2",
            "invalid distribution-samples '2' (from option --ddtree-distribution-samples): "
            "expected an integer >= 5",
        ),
        (
            "--ddtree-distribution-alpha=0.7",
            "invalid distribution-alpha '0.7' (from option --ddtree-distribution-alpha): "
            "expected a level from 0.001 (the smallest p-value the test's permutations can "
            "show) to 0.5, e.g. 0.05 or 5%",
        ),
        (
            "--ddtree-distribution-alpha=0.0005",
            "invalid distribution-alpha '0.0005' (from option --ddtree-distribution-alpha): "
            "expected a level from 0.001 (the smallest p-value",
        ),
    ],
)
def test_bad_options_stop_the_run_in_one_line(
    pytester: pytest.Pytester, option: str, message: str
) -> None:
    pytester.makepyfile("def test_a(): pass")
    result = pytester.runpytest(option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()
    assert "Traceback" not in result.stderr.str()


def test_options_resolve_with_their_source() -> None:
    from pytest_ddtree.core.options import resolve
    from pytest_ddtree.core.settings import SettingsError

    settings = resolve({}, {"ddtree_distribution_samples": "60"}, {})
    assert (settings.distribution_samples, settings.distribution_alpha) == (60, 0.05)
    assert settings.source_of("distribution_samples") == "ini key ddtree_distribution_samples"
    with pytest.raises(SettingsError, match=r"\(from ini key ddtree_distribution_alpha\)"):
        resolve({}, {"ddtree_distribution_alpha": "nan"}, {})


class _Side:
    """A server that reports ``prompt_tokens`` for every prompt (the engine tier shows the real
    case: llama.cpp behind another chat template); the reference server cannot differ so."""

    def __init__(self, prompt_tokens: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.seeds: list[int] = []

    def request(self, prompt: str, *, seed: int, **kw: object) -> object:
        from invariants.factories import completion

        self.seeds.append(seed)
        text = f"An answer drawn with seed {seed} about harbours and the ships in them."
        return completion(text, prompt_tokens=self.prompt_tokens, temperature=0.7)


def test_another_prompt_is_named_before_any_sampling() -> None:
    server, baseline = _Side(13), _Side(37)
    run = run_distribution(
        server,  # type: ignore[arg-type]
        baseline,  # type: ignore[arg-type]
        "Write about harbours.",
        temperature=0.7,
        samples=40,
        alpha=0.05,
        max_tokens=32,
    )
    assert run.result is None
    assert run.not_comparable == (
        "the target-only baseline sees 37 prompt tokens, the server 13 (usage.prompt_tokens): "
        "a different chat template or tokenizer"
    )
    assert "serve the baseline with the same chat template" in run.advice
    warm = request_seeds(1, 82)[80:]
    assert (server.seeds, baseline.seeds) == ([warm[0]], [warm[1]])  # the warm-ups only


def test_an_answer_the_target_alone_also_breaks_is_the_models_not_a_verdict(
    pytester: pytest.Pytester,
) -> None:
    # every answer loops, on the server and on its target-only twin alike (a small model
    # that loops at this temperature): named in a warning; the distribution test goes on
    pytester.makepyfile(
        """
        def test_distribution(ddtree_distribution):
            ddtree_distribution("Write a detailed essay about harbours and ships.",
                                samples=6, max_tokens=48)
        """
    )
    result = pytester.runpytest(
        "--ddtree-budgets=64", "--ddtree-reference-fault=degenerate", "-W", "default", *FAST
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*breaks degenerate, and the target-only baseline writes it too at the same seed*"]
    )


def test_an_answer_only_speculation_breaks_fails_the_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_distribution(ddtree_distribution):
            ddtree_distribution("Write a detailed essay about harbours and ships.",
                                samples=6, max_tokens=48,
                                headers={"X-DDTree-Fault": "overrun"})
        """
    )
    result = pytester.runpytest("--ddtree-budgets=64", *FAST)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*an answer sampled at temperature 0.7 breaks output-quality invariants: *overrun*"]
    )


def test_more_often_is_the_one_sided_fisher_exact_tail() -> None:
    from pytest_ddtree.checks.distribution import more_often

    # nothing broke: nothing to explain
    assert more_often(0, 40, 0, 40) == 1.0
    # one draw of 40 against none: as likely on either side
    assert more_often(1, 40, 0, 40) == pytest.approx(0.5)
    # 5 of 40 against none: C(40,5) / C(80,5)
    assert more_often(5, 40, 0, 40) == pytest.approx(658008 / 24040016)
    # every answer broken on one side, none on the other: 1 / C(12, 6)
    assert more_often(6, 6, 0, 6) == pytest.approx(1 / 924)
    # the baseline breaks as often: no evidence against the server
    assert more_often(3, 40, 3, 40) > 0.5


def test_a_sampled_loop_in_every_server_answer_fails_with_the_rates(
    pytester: pytest.Pytester,
) -> None:
    # every answer of the server loops, none of a healthy baseline's (another reference
    # server, which replays the looping answers cleanly): far more often than chance, so the
    # draws are a verdict, with both sides' counts in the header
    from pytest_ddtree.reference import start_reference_server

    pytester.makepyfile(
        """
        def test_distribution(ddtree_distribution):
            ddtree_distribution("Write a detailed essay about harbours and ships.",
                                samples=6, max_tokens=48)
        """
    )
    looping = start_reference_server(simulated_latency=False, faults=("degenerate",))
    healthy = start_reference_server(simulated_latency=False)
    try:
        result = pytester.runpytest(
            f"--ddtree-endpoint={looping.root_url}/v1",
            f"--ddtree-baseline-endpoint={healthy.root_url}/v1",
            "--ddtree-budgets=64",
        )
    finally:
        looping.stop()
        healthy.stop()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*breaks output-quality invariants: degenerate; 6 of 6 answers sampled at "
            "temperature 0.7 break degenerate, 0 of the target-only baseline's 6 (one-sided "
            "Fisher exact p = 0.00108, alpha 0.05)*"
        ]
    )
