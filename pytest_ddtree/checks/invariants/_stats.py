"""Checks on the speculation statistics the server reports (SpecStats)."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise

from pytest_ddtree.checks.invariants._context import Context, as_float, as_int
from pytest_ddtree.core.dialects import Dialect, SpecStats, lookup
from pytest_ddtree.core.violation import Violation
from pytest_ddtree.wire.completion import decode_rate

#: what each engine's statistics cannot promise, so is not checked there (said once a run);
#: each dialect declares its own (``Dialect.unstated``)
#: the promises of statistics read in no registered dialect: the base class's (all hold)
_PLAIN = Dialect()


def unstated(dialect: str | None) -> str | None:
    """The statistics invariants ``dialect``'s engine does not promise (None: all hold)."""
    found = lookup(dialect)
    return found.unstated if found is not None else None


def _dialect(stats: SpecStats) -> Dialect:
    """The plug-in that read ``stats``: what its engine promises."""
    return lookup(stats.dialect) or _PLAIN


def check_stats(ctx: Context) -> Iterator[Violation]:
    """budget-mismatch, stats-inconsistent and stats-inflated."""
    stats = ctx.completion.stats
    if stats is None:
        return
    dialect = _dialect(stats)
    for name, value in dialect.malformed(stats.raw):
        yield ctx.violation(
            "stats-inconsistent",
            f"{name} is not a number >= 0: {value!r}",
            field=name,
            value=repr(value)[:80],
        )
    e = ctx.expect
    expected = e.expected_tree_budget
    if expected is None:
        expected = as_int(getattr(ctx.completion.request, "tree_budget", None))
    echoed = as_int(stats.tree_budget)
    if expected is not None and echoed is not None and echoed != expected:
        yield ctx.violation(
            "budget-mismatch",
            f"server used tree_budget={echoed}, the request asked for {expected}",
            requested=expected,
            echoed=echoed,
            dialect=stats.dialect,
        )

    tau = as_float(stats.mean_acceptance_length)
    rounds = as_int(stats.decode_rounds)
    block = e.block_size if e.block_size is not None else as_int(stats.block_size)
    raw_tau = stats.mean_acceptance_length
    if raw_tau is not None and tau is None:
        yield ctx.violation(
            "stats-inconsistent", f"mean acceptance length is not a finite number: {raw_tau!r}"
        )
    # 0/0 rounds make the mean undefined; servers then report 0
    if tau is not None and tau < 1.0 - 1e-9 and rounds != 0:
        yield ctx.violation(
            "stats-inconsistent",
            f"mean acceptance length {tau:g} < 1 (every round commits at least the bonus token)",
            mean_acceptance_length=tau,
        )
    if tau is not None and block is not None and tau > block + 1 + 1e-9:
        yield ctx.violation(
            "stats-inconsistent",
            f"mean acceptance length {tau:g} > block_size + 1 = {block + 1}",
            mean_acceptance_length=tau,
            block_size=block,
        )
    if rounds is not None and rounds < 0:
        yield ctx.violation("stats-inconsistent", f"decode_rounds is negative ({rounds})")
    n, _slack = ctx.tokens_for_limits()
    if dialect.rounds_are_speculative_steps:
        yield from _check_speculative_steps(ctx, dialect.where)
    elif n is not None and rounds is not None:
        if rounds == 0 and n >= 2:
            yield ctx.violation(
                "stats-inconsistent",
                f"0 decode rounds reported for {n} completion tokens",
                completion_tokens=n,
            )
        elif rounds > 0 and tau is not None and tau >= 1.0:
            committed = tau * rounds
            # rounding of a reported mean (2 decimals) scales with the rounds
            allowed = e.stats_tolerance_abs + e.stats_tolerance * n + 0.005 * rounds
            evidence = {
                "mean_acceptance_length": tau,
                "decode_rounds": rounds,
                "acceptance_x_rounds": round(committed, 1),
                "completion_tokens": n,
                "observed_acceptance": round(n / rounds, 3),
            }
            if committed > n + allowed:
                yield ctx.violation(
                    "stats-inflated",
                    f"acceptance {tau:g} x {rounds} rounds claims {committed:.0f} tokens, "
                    f"{n} came back ({n / rounds:.2f} per round)",
                    **evidence,
                )
            elif committed < n - allowed:
                yield ctx.violation(
                    "stats-inconsistent",
                    f"acceptance {tau:g} x {rounds} rounds = {committed:.0f} tokens, "
                    f"but {n} came back",
                    **evidence,
                )
    accepted = as_int(stats.num_accepted_draft_tokens)
    drafted = as_int(stats.num_draft_tokens)
    if accepted is not None and drafted is not None and accepted > drafted:
        yield ctx.violation(
            "stats-inconsistent",
            f"{accepted} accepted draft tokens > {drafted} drafted",
            num_accepted_draft_tokens=accepted,
            num_draft_tokens=drafted,
        )
    yield from check_depth(ctx)
    yield from _check_rate(ctx)


def _last_step_cut(ctx: Context) -> tuple[int | None, str]:
    """The most tokens vLLM may have counted in the last speculative step and then dropped
    after a stop (its accepted drafts: the step keeps at least one token), and from where."""
    stats = ctx.completion.stats
    assert stats is not None
    steps = stats.raw.get("per_step_accepted")
    if isinstance(steps, list) and steps and as_int(steps[-1]) is not None:
        return as_int(steps[-1]), "per_step_accepted[-1]"
    k = as_int(stats.num_spec_tokens)
    return (k, "num_spec_tokens") if k is not None and k >= 0 else (None, "")


def _check_speculative_steps(ctx: Context, where: str) -> Iterator[Violation]:
    """Statistics whose rounds are speculative steps only (vLLM's per-request
    statistics, at ``where``), by what vLLM promises.

    ``num_spec_steps`` counts the steps that verified drafts only: the first token
    comes from the prefill and a step whose drafter proposed nothing is a plain decode
    step, so the speculative steps commit at most the answer's tokens but one. The
    counts are taken before the stop is applied: the last step's tokens after a stop
    (token, string or length) are counted in it and dropped from the answer.
    ``mean_acceptance_length`` is ``1 + accepted / steps`` (1.0 with no step) and
    ``draft_acceptance_rate`` is ``accepted / drafted`` (0.0 with no draft).
    """
    stats = ctx.completion.stats
    assert stats is not None
    raw = stats.raw
    hist = stats.acceptance_histogram
    steps = as_int(stats.decode_rounds)
    accepted = as_int(stats.num_accepted_draft_tokens)
    if hist is not None:  # a histogram disagreeing with the totals is check_depth's finding
        steps = sum(hist) if steps is None else steps
        accepted = sum(j * n for j, n in enumerate(hist)) if accepted is None else accepted
    drafted = as_int(stats.num_draft_tokens)
    tau = as_float(stats.mean_acceptance_length)
    if steps is None or accepted is None or steps < 0 or accepted < 0:
        return
    if "mean_acceptance_length" in raw and tau is not None:
        want = 1.0 + accepted / steps if steps else 1.0
        if abs(tau - want) > 0.005:
            yield ctx.violation(
                "stats-inconsistent",
                f"{where}.mean_acceptance_length is {tau:g}, but 1 + {accepted} accepted "
                f"drafts / {steps} steps = {want:g}",
                mean_acceptance_length=tau,
                num_spec_steps=steps,
                num_accepted_draft_tokens=accepted,
            )
    rate = as_float(raw.get("draft_acceptance_rate"))
    if rate is not None and drafted is not None and accepted <= drafted:
        want = accepted / drafted if drafted else 0.0
        if abs(rate - want) > 0.005:
            yield ctx.violation(
                "stats-inconsistent",
                f"{where}.draft_acceptance_rate is {rate:g}, but {accepted} accepted / "
                f"{drafted} drafted = {want:g}",
                draft_acceptance_rate=rate,
                num_draft_tokens=drafted,
                num_accepted_draft_tokens=accepted,
            )
    yield from _per_step(ctx, where, steps, drafted)
    n, slack = ctx.tokens_for_limits()
    if n is None or steps == 0:
        return
    cut, cut_from = _last_step_cut(ctx)
    if cut is None:
        return
    committed = steps + accepted
    room = n - 1 + cut + slack
    if committed > room:
        yield ctx.violation(
            "stats-inflated",
            f"{where} claims {committed} tokens from {steps} speculative steps ({steps} + "
            f"{accepted} accepted drafts), more than {n} completion tokens allow: {n - 1} "
            f"after the prefill's first token, plus at most {cut} cut after a stop in the "
            f"last step ({cut_from})",
            num_spec_steps=steps,
            num_accepted_draft_tokens=accepted,
            spec_step_tokens=committed,
            completion_tokens=n,
            last_step_cut=cut,
        )


def _per_step(ctx: Context, where: str, steps: int, drafted: int | None) -> Iterator[Violation]:
    """vLLM's ``detailed`` arrays: one entry per speculative step, summing to the totals
    and counting the same steps as ``acceptance_histogram``."""
    stats = ctx.completion.stats
    assert stats is not None
    per_acc = stats.raw.get("per_step_accepted")
    per_draft = stats.raw.get("per_step_drafted")
    if not isinstance(per_acc, list) or not all(as_int(a) is not None for a in per_acc):
        return
    if len(per_acc) != steps:
        yield ctx.violation(
            "stats-inconsistent",
            f"{where}.per_step_accepted has {len(per_acc)} steps, num_spec_steps is {steps}",
            field=f"{where}.per_step_accepted",
            per_step_entries=len(per_acc),
            num_spec_steps=steps,
        )
    hist = stats.raw.get("acceptance_histogram")
    if isinstance(hist, list) and stats.depth_source == f"{where}.acceptance_histogram":
        counts = [0] * len(hist)
        for a in per_acc:
            if 0 <= a < len(counts):
                counts[a] += 1
        if counts != hist:
            yield ctx.violation(
                "stats-inconsistent",
                f"{where}.per_step_accepted makes the histogram {counts[:16]}, "
                f"acceptance_histogram says {hist[:16]}",
                field=f"{where}.per_step_accepted",
            )
    if (
        drafted is not None
        and isinstance(per_draft, list)
        and all(as_int(d) is not None for d in per_draft)
        and sum(per_draft) != drafted
    ):
        yield ctx.violation(
            "stats-inconsistent",
            f"{where}.per_step_drafted sums to {sum(per_draft)}, num_draft_tokens is {drafted}",
            field=f"{where}.per_step_drafted",
            per_step_drafted_sum=sum(per_draft),
            num_draft_tokens=drafted,
        )


def _check_rate(ctx: Context) -> Iterator[Violation]:
    stats = ctx.completion.stats
    if stats is None:
        return
    raw_tps = stats.server_tokens_per_second
    server_tps = as_float(raw_tps)
    if raw_tps is not None and (server_tps is None or server_tps < 0):
        yield ctx.violation(
            "stats-inconsistent", f"server tokens/s is not a number >= 0: {raw_tps!r}"
        )
        return
    if server_tps is None or server_tps == 0:
        return
    e = ctx.expect
    timings = ctx.completion.timings
    times = timings.chunk_times
    if len(times) < max(2, e.tps_min_chunks):
        return
    span = times[-1] - times[0]
    if span < e.tps_min_seconds:
        return
    gaps = sorted(b - a for a, b in pairwise(times))
    if gaps[len(gaps) // 2] < e.tps_min_gap:
        return
    # the client's rate over the window the server's figure and the stall watch cover: first
    # to last content event. To the last byte (the benchmark's decode rate) it would also time
    # the finish, usage and [DONE] events, which a pause on either side (a collection, a
    # descheduled process) can delay after the server stopped its own clock
    client_tps = decode_rate(ctx.completion.completion_tokens, timings.first_event_tokens, span)
    if client_tps is None:
        return
    ratio = server_tps / client_tps
    if ratio <= e.tps_tolerance:
        return
    stall = getattr(ctx.completion, "client_stall", None)
    if stall is not None and not stall.clean:
        # the client's own decode time is late by its stall: not evidence about the server
        ctx.withhold(
            "stats-inflated",
            f"{stall.describe()} (the server reports {server_tps:.1f} tokens/s, the stalled "
            f"client measured {client_tps:.1f}, {ratio:.2f}x)",
            client_stalled=True,
        )
        return
    yield ctx.violation(
        "stats-inflated",
        f"server reports {server_tps:.1f} tokens/s, the client measured {client_tps:.1f} "
        f"({ratio:.2f}x, tolerance {e.tps_tolerance:g}x)",
        server_tokens_per_second=round(server_tps, 2),
        client_decode_tokens_per_second=round(client_tps, 2),
        ratio=round(ratio, 3),
        chunks=len(times),
        content_seconds=round(span, 4),
        client_stalled_seconds=round(stall.stalled, 4) if stall is not None else None,
    )


def check_depth(ctx: Context) -> Iterator[Violation]:
    """stats-inconsistent: an acceptance histogram that is malformed, or whose
    totals disagree with the step count, the accepted drafts or ``completion_tokens``."""
    stats = ctx.completion.stats
    if stats is None or stats.depth_source is None:
        return
    where = stats.depth_source
    value = stats.raw.get(where.rpartition(".")[2])
    hist = stats.acceptance_histogram
    if hist is None:
        yield ctx.violation(
            "stats-inconsistent",
            f"{where} is not a non-empty list of integers >= 0: {repr(value)[:80]}",
            field=where,
            value=repr(value)[:80],
        )
        return
    yield from _depth_shape(ctx, where, hist)
    yield from _depth_totals(ctx, where, hist)


def _depth_shape(ctx: Context, where: str, hist: tuple[int, ...]) -> Iterator[Violation]:
    stats = ctx.completion.stats
    assert stats is not None
    k = as_int(stats.num_spec_tokens)
    if k is not None and k >= 0:
        if where.endswith("acceptance_histogram") and len(hist) != k + 1:
            yield ctx.violation(
                "stats-inconsistent",
                f"{where} has {len(hist)} entries, num_spec_tokens={k} makes {k + 1}",
                field=where,
                entries=len(hist),
                num_spec_tokens=k,
            )
        elif len(hist) > k + 1:
            yield ctx.violation(
                "stats-inconsistent",
                f"{where}: a step accepted {len(hist) - 1} drafts, more than num_spec_tokens={k}",
                field=where,
                num_spec_tokens=k,
            )
    drafted = stats.raw.get("per_step_drafted")
    accepted = stats.raw.get("per_step_accepted")
    if drafted is None or not isinstance(accepted, list):
        return
    name = where.rpartition(".")[0] + ".per_step_drafted"
    ok = isinstance(drafted, list) and all(as_int(d) is not None for d in drafted)
    if not ok or len(drafted) != len(accepted):
        yield ctx.violation(
            "stats-inconsistent",
            f"{name} is not a list of integers as long as per_step_accepted "
            f"({len(accepted)}): {repr(drafted)[:80]}",
            field=name,
        )
        return
    over = [i for i, (a, d) in enumerate(zip(accepted, drafted, strict=True)) if a > d]
    if over:
        i = over[0]
        yield ctx.violation(
            "stats-inconsistent",
            f"step {i} accepted {accepted[i]} drafts of {drafted[i]} drafted ({name})",
            field=name,
            steps=len(over),
        )


def _depth_totals(ctx: Context, where: str, hist: tuple[int, ...]) -> Iterator[Violation]:
    stats = ctx.completion.stats
    assert stats is not None
    rounds = as_int(stats.decode_rounds)
    steps = sum(hist)
    if rounds is not None and steps != rounds:
        yield ctx.violation(
            "stats-inconsistent",
            f"{where} counts {steps} steps, the server reports {rounds} decode rounds",
            field=where,
            histogram_steps=steps,
            decode_rounds=rounds,
        )
    accepted = as_int(stats.num_accepted_draft_tokens)
    by_hist = sum(k * n for k, n in enumerate(hist))
    if accepted is not None and by_hist != accepted:
        yield ctx.violation(
            "stats-inconsistent",
            f"{where} accounts for {by_hist} accepted drafts, the server reports {accepted}",
            field=where,
            histogram_accepted=by_hist,
            num_accepted_draft_tokens=accepted,
        )
    dialect = _dialect(stats)
    if dialect.steps_counted_whole:
        yield from _whole_step_commits(ctx, where, hist)
        return
    n, _slack = ctx.tokens_for_limits()
    # speculative steps are not all the answer's tokens (vLLM): their bound is checked in
    # _check_speculative_steps
    if n is None or not steps or dialect.rounds_are_speculative_steps:
        return
    committed = by_hist + steps
    e = ctx.expect
    allowed = e.stats_tolerance_abs + e.stats_tolerance * n
    if abs(committed - n) > allowed:
        yield ctx.violation(
            "stats-inconsistent",
            f"{where} commits {committed} tokens ({steps} steps + {by_hist} accepted drafts), "
            f"{n} came back",
            field=where,
            histogram_tokens=committed,
            completion_tokens=n,
        )


def _whole_step_commits(ctx: Context, where: str, hist: tuple[int, ...]) -> Iterator[Violation]:
    """A histogram of whole steps against ``completion_tokens``, as SGLang's scheduler
    counts.

    The prefill makes the first token; each verify step then commits its accepted
    drafts plus one bonus token, and SGLang counts a whole step even where a stop or
    the length limit cuts it. So the answer has at most ``1 + steps + accepted``
    tokens, and at least that less the deepest step's drafts (only the last step can
    run past the end). An exact equality cannot be stated for SGLang: these bounds
    are what is checked.
    """
    n, slack = ctx.tokens_for_limits()
    steps = sum(hist)
    if n is None or not steps:
        return
    accepted = sum(k * c for k, c in enumerate(hist))
    most = 1 + steps + accepted
    deepest = max(k for k, c in enumerate(hist) if c)
    least = most - deepest
    evidence = {
        "field": where,
        "verify_steps": steps,
        "histogram_accepted": accepted,
        "completion_tokens": n,
        "most_tokens": most,
        "least_tokens": least,
    }
    if n > most + slack:
        yield ctx.violation(
            "stats-inconsistent",
            f"{where}: {steps} verify steps commit at most {most} tokens (the prefill's, "
            f"{steps} bonus tokens and {accepted} accepted drafts), {n} came back",
            **evidence,
        )
    elif n < least - slack:
        yield ctx.violation(
            "stats-inconsistent",
            f"{where}: {steps} verify steps commit at least {least} tokens (only the last "
            f"step can run past the end, by at most {deepest} drafts), {n} came back",
            **evidence,
        )
