"""The tree-budget sweep: plan, per-request samples, statistics, recommendation.

Nothing here knows about pytest or pytest-benchmark. A sweep is a list of
:class:`SweepSample` (one per timed request, valid or not); the statistics and
the recommendation are computed from the samples alone, so a ``sweep.json``
written on one machine can be re-analysed, merged or compared anywhere.

Statistics use only the standard library: medians and interquartile ranges,
and seeded percentile-bootstrap confidence intervals, so the same samples and
seed always give the same report. Budgets are ranked by measured decode
throughput, then by mean acceptance *length* (tokens committed per decode
round); acceptance *rate* is never used because it falls arithmetically as the
budget grows, whatever the server does.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pytest_ddtree.completion import Completion
from pytest_ddtree.violation import Violation

SweepOrder = Literal["shuffled", "fixed"]

#: Resamples per bootstrap; 2,000 keeps a 95% percentile interval stable to a
#: few tenths of a percent while a 7-budget report stays well under a second.
BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95

_SECRET_QUERY_KEYS = frozenset(
    {"key", "api_key", "apikey", "api-key", "token", "access_token", "secret", "password", "sig"}
)


# --------------------------------------------------------------------------- samples


@dataclass(frozen=True)
class SweepSample:
    """One timed request of a sweep, valid or not.

    ``tree_budget`` is the budget that was requested (None when the server's
    own budget was used); ``echoed_tree_budget`` what the server said it used.
    ``codes`` are the violation codes of an invalid request (empty when valid)
    and ``messages`` their one-line messages. Timing fields are seconds or
    tokens per second and may be None when the request could not measure them
    (no stream, no statistics). ``concurrent`` marks timings taken while other
    requests were in flight (pytest-xdist workers), which are not comparable
    with timings of a serial run.
    """

    tree_budget: int | None
    prompt_id: str
    round: int
    valid: bool
    codes: tuple[str, ...] = ()
    messages: tuple[str, ...] = ()
    completion_tokens: int | None = None
    ttft: float | None = None
    decode_tokens_per_second: float | None = None
    end_to_end: float | None = None
    mean_acceptance_length: float | None = None
    decode_rounds: int | None = None
    server_tokens_per_second: float | None = None
    echoed_tree_budget: int | None = None
    worker: str | None = None
    concurrent: bool = False
    acceptance_rate: float | None = None

    @classmethod
    def from_completion(
        cls,
        completion: Completion,
        violations: Sequence[Violation],
        *,
        round: int,
        worker: str | None = None,
        concurrent: bool = False,
        prompt_id: str | None = None,
    ) -> SweepSample:
        """Build a sample from a finished request and the violations it broke."""
        stats = completion.stats
        codes: list[str] = []
        for v in violations:
            if v.code not in codes:
                codes.append(v.code)
        pid = prompt_id or completion.request.prompt_id or "prompt"
        return cls(
            tree_budget=completion.request.tree_budget,
            prompt_id=pid,
            round=round,
            valid=not violations,
            codes=tuple(codes),
            messages=tuple(v.message for v in violations),
            completion_tokens=_int(completion.completion_tokens),
            ttft=_finite(completion.ttft),
            decode_tokens_per_second=_finite(completion.decode_tokens_per_second),
            end_to_end=_finite(completion.end_to_end),
            mean_acceptance_length=None if stats is None else _finite(stats.mean_acceptance_length),
            decode_rounds=None if stats is None else _int(stats.decode_rounds),
            server_tokens_per_second=(
                None if stats is None else _finite(stats.server_tokens_per_second)
            ),
            echoed_tree_budget=None if stats is None else _int(stats.tree_budget),
            worker=worker,
            concurrent=concurrent,
            acceptance_rate=None if stats is None else _finite(stats.acceptance_rate),
        )

    @property
    def server_client_ratio(self) -> float | None:
        """Server-reported decode rate over the client-measured one."""
        s, c = self.server_tokens_per_second, self.decode_tokens_per_second
        if s is None or c is None or c <= 0:
            return None
        return s / c

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form (for ``sweep.json`` and xdist transport)."""
        return {
            "tree_budget": self.tree_budget,
            "prompt_id": self.prompt_id,
            "round": self.round,
            "valid": self.valid,
            "codes": list(self.codes),
            "messages": list(self.messages),
            "completion_tokens": self.completion_tokens,
            "ttft": self.ttft,
            "decode_tokens_per_second": self.decode_tokens_per_second,
            "end_to_end": self.end_to_end,
            "mean_acceptance_length": self.mean_acceptance_length,
            "decode_rounds": self.decode_rounds,
            "server_tokens_per_second": self.server_tokens_per_second,
            "echoed_tree_budget": self.echoed_tree_budget,
            "worker": self.worker,
            "concurrent": self.concurrent,
            "acceptance_rate": self.acceptance_rate,
        }

    @classmethod
    def from_json(cls, data: Any, *, source: str = "sample") -> SweepSample:
        """Parse :meth:`to_json` output; a bad field raises one-line ``ValueError``."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{source}: expected an object, got {type(data).__name__}")
        return cls(
            tree_budget=_opt_int(data, "tree_budget", source),
            prompt_id=_req_str(data, "prompt_id", source),
            round=_req_int(data, "round", source),
            valid=_req_bool(data, "valid", source),
            codes=_str_tuple(data, "codes", source),
            messages=_str_tuple(data, "messages", source),
            completion_tokens=_opt_int(data, "completion_tokens", source),
            ttft=_opt_float(data, "ttft", source),
            decode_tokens_per_second=_opt_float(data, "decode_tokens_per_second", source),
            end_to_end=_opt_float(data, "end_to_end", source),
            mean_acceptance_length=_opt_float(data, "mean_acceptance_length", source),
            decode_rounds=_opt_int(data, "decode_rounds", source),
            server_tokens_per_second=_opt_float(data, "server_tokens_per_second", source),
            echoed_tree_budget=_opt_int(data, "echoed_tree_budget", source),
            worker=_opt_str(data, "worker", source),
            concurrent=bool(data.get("concurrent", False)),
            acceptance_rate=_opt_float(data, "acceptance_rate", source),
        )


def _finite(value: Any) -> float | None:
    # Servers report whatever they like; NaN or a string must not reach the
    # statistics or break the JSON report.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _bad(source: str, key: str, value: Any, want: str) -> ValueError:
    return ValueError(f"{source}: field {key!r} must be {want}, got {value!r}")


def _opt_int(data: Mapping[str, Any], key: str, source: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(source, key, value, "an integer or null")
    return value


def _req_int(data: Mapping[str, Any], key: str, source: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(source, key, value, "an integer")
    return value


def _opt_float(data: Mapping[str, Any], key: str, source: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad(source, key, value, "a finite number or null")
    return float(value)


def _opt_str(data: Mapping[str, Any], key: str, source: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _bad(source, key, value, "a string or null")
    return value


def _req_str(data: Mapping[str, Any], key: str, source: str) -> str:
    value = _opt_str(data, key, source)
    if value is None:
        raise _bad(source, key, None, "a string")
    return value


def _req_bool(data: Mapping[str, Any], key: str, source: str) -> bool:
    value = data.get(key)
    if not isinstance(value, bool):
        raise _bad(source, key, value, "true or false")
    return value


def _str_tuple(data: Mapping[str, Any], key: str, source: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad(source, key, value, "a list of strings")
    return tuple(value)


def merge_samples(*groups: Iterable[SweepSample]) -> list[SweepSample]:
    """Merge samples from several processes (e.g. pytest-xdist workers).

    The result is in a canonical order (round, budget, prompt, worker) so a
    merged report does not depend on which worker finished first; the sort is
    stable, so samples that tie keep their original relative order.
    """
    merged = [s for group in groups for s in group]
    merged.sort(
        key=lambda s: (
            s.round,
            -1 if s.tree_budget is None else s.tree_budget,
            s.prompt_id,
            s.worker or "",
        )
    )
    return merged


# --------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class PlannedRequest:
    """One request of a :class:`SweepPlan`; warm-up requests have ``warmup=True``.

    ``round`` counts measured rounds from 0; warm-up rounds count from
    ``-warmup_rounds`` up to -1 so every request has a distinct position.
    """

    round: int
    tree_budget: int
    prompt_id: str
    warmup: bool


@dataclass(frozen=True)
class SweepPlan:
    """Budgets x prompts x rounds, with warm-up rounds and an interleaved order.

    Each round visits every budget once (every prompt at that budget), in an
    order shuffled with ``seed`` and the round number, so slow drift of the
    server or the machine (heating, caches, background load) spreads over all
    budgets instead of favouring the ones measured first. ``order="fixed"``
    keeps the given budget order in every round (useful to reproduce a drift).
    Iteration is deterministic: the same plan always yields the same requests.
    """

    budgets: tuple[int, ...]
    prompts: tuple[str, ...]
    rounds: int = 3
    warmup_rounds: int = 1
    seed: int = 0
    order: SweepOrder = "shuffled"

    def __post_init__(self) -> None:
        if not self.budgets:
            raise ValueError("sweep plan: budgets must not be empty")
        if any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in self.budgets):
            raise ValueError(f"sweep plan: budgets must be positive integers, got {self.budgets!r}")
        if len(set(self.budgets)) != len(self.budgets):
            raise ValueError(f"sweep plan: duplicate budgets in {self.budgets!r}")
        if not self.prompts:
            raise ValueError("sweep plan: prompts must not be empty")
        if len(set(self.prompts)) != len(self.prompts):
            raise ValueError(f"sweep plan: duplicate prompt ids in {self.prompts!r}")
        if self.rounds < 1:
            raise ValueError(f"sweep plan: rounds must be >= 1, got {self.rounds!r}")
        if self.warmup_rounds < 0:
            raise ValueError(f"sweep plan: warmup_rounds must be >= 0, got {self.warmup_rounds!r}")
        if self.order not in ("shuffled", "fixed"):
            raise ValueError(f"sweep plan: order must be 'shuffled' or 'fixed', got {self.order!r}")

    def budget_order(self, round: int) -> tuple[int, ...]:
        """The budgets of one round (warm-up rounds are negative) in visiting order."""
        if self.order == "fixed":
            return self.budgets
        order = list(self.budgets)
        # A string seed is hashed with SHA-512 by `random`, so the order is the
        # same in every process regardless of PYTHONHASHSEED.
        random.Random(f"ddtree-sweep:{self.seed}:{round}").shuffle(order)
        return tuple(order)

    def __iter__(self) -> Iterator[PlannedRequest]:
        for r in range(-self.warmup_rounds, self.rounds):
            for budget in self.budget_order(r):
                for prompt in self.prompts:
                    yield PlannedRequest(
                        round=r, tree_budget=budget, prompt_id=prompt, warmup=r < 0
                    )

    def __len__(self) -> int:
        return (self.rounds + self.warmup_rounds) * len(self.budgets) * len(self.prompts)


def run_sweep(
    plan: SweepPlan,
    request: Callable[[int, str], Completion],
    validate: Callable[[Completion], Sequence[Violation]],
    *,
    worker: str | None = None,
    concurrent: bool = False,
    on_sample: Callable[[SweepSample], None] | None = None,
) -> list[SweepSample]:
    """Run ``plan`` with ``request(tree_budget, prompt_id)`` and validate each answer.

    Warm-up requests are validated too (an invalid warm-up is recorded as an
    invalid sample of round -1, -2, ..., so a broken server cannot hide in the
    warm-up) but valid warm-ups are not recorded.
    """
    samples: list[SweepSample] = []
    for planned in plan:
        completion = request(planned.tree_budget, planned.prompt_id)
        violations = list(validate(completion))
        if planned.warmup and not violations:
            continue
        sample = SweepSample.from_completion(
            completion,
            violations,
            round=planned.round,
            worker=worker,
            concurrent=concurrent,
            prompt_id=planned.prompt_id,
        )
        samples.append(sample)
        if on_sample is not None:
            on_sample(sample)
    return samples


# --------------------------------------------------------------------------- statistics


def quantile(data: Sequence[float], q: float) -> float:
    """Linearly interpolated quantile (the usual "type 7"); ``data`` non-empty."""
    if not data:
        raise ValueError("quantile of an empty sequence")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile: q must be within [0, 1], got {q!r}")
    xs = sorted(data)
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _rng(seed: int, *salt: object) -> random.Random:
    return random.Random(":".join(["ddtree-boot", str(seed), *map(str, salt)]))


def _resampler(
    data: Sequence[float], strata: Sequence[str] | None
) -> Callable[[random.Random], list[float]]:
    """One bootstrap resample of ``data``, within strata when that is sound.

    Every budget of a sweep is measured on the same prompts, and prompts
    differ in speed far more than rounds do; resampling within each prompt
    keeps the prompt mix fixed, so intervals reflect the round-to-round noise
    a repeated sweep would see. With fewer than two values in some stratum
    there is no within-prompt noise to resample, so the plain bootstrap is used.
    """
    xs = list(data)
    if strata is not None and len(strata) == len(xs):
        groups: dict[str, list[float]] = {}
        for x, key in zip(xs, strata, strict=True):
            groups.setdefault(key, []).append(x)
        if len(groups) > 1 and all(len(g) >= 2 for g in groups.values()):
            # Small strata make the bootstrap too confident (its variance is
            # (n-1)/n of the truth); spreading each stratum around its mean by
            # sqrt(n/(n-1)) undoes that, which matters with 2-3 rounds a prompt.
            parts = []
            for key in sorted(groups):
                g = groups[key]
                mean = statistics.fmean(g)
                scale = math.sqrt(len(g) / (len(g) - 1))
                parts.append([mean + (x - mean) * scale for x in g])
            return lambda rng: [x for g in parts for x in rng.choices(g, k=len(g))]
    n = len(xs)
    return lambda rng: rng.choices(xs, k=n)


def bootstrap_ci(
    data: Sequence[float],
    statistic: Callable[[Sequence[float]], float] = statistics.median,
    *,
    seed: int = 0,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = CONFIDENCE,
    salt: object = "",
    strata: Sequence[str] | None = None,
) -> tuple[float, float] | None:
    """Percentile-bootstrap confidence interval of ``statistic``; None below 2 values.

    ``strata`` (e.g. the prompt of each value) resamples within each stratum.
    """
    if len(data) < 2:
        return None
    rng = _rng(seed, "ci", salt)
    draw = _resampler(data, strata)
    values = sorted(statistic(draw(rng)) for _ in range(resamples))
    alpha = (1.0 - confidence) / 2.0
    return quantile(values, alpha), quantile(values, 1.0 - alpha)


def bootstrap_median_ci(
    data: Sequence[float],
    *,
    seed: int = 0,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = CONFIDENCE,
    salt: object = "",
    strata: Sequence[str] | None = None,
) -> tuple[float, float] | None:
    """Percentile-bootstrap confidence interval of the median; None below 2 values."""
    return bootstrap_ci(
        data,
        statistics.median,
        seed=seed,
        resamples=resamples,
        confidence=confidence,
        salt=salt,
        strata=strata,
    )


def bootstrap_median_difference(
    a: Sequence[float],
    b: Sequence[float],
    *,
    seed: int = 0,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = CONFIDENCE,
    relative: bool = False,
    salt: object = "",
    strata_a: Sequence[str] | None = None,
    strata_b: Sequence[str] | None = None,
) -> tuple[float, float, float] | None:
    """Bootstrap of ``median(b) - median(a)`` (or ``median(b)/median(a) - 1``).

    Returns ``(estimate, low, high)``; the difference is significant at the
    given confidence when the interval excludes zero. None when either side
    has fewer than two values (no honest interval exists then). ``strata_a``
    and ``strata_b`` (the prompt of each value) resample within prompts.
    """
    if len(a) < 2 or len(b) < 2:
        return None
    ma, mb = statistics.median(a), statistics.median(b)
    if relative and ma == 0:
        return None
    rng = _rng(seed, "diff", salt)
    draw_a, draw_b = _resampler(a, strata_a), _resampler(b, strata_b)
    diffs: list[float] = []
    for _ in range(resamples):
        ra = statistics.median(draw_a(rng))
        rb = statistics.median(draw_b(rng))
        if relative:
            if ra == 0:
                continue
            diffs.append(rb / ra - 1.0)
        else:
            diffs.append(rb - ra)
    if not diffs:
        return None
    diffs.sort()
    alpha = (1.0 - confidence) / 2.0
    estimate = (mb / ma - 1.0) if relative else (mb - ma)
    return estimate, quantile(diffs, alpha), quantile(diffs, 1.0 - alpha)


@dataclass(frozen=True)
class BudgetStats:
    """The statistics of one budget over every sample of a sweep.

    Timing and acceptance statistics use valid samples only: an invalid
    response measured nothing worth reporting. ``acceptance_ci`` is a
    bootstrap interval of the mean acceptance length. ``codes`` counts the
    violation codes of the invalid samples. ``verdict`` is filled by
    :func:`summarize` once every budget is known (``best``, ``tied``,
    ``slower``, ``invalid``, ``no timings``).
    """

    tree_budget: int | None
    total: int
    valid: int
    codes: Mapping[str, int]
    decode: tuple[float, ...]
    decode_prompts: tuple[str, ...]
    decode_median: float | None
    decode_q1: float | None
    decode_q3: float | None
    decode_ci: tuple[float, float] | None
    ttft_p50: float | None
    ttft_p90: float | None
    ttft_ci: tuple[float, float] | None
    mean_acceptance_length: float | None
    acceptance_ci: tuple[float, float] | None
    mean_decode_rounds: float | None
    server_client_ratio: float | None
    echoed_mismatch: int
    concurrent: bool
    verdict: str = ""
    # accepted / drafted tokens: shown only where the length is unknown (llama.cpp)
    mean_acceptance_rate: float | None = None

    @property
    def all_valid(self) -> bool:
        """True when every request at this budget passed the invariants."""
        return self.total > 0 and self.valid == self.total

    @property
    def decode_iqr(self) -> float | None:
        """Interquartile range of decode tokens/s."""
        if self.decode_q1 is None or self.decode_q3 is None:
            return None
        return self.decode_q3 - self.decode_q1

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form for ``sweep.json``."""
        return {
            "tree_budget": self.tree_budget,
            "total": self.total,
            "valid": self.valid,
            "codes": dict(self.codes),
            "decode_tokens_per_second": {
                "median": self.decode_median,
                "q1": self.decode_q1,
                "q3": self.decode_q3,
                "ci95": None if self.decode_ci is None else list(self.decode_ci),
                "n": len(self.decode),
            },
            "ttft": {
                "p50": self.ttft_p50,
                "p90": self.ttft_p90,
                "ci95": None if self.ttft_ci is None else list(self.ttft_ci),
            },
            "mean_acceptance_length": self.mean_acceptance_length,
            "acceptance_ci95": None if self.acceptance_ci is None else list(self.acceptance_ci),
            "mean_decode_rounds": self.mean_decode_rounds,
            "server_client_ratio": self.server_client_ratio,
            "echoed_mismatch": self.echoed_mismatch,
            "concurrent": self.concurrent,
            "verdict": self.verdict,
            "mean_acceptance_rate": self.mean_acceptance_rate,
        }


def _mean(values: Iterable[float | int | None]) -> float | None:
    xs = [float(v) for v in values if v is not None]
    return statistics.fmean(xs) if xs else None


def budget_stats(
    tree_budget: int | None, samples: Sequence[SweepSample], *, seed: int = 0
) -> BudgetStats:
    """Statistics of the samples of one budget (callers group by budget)."""
    valid = [s for s in samples if s.valid]
    timed = [s for s in valid if s.decode_tokens_per_second is not None]
    decode = tuple(
        s.decode_tokens_per_second for s in timed if s.decode_tokens_per_second is not None
    )
    decode_prompts = tuple(s.prompt_id for s in timed)
    ttft_samples = [s for s in valid if s.ttft is not None]
    ttfts = [s.ttft for s in ttft_samples if s.ttft is not None]
    ratios = [r for r in (s.server_client_ratio for s in valid) if r is not None]
    accept = [s.mean_acceptance_length for s in valid if s.mean_acceptance_length is not None]
    codes: Counter[str] = Counter()
    for s in samples:
        codes.update(s.codes)
    return BudgetStats(
        tree_budget=tree_budget,
        total=len(samples),
        valid=len(valid),
        codes=dict(codes),
        decode=decode,
        decode_prompts=decode_prompts,
        decode_median=statistics.median(decode) if decode else None,
        decode_q1=quantile(decode, 0.25) if decode else None,
        decode_q3=quantile(decode, 0.75) if decode else None,
        decode_ci=bootstrap_median_ci(decode, seed=seed, salt=tree_budget, strata=decode_prompts),
        ttft_p50=quantile(ttfts, 0.5) if ttfts else None,
        ttft_p90=quantile(ttfts, 0.9) if ttfts else None,
        ttft_ci=bootstrap_median_ci(
            ttfts,
            seed=seed,
            salt=f"ttft{tree_budget}",
            strata=[s.prompt_id for s in ttft_samples],
        ),
        mean_acceptance_length=_mean(accept),
        acceptance_ci=bootstrap_ci(accept, statistics.fmean, seed=seed, salt=f"acc{tree_budget}"),
        mean_decode_rounds=_mean(s.decode_rounds for s in valid),
        server_client_ratio=statistics.median(ratios) if ratios else None,
        echoed_mismatch=sum(
            1
            for s in samples
            if s.echoed_tree_budget is not None
            and s.tree_budget is not None
            and s.echoed_tree_budget != s.tree_budget
        ),
        concurrent=any(s.concurrent for s in samples),
        mean_acceptance_rate=_mean(s.acceptance_rate for s in valid),
    )


@dataclass(frozen=True)
class Recommendation:
    """Which budget to deploy, and how sure the sweep is about it.

    ``tree_budget`` is the budget with the best median decode throughput among
    budgets whose every request was valid (None when there is none).
    ``tied`` lists the other budgets the sweep cannot tell apart from it (a
    bootstrap test of the median difference at 95%); ``excluded`` the budgets
    left out because some request was invalid.
    """

    tree_budget: int | None
    decode_median: float | None
    decode_ci: tuple[float, float] | None
    tied: tuple[int | None, ...]
    excluded: tuple[int | None, ...]
    message: str
    partial: bool = False

    @property
    def decisive(self) -> bool:
        """True when a budget was recommended, no other ties with it, and the run is complete."""
        return self.tree_budget is not None and not self.tied and not self.partial

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form for ``sweep.json``."""
        return {
            "tree_budget": self.tree_budget,
            "decode_median": self.decode_median,
            "decode_ci95": None if self.decode_ci is None else list(self.decode_ci),
            "tied": list(self.tied),
            "excluded": list(self.excluded),
            "decisive": self.decisive,
            "partial": self.partial,
            "message": self.message,
        }


def budget_label(tree_budget: int | None) -> str:
    """How a budget is named in tables and messages."""
    return "server default" if tree_budget is None else str(tree_budget)


def _budget_key(b: int | None) -> int:
    return -1 if b is None else b


def rank(stats: Sequence[BudgetStats]) -> list[BudgetStats]:
    """Eligible budgets (all requests valid, with timings), fastest first.

    Ordered by median decode tokens/s, then by mean acceptance length (more
    tokens per verify pass is the better tie-break on equal throughput), then
    by the smaller budget (less verify compute).
    """
    eligible = [s for s in stats if s.all_valid and s.decode_median is not None]
    return sorted(
        eligible,
        key=lambda s: (
            -(s.decode_median or 0.0),
            -(s.mean_acceptance_length or 0.0),
            _budget_key(s.tree_budget),
        ),
    )


def _fmt_rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def recommend(stats: Sequence[BudgetStats], *, seed: int = 0) -> Recommendation:
    """Pick the budget with the best median decode throughput, honestly.

    A budget with any invalid request is never recommended. When another
    budget's median cannot be told apart from the best one (the 95% bootstrap
    interval of the difference contains zero, or either side has too few
    samples for an interval), the message says so plainly.
    """
    excluded = tuple(s.tree_budget for s in stats if s.total > 0 and not s.all_valid)
    ranked = rank(stats)
    if not ranked:
        why = "no budget produced valid timed requests"
        if excluded:
            why += f" (invalid requests at {', '.join(budget_label(b) for b in excluded)})"
        return Recommendation(None, None, None, (), excluded, f"No recommendation: {why}.")
    best = ranked[0]
    tied: list[int | None] = []
    for other in ranked[1:]:
        diff = bootstrap_median_difference(
            other.decode,
            best.decode,
            seed=seed,
            salt=f"{best.tree_budget}-{other.tree_budget}",
            strata_a=other.decode_prompts,
            strata_b=best.decode_prompts,
        )
        if diff is None or diff[1] <= 0.0:
            tied.append(other.tree_budget)
    ci = best.decode_ci
    ci_text = "" if ci is None else f" [95% CI {_fmt_rate(ci[0])}-{_fmt_rate(ci[1])}]"
    message = (
        f"Recommended tree_budget={budget_label(best.tree_budget)}: median decode "
        f"{_fmt_rate(best.decode_median)} tok/s{ci_text}"
    )
    if best.mean_acceptance_length is not None:
        message += f", mean acceptance length {best.mean_acceptance_length:.2f}"
    message += "."
    if tied:
        names = ", ".join(budget_label(b) for b in sorted(tied, key=_budget_key))
        message += (
            f" Cannot be told apart from tree_budget={names} (95% bootstrap test of the median"
            " difference): on this evidence they are as fast; more rounds would separate them."
        )
    elif len(ranked) == 1:
        message += " It is the only budget with valid timings."
    else:
        message += " It is significantly faster than every other valid budget (95% bootstrap)."
    if excluded:
        message += (
            f" Excluded for invalid responses: {', '.join(budget_label(b) for b in excluded)}."
        )
    return Recommendation(
        best.tree_budget, best.decode_median, best.decode_ci, tuple(tied), excluded, message
    )


@dataclass(frozen=True)
class SweepSummary:
    """Per-budget statistics (budget order ascending) and the recommendation."""

    budgets: tuple[BudgetStats, ...]
    recommendation: Recommendation

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form for ``sweep.json``."""
        return {
            "budgets": [b.to_json() for b in self.budgets],
            "recommendation": self.recommendation.to_json(),
        }


def summarize(samples: Sequence[SweepSample], *, seed: int = 0) -> SweepSummary:
    """Group ``samples`` by requested budget, compute statistics and verdicts."""
    groups: dict[int | None, list[SweepSample]] = {}
    for s in samples:
        groups.setdefault(s.tree_budget, []).append(s)
    raw = [budget_stats(b, groups[b], seed=seed) for b in sorted(groups, key=_budget_key)]
    rec = recommend(raw, seed=seed)
    tied = set(rec.tied)
    with_verdicts: list[BudgetStats] = []
    for st in raw:
        if not st.all_valid:
            codes = ", ".join(sorted(st.codes)) or "invalid"
            verdict = f"INVALID ({codes})"
        elif st.decode_median is None:
            verdict = "no timings"
        elif st.tree_budget == rec.tree_budget:
            verdict = "best"
        elif st.tree_budget in tied:
            verdict = "tied with best"
        else:
            verdict = "slower"
        if st.echoed_mismatch and st.all_valid:
            verdict += " (echoed budget differs)"
        with_verdicts.append(replace(st, verdict=verdict))
    return SweepSummary(tuple(with_verdicts), rec)


# --------------------------------------------------------------------------- run metadata


def redact_endpoint(url: str) -> str:
    """The endpoint URL without credentials (user info, key-like query values)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable endpoint>"
    netloc = parts.hostname or ""
    if parts.port is not None:
        netloc = f"{netloc}:{parts.port}"
    if parts.username or parts.password:
        netloc = f"***@{netloc}"
    query = parts.query
    if query:
        pairs = [
            (k, "***" if k.lower() in _SECRET_QUERY_KEYS else v)
            for k, v in parse_qsl(query, keep_blank_values=True)
        ]
        query = urlencode(pairs, safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


@dataclass
class SweepRun:
    """A whole sweep: the samples plus what describes the run.

    ``metadata`` holds plain JSON values: ``endpoint`` (already redacted),
    ``model``, ``dialect``, ``budgets``, ``seed``, ``order``, ``rounds``,
    ``warmup_rounds``, ``concurrent``, ``server`` (what the server says about
    itself), ``notes`` (lines worth showing, e.g. a weakened run).
    ``diagnoses`` holds, per failing test, which layer was found at fault
    (plain JSON objects: ``nodeid``, ``tree_budget``, ``prompt_id``,
    ``codes``, ``verdict``, ``title``, ``reason``, ``advice``).
    """

    samples: list[SweepSample] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    diagnoses: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> SweepSummary:
        """Statistics and recommendation (deterministic for a given seed)."""
        return summarize(self.samples, seed=self.seed)
