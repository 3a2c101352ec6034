"""The cost model, its computable optimum, and a measured sweep that agrees with it."""

from __future__ import annotations

import statistics

import httpx
import pytest

from pytest_ddtree.reference import CostModel, optimal_budget, start_reference_server
from pytest_ddtree.reference.cost import DEFAULT_PROMPTS, jitter_factor
from pytest_ddtree.reference.server import ServerOptions, options_to_argv

BUDGETS = [16, 32, 64, 128, 256, 512, 1024]


def test_round_cost_shape() -> None:
    c = CostModel(draft_ms=1, verify_base_ms=2, verify_free_nodes=10, verify_per_node_ms=0.5)
    assert c.round_seconds(5) == pytest.approx(0.003)
    assert c.round_seconds(10) == pytest.approx(0.003)
    assert c.round_seconds(14) == pytest.approx(0.005)
    assert CostModel(slowdown=2).round_seconds(100) == pytest.approx(
        2 * CostModel().round_seconds(100)
    )
    q = CostModel(verify_quadratic_ms=0.001, verify_free_nodes=0, verify_per_node_ms=0)
    assert q.verify_seconds(100) - q.verify_seconds(0) == pytest.approx(0.01)


def test_default_optimum_is_interior() -> None:
    best, table = optimal_budget(BUDGETS)
    assert 32 <= best <= 256
    assert set(table) == set(BUDGETS)
    rates = [table[b]["tok_per_sec"] for b in BUDGETS]
    assert rates[0] < max(rates) and rates[-1] < max(rates)
    taus = [table[b]["tau"] for b in BUDGETS]
    assert taus == sorted(taus)  # acceptance keeps rising while throughput peaks
    assert optimal_budget(BUDGETS) == (best, table)  # deterministic


def test_optimum_moves_with_the_cost_model() -> None:
    cheap_nodes = CostModel(verify_free_nodes=0, verify_per_node_ms=0.0001)
    dear_nodes = CostModel(verify_free_nodes=0, verify_per_node_ms=0.05)
    assert optimal_budget(BUDGETS, cost=cheap_nodes)[0] >= 512
    assert optimal_budget(BUDGETS, cost=dear_nodes)[0] <= 32


def test_bad_budgets() -> None:
    with pytest.raises(ValueError, match="empty"):
        optimal_budget([])
    with pytest.raises(ValueError, match="0"):
        optimal_budget([0, 16])


def test_measured_sweep_agrees_with_the_optimum() -> None:
    # a small, fast cost model with a clear optimum at 16 among these budgets
    cost = CostModel(
        draft_ms=0.3, verify_base_ms=0.7, verify_free_nodes=16, verify_per_node_ms=0.01
    )
    budgets = [4, 16, 64, 256]
    prompts = ["Write a long essay about rivers.", "Explain in detail how bees make honey."]
    best, table = optimal_budget(budgets, prompts=prompts, cost=cost, max_tokens=96)
    measured: dict[int, list[float]] = {b: [] for b in budgets}
    with start_reference_server(cost=cost) as srv, httpx.Client(base_url=srv.base_url) as c:
        for _ in range(3):
            for b in budgets:
                for p in prompts:
                    body = {
                        "messages": [{"role": "user", "content": p}],
                        "max_tokens": 96,
                        "tree_budget": b,
                    }
                    r = c.post("/chat/completions", json=body).json()
                    measured[b].append(r["ddtree_stats"]["tok_per_sec"])
    med = {b: statistics.median(v) for b, v in measured.items()}
    assert max(med, key=lambda b: med[b]) == best == 16
    for b in budgets:  # the simulated time is what is observed
        assert med[b] == pytest.approx(table[b]["tok_per_sec"], rel=0.25), (b, med, table)


# ---------------------------------------------------------------- jitter


def _verify_ms(jitter: float, seed: int, n: int = 12) -> list[float]:
    server = start_reference_server(jitter=jitter, seed=seed, simulated_latency=False)
    try:
        with httpx.Client(base_url=server.base_url, timeout=30) as client:
            out = []
            for _ in range(n):
                r = client.post(
                    "/chat/completions",
                    json={
                        "model": "ddtree-reference",
                        "messages": [{"role": "user", "content": DEFAULT_PROMPTS[0]}],
                        "max_tokens": 48,
                        "temperature": 0,
                        "tree_budget": 64,
                    },
                )
                out.append(float(r.json()["ddtree_stats"]["verify_ms"]))
            return out
    finally:
        server.stop()


def test_jitter_is_seeded_multiplicative_noise_on_each_request() -> None:
    steady = _verify_ms(0.0, seed=0)
    assert len(set(steady)) == 1  # no jitter: the same request costs the same
    noisy = _verify_ms(0.2, seed=0)
    assert noisy == _verify_ms(0.2, seed=0)  # seeded: the same run twice
    assert noisy != _verify_ms(0.2, seed=1)
    ratios = [x / steady[0] for x in noisy]
    assert len(set(ratios)) == len(ratios)
    assert 0.05 < statistics.stdev(ratios) < 0.4  # a spread of about the CV asked for


def test_jitter_factor_has_mean_one_and_the_coefficient_of_variation() -> None:
    xs = [jitter_factor(0.05, 3, i) for i in range(1, 4001)]
    assert statistics.fmean(xs) == pytest.approx(1.0, abs=0.005)
    assert statistics.stdev(xs) == pytest.approx(0.05, rel=0.1)
    assert jitter_factor(0.0, 3, 1) == 1.0


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), "0.1", True])
def test_bad_jitter_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="jitter: must be a number between 0 and 1"):
        ServerOptions(jitter=bad)  # type: ignore[arg-type]


def test_jitter_on_the_command_line() -> None:
    from pytest_ddtree.reference.__main__ import build_parser, main, options_from_args

    opts = options_from_args(build_parser().parse_args(["--jitter", "0.05"]))
    assert opts.jitter == 0.05
    assert options_to_argv(opts)[-2:] == ["--jitter", "0.05"]
    with pytest.raises(SystemExit) as exc:
        main(["--jitter", "-1"])
    assert exc.value.code == 2


def test_the_launch_arguments_reproduce_the_options() -> None:
    from pytest_ddtree.reference.__main__ import build_parser, options_from_args
    from pytest_ddtree.reference.faults import FAULTS

    changed = ServerOptions(
        port=8123,
        target_only=True,
        faults=tuple(FAULTS)[:2],
        simulated_latency=False,
        default_tree_budget=32,
        cost=CostModel(draft_ms=1.5, slowdown=2.0, verify_context_ms=0.5, context_free_tokens=9),
        slowdown_after=4,
        slowdown_factor=2.5,
        jitter=0.1,
        model_id="m",
        draft_context=100,
        draft_halflife=0,
    )
    for opts in (ServerOptions(), changed):
        assert options_from_args(build_parser().parse_args(options_to_argv(opts))) == opts
    assert options_to_argv(ServerOptions()) == []  # the defaults are the server's own
