"""Losslessness: does speculation change the temperature-0 output?

``run_lossless`` compares the output at every budget with a target-only
baseline's (token-exact when a tokenizer is available) and reports the first
divergence, with the target's margin there (a numerical near-tie or a
confident token). Only answers that arrived whole and saw the same prompt are
compared (``comparability``); any other pair is ``not-comparable``.

No pytest here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pytest_ddtree.checks.blame import (
    NOT_COMPARABLE_TITLE,
    NOT_WHOLE_ADVICE,
    PROMPT_MISMATCH_ADVICE,
    Diagnosis,
    lossless_advice,
)
from pytest_ddtree.checks.comparable import (
    NOT_COMPARABLE,
    not_whole_advice,
    prompt_tokens,
    why_not_whole,
)
from pytest_ddtree.checks.invariants._logprobs import count_fault
from pytest_ddtree.checks.margin import Margin, classify, probe_fields
from pytest_ddtree.core.settings import Lossless, nats, nats_text
from pytest_ddtree.core.violation import Violation
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.completion import Completion, summarize_text
from pytest_ddtree.wire.tokens import TokenCounter


@dataclass(frozen=True)
class Divergence:
    """Where two temperature-0 outputs first differ.

    ``token_note`` says why the token position is unknown when a tokenizer was
    asked for it and failed (the divergence is then located by characters).
    """

    token_index: int | None
    char_offset: int
    reference_excerpt: str
    actual_excerpt: str
    token_note: str | None = None
    #: the target's margin there (``margin.classify``), once asked for
    margin: Margin | None = None

    def where(self) -> str:
        """``token 10 (character 46)``, or the character offset alone (and why)."""
        if self.token_index is not None:
            return f"token {self.token_index} (character {self.char_offset})"
        note = f" ({self.token_note})" if self.token_note else ""
        return f"character {self.char_offset}{note}"


def _token_ids(
    counter: TokenCounter | None, reference: str, actual: str
) -> tuple[tuple[list[int], list[int]] | None, str | None]:
    """Both texts' token ids (None without an exact counter), and why they are missing."""
    if counter is None or not counter.exact:
        return None, None
    try:
        ref_ids, act_ids = counter.encode(reference), counter.encode(actual)
    except Exception as exc:  # a failing /tokenize is the counter's trouble, not a verdict
        why = f"{type(exc).__name__}: {summarize_text(str(exc), 120)}"
        return None, f"token position unknown: the token counter failed ({why})"
    if ref_ids is None or act_ids is None:
        return None, None
    return (ref_ids, act_ids), None


def first_divergence(
    reference: str, actual: str, counter: TokenCounter | None = None
) -> Divergence | None:
    """The first point where ``actual`` departs from ``reference`` (None if equal).

    With an exact tokenizer the comparison is token by token (``token_index``
    is the first differing token); otherwise, or when the tokenizer fails,
    characters are compared and ``token_index`` is None.
    """
    token_index: int | None = None
    ids, note = _token_ids(counter, reference, actual)
    if ids is not None:
        ref_ids, act_ids = ids
        if ref_ids == act_ids:
            return None
        token_index = next(
            (i for i, (a, b) in enumerate(zip(ref_ids, act_ids, strict=False)) if a != b),
            min(len(ref_ids), len(act_ids)),
        )
    if token_index is None and reference == actual:
        return None
    offset = next(
        (i for i, (a, b) in enumerate(zip(reference, actual, strict=False)) if a != b),
        min(len(reference), len(actual)),
    )
    start = max(0, offset - 30)

    def excerpt(text: str) -> str:
        before = text[start:offset]
        after = text[offset : offset + 50]
        return summarize_text(f"{'…' if start else ''}{before}»{after}«", 120)

    return Divergence(token_index, offset, excerpt(reference), excerpt(actual), note)


@dataclass(frozen=True)
class Unjudged:
    """Why one answer was not compared with its reference, and what to do about it."""

    reason: str
    advice: str
    #: the reason names the reference itself (a message need not name it again)
    names_reference: bool = False


def comparability(
    reference: Completion, answer: Completion, reference_label: str
) -> Unjudged | None:
    """Why ``answer`` cannot be compared with ``reference`` (None when it can).

    Both must have arrived whole, and both servers must have seen the same prompt
    (equal ``usage.prompt_tokens`` where both report it).
    """
    why = why_not_whole(reference)
    if why is not None:
        reason = f"the answer of the {reference_label} did not arrive whole ({why})"
        who = reference_label if reference_label == "target-only baseline" else "server"
        advice = not_whole_advice(reference, default=NOT_WHOLE_ADVICE, who=who)
        return Unjudged(reason, advice, names_reference=True)
    why = why_not_whole(answer)
    if why is not None:
        advice = not_whole_advice(answer, default=NOT_WHOLE_ADVICE)
        return Unjudged(f"its answer did not arrive whole ({why})", advice)
    theirs, ours = prompt_tokens(reference), prompt_tokens(answer)
    if theirs is not None and ours is not None and theirs != ours:
        return Unjudged(
            f"the {reference_label} sees {theirs} prompt tokens, the server {ours} "
            "(usage.prompt_tokens): a different chat template or tokenizer",
            PROMPT_MISMATCH_ADVICE,
            names_reference=True,
        )
    return None


#: How far (nats) the speculative side's log-probability of a token may lie from the
#: target-only side's, where both chose it. Measured at temperature 0 over the bundled
#: suite's first six prompts, streamed and not, 96 tokens each (benchmarks/bench_logprobs.py):
#: llama.cpp n-gram against its target-only twin and vLLM n-gram (bf16, eager, CPU) against
#: target-only vLLM both give exactly the target's values (max |delta| 0 over 1,007 and
#: 1,044 positions). Verification in other batches on a GPU moves them by numerical noise;
#: the near-tie margin (``Lossless.near_tie``'s default) is the plugin's bound on that noise,
#: and a placeholder or the drafter's distribution lies nats away.
LOGPROB_TOLERANCE = 0.5


@dataclass(frozen=True)
class LogprobAgreement:
    """How far the speculative side's log-probabilities lie from the target-only side's,
    over the positions where both chose the same token (up to the first that differs).

    ``delta`` is the largest absolute difference (nats), at token ``position`` (``token``
    there); ``positions`` how many positions were compared.
    """

    positions: int
    delta: float
    position: int | None = None
    token: str | None = None


def logprob_agreement(reference: Completion, actual: Completion) -> LogprobAgreement | None:
    """The two answers' log-probabilities side by side (``LogprobAgreement``); None when
    either carries none."""
    ours, theirs = reference.logprobs, actual.logprobs
    if not ours or not theirs:
        return None
    worst, at, token, n = 0.0, None, None, 0
    for i, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        if a.data != b.data:
            break
        n = i + 1
        if math.isinf(a.logprob) or math.isinf(b.logprob):
            d = 0.0 if a.logprob == b.logprob else math.inf
        else:
            d = nats(abs(a.logprob - b.logprob))
        if d > worst or at is None:
            worst, at, token = d, i, a.token
    return LogprobAgreement(n, worst, at, token)


@dataclass(frozen=True)
class LogprobFault:
    """Why a budget's log-probabilities were not compared with the reference's: one side's
    are not one per token. ``side`` says whose (``answer``: the budget's, a defect of the
    server under test; ``reference``: the reference's, so nothing can be compared)."""

    side: Literal["answer", "reference"]
    reason: str


def logprob_fault(reference: Completion, actual: Completion) -> LogprobFault | None:
    """Whether the two answers' log-probabilities (when asked for) can be compared position by
    position: each one per token by its own count (``count_fault``, the ``logprobs`` check's
    rule), and, where the count cannot be judged (no usage, a stop string), as many on
    either side for the same text (give or take an end-of-sequence entry)."""
    mine = count_fault(actual)
    if mine is not None:
        return LogprobFault("answer", mine)
    theirs = count_fault(reference)
    if theirs is not None:
        return LogprobFault("reference", theirs)
    a, b = reference.logprobs, actual.logprobs
    if not a or not b or abs(len(a) - len(b)) <= 1:
        return None
    if compared_text(reference) != compared_text(actual):
        return None
    fewer, more = sorted((len(a), len(b)))
    entries = f"{fewer} log-probability entr{'y' if fewer == 1 else 'ies'}"
    side: Literal["answer", "reference"] = "answer" if len(b) < len(a) else "reference"
    other = "the reference's" if side == "answer" else "the other answer's"
    return LogprobFault(side, f"{entries} where {other} has {more}, for the same text")


@dataclass(frozen=True)
class LosslessResult:
    """Outcome of one losslessness comparison across budgets.

    ``not_comparable`` holds the budgets whose answer could not be compared with
    the reference (not whole, or another prompt): no verdict about them.
    ``near_ties`` holds the divergences ``near-tie`` mode tolerates (the target's
    margin there was within the mode's): warnings, not failures.
    """

    reference_label: str
    reference: Completion
    outputs: Mapping[int | None, Completion]
    divergences: Mapping[int | None, Divergence]
    mode: Lossless
    tolerated: tuple[int | None, ...] = ()
    not_comparable: Mapping[int | None, Unjudged] = field(default_factory=dict)
    near_ties: Mapping[int | None, Divergence] = field(default_factory=dict)
    #: budgets whose log-probabilities (when asked for) lie further from the reference's
    #: than ``LOGPROB_TOLERANCE`` where both chose the same token
    logprob_gaps: Mapping[int | None, LogprobAgreement] = field(default_factory=dict)
    #: budgets whose log-probabilities (when asked for) were not compared, because its
    #: answer's or the reference's are not one per token (``logprob_fault``)
    logprob_faults: Mapping[int | None, LogprobFault] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when every budget was compared and none diverges beyond the tolerance."""
        return not (
            self.divergences or self.not_comparable or self.logprob_gaps or self.logprob_faults
        )


def compared_text(completion: Completion) -> str:
    """What losslessness compares: the content, then each tool call as one line naming the
    tool and its arguments as sent (a call's id is the server's per-request handle)."""
    calls = getattr(completion, "tool_calls", ()) or ()
    tail = "".join(f"\n[tool call {c.name}] {c.arguments}" for c in calls)
    return completion.text + tail


def compare_lossless(
    reference: Completion,
    outputs: Mapping[int | None, Completion],
    mode: Lossless,
    *,
    counter: TokenCounter | None = None,
    reference_label: str = "target-only baseline",
) -> LosslessResult:
    """Compare every budget's output with ``reference`` under ``mode``.

    A pure text comparison: ``judge_lossless`` first sets aside the answers that
    cannot be compared.
    """
    divergences: dict[int | None, Divergence] = {}
    tolerated: list[int | None] = []
    for budget, comp in outputs.items():
        div = first_divergence(compared_text(reference), compared_text(comp), counter)
        if div is None:
            continue
        if mode.mode == "off":
            tolerated.append(budget)
            continue
        if mode.mode == "prefix":
            # only the first N tokens must agree (or N characters without a tokenizer)
            position = div.token_index if div.token_index is not None else div.char_offset
            if position >= mode.prefix_tokens:
                tolerated.append(budget)
                continue
        divergences[budget] = div
    return LosslessResult(
        reference_label=reference_label,
        reference=reference,
        outputs=dict(outputs),
        divergences=divergences,
        mode=mode,
        tolerated=tuple(tolerated),
    )


def judge_lossless(
    reference: Completion,
    outputs: Mapping[int | None, Completion],
    mode: Lossless,
    *,
    counter: TokenCounter | None = None,
    reference_label: str = "target-only baseline",
) -> LosslessResult:
    """``compare_lossless`` over the answers that can be compared; the others are kept
    apart in ``not_comparable`` with the reason."""
    unjudged = {
        budget: why
        for budget, comp in outputs.items()
        if (why := comparability(reference, comp, reference_label)) is not None
    }
    compared = {b: c for b, c in outputs.items() if b not in unjudged}
    result = compare_lossless(
        reference, compared, mode, counter=counter, reference_label=reference_label
    )
    faults = {
        budget: fault
        for budget, comp in compared.items()
        if (fault := logprob_fault(reference, comp)) is not None
    }
    gaps = {
        budget: agree
        for budget, comp in compared.items()
        if budget not in faults
        and (agree := logprob_agreement(reference, comp)) is not None
        and agree.delta > LOGPROB_TOLERANCE
    }
    return LosslessResult(
        reference_label=reference_label,
        reference=reference,
        outputs=dict(outputs),
        divergences=result.divergences,
        mode=mode,
        tolerated=result.tolerated,
        not_comparable=unjudged,
        logprob_gaps=gaps,
        logprob_faults=faults,
    )


def _budget_label(budget: int | None) -> str:
    return "server-default" if budget is None else str(budget)


def lossless_violations(result: LosslessResult) -> list[Violation]:
    """``not-lossless`` violations (one per diverging budget) with the divergence point."""
    out: list[Violation] = []
    diverging = [b for b in result.outputs if b in result.divergences]
    names = ", ".join("server" if b is None else str(b) for b in diverging)
    for budget, div in result.divergences.items():
        margin = f": {div.margin.sentence(position=False)}" if div.margin is not None else ""
        out.append(
            Violation(
                code="not-lossless",
                message=(
                    f"tree_budget {_budget_label(budget)} diverges from the "
                    f"{result.reference_label} at {div.where()}{margin}"
                ),
                evidence={
                    "diverging budgets": names,
                    "reference": div.reference_excerpt,
                    "this budget": div.actual_excerpt,
                    **(div.margin.evidence() if div.margin is not None else {}),
                    "lossless mode": str(result.mode),
                },
                request=result.outputs[budget].request.describe(),
            )
        )
    return out


def logprob_violations(result: LosslessResult) -> list[Violation]:
    """``logprobs`` violations: one per budget whose log-probabilities lie further from the
    reference's than ``LOGPROB_TOLERANCE`` at positions where both chose the same token, and
    one per budget whose own are not one per token; ``not-comparable`` where the
    reference's are not (``logprob_fault``)."""
    return logprob_fault_violations(result) + [
        Violation(
            code="logprobs",
            message=(
                f"tree_budget {_budget_label(budget)}'s log-probabilities differ from the "
                f"{result.reference_label}'s by {nats_text(gap.delta, LOGPROB_TOLERANCE)} nats "
                f"at token {gap.position} "
                f"({gap.token!r}), where both chose that token (tolerance "
                f"{LOGPROB_TOLERANCE:g} nats)"
            ),
            evidence={
                "compared": f"{gap.positions} positions, up to the first token that differs",
                "this budget": _logprob_at(result.outputs[budget], gap.position),
                "reference": _logprob_at(result.reference, gap.position),
            },
            request=result.outputs[budget].request.describe(),
        )
        for budget, gap in result.logprob_gaps.items()
    ]


def logprob_fault_violations(result: LosslessResult) -> list[Violation]:
    """One violation per budget whose log-probabilities were not compared: ``logprobs``
    when its own are not one per token (the server's defect), ``not-comparable`` when the
    reference's are not (no verdict on the values)."""
    out: list[Violation] = []
    reference = result.reference_label
    for budget, fault in result.logprob_faults.items():
        whose = "its answer has" if fault.side == "answer" else f"the {reference}'s has"
        out.append(
            Violation(
                code="logprobs" if fault.side == "answer" else NOT_COMPARABLE,
                message=(
                    f"tree_budget {_budget_label(budget)}'s log-probabilities not compared with "
                    f"the {reference}'s: {whose} {fault.reason}"
                ),
                evidence={
                    "this budget": _entries(result.outputs[budget]),
                    "reference": _entries(result.reference),
                },
                request=result.outputs[budget].request.describe(),
            )
        )
    return out


def _entries(answer: Completion) -> str:
    entries = len(answer.logprobs or ())
    tokens = answer.usage.completion_tokens if answer.usage is not None else None
    told = f" for {tokens} tokens (usage.completion_tokens)" if tokens is not None else ""
    return f"{entries} log-probability entr{'y' if entries == 1 else 'ies'}{told}"


def _logprob_at(answer: Completion, position: int | None) -> str | None:
    entries = answer.logprobs
    if position is None or not entries or position >= len(entries):
        return None
    return f"{entries[position].logprob:.6g}"


def near_tie_warning(result: LosslessResult, budget: int | None) -> str:
    """The warning of a divergence ``near-tie`` mode tolerates."""
    div = result.near_ties[budget]
    assert div.margin is not None
    return (
        f"pytest-ddtree: tree_budget {_budget_label(budget)} diverges from the "
        f"{result.reference_label} at {div.where()}: {div.margin.sentence(position=False)}; "
        "tolerated by "
        f"--ddtree-lossless {result.mode}, the budget stays timed "
        f"(reference {div.reference_excerpt}, this budget {div.actual_excerpt})"
    )


def margin_reason(result: LosslessResult, budget: int | None) -> str:
    """The diagnosis reason of one diverging budget, with its margin when known."""
    div = result.divergences.get(budget) or result.near_ties.get(budget)
    base = f"the output differs from the {result.reference_label}"
    if div is None or div.margin is None:
        return base
    return f"{base} at {div.where()}: {div.margin.sentence(position=False)}"


def not_comparable_violations(result: LosslessResult) -> list[Violation]:
    """One ``not-comparable`` violation per budget set aside, with the reason."""
    return [
        Violation(
            code=NOT_COMPARABLE,
            # the reference is named once: by the reason when it names it, else here
            message=(
                f"tree_budget {_budget_label(budget)} not compared: {why.reason}"
                if why.names_reference
                else f"tree_budget {_budget_label(budget)} not compared with the "
                f"{result.reference_label}: {why.reason}"
            ),
            evidence={},
            request=result.outputs[budget].request.describe(),
        )
        for budget, why in result.not_comparable.items()
    ]


def not_comparable_diagnosis(unjudged: Sequence[Unjudged]) -> Diagnosis:
    """The footer of a test whose answers could not be compared: no layer is blamed."""
    advice = "; ".join(dict.fromkeys(u.advice for u in unjudged))
    first = unjudged[0].reason if unjudged else "no answer to compare"
    more = f" (and {len(unjudged) - 1} more)" if len(unjudged) > 1 else ""
    return Diagnosis(
        "undetermined", f"{NOT_COMPARABLE_TITLE}: {first}{more}", advice or NOT_WHOLE_ADVICE
    )


def lossless_header(result: LosslessResult) -> str:
    """The first line of a failed losslessness test."""
    budgets, reference = len(result.outputs), result.reference_label
    unjudged = len(result.not_comparable)
    if not result.divergences and result.logprob_gaps:
        return (
            f"log-probabilities apart: {len(result.logprob_gaps)} of {budgets} budget(s) give "
            f"the same tokens other log-probabilities than the {reference}"
        )
    if not result.divergences and result.logprob_faults:
        return (
            f"log-probabilities not one per token: {len(result.logprob_faults)} of {budgets} "
            f"budget(s) not compared with the {reference}'s"
        )
    if not result.divergences:
        return (
            f"not comparable: {unjudged} of {budgets} budget(s) could not be compared with the "
            f"{reference}; no verdict on losslessness"
        )
    more = f"; {unjudged} more not comparable" if unjudged else ""
    return (
        f"not lossless: {len(result.divergences)} of {budgets} "
        f"budget(s) change the temperature-0 output (reference: {reference}){more}"
    )


NEAR_TIE_ADVICE = (
    "every divergence is at a numerical near-tie of the target (its top two tokens within "
    "{margin:g} nats): batched verification computes the logits in another order and can "
    "flip such a tie, which is not a verifier bug; --ddtree-lossless near-tie tolerates it "
    "and keeps the budget timed"
)


LOGPROB_GAP_ADVICE = (
    "the text is the target's, but the speculative path reports its tokens' "
    "log-probabilities from another distribution than the target's own (the drafter's, a "
    "placeholder, a stale position): take them from the target's verification pass"
)


LOGPROB_COUNT_REASON = (
    "the server's answer does not list one log-probability per token: a defect of its "
    "log-probability reporting, not of losslessness (the tokens were compared)"
)
LOGPROB_COUNT_ADVICE = (
    "list one entry per generated token, streamed and not (llama.cpp with a draft model "
    "streams one entry for a whole answer); then the values can be compared"
)


def lossless_footer(result: LosslessResult, *, has_baseline: bool) -> str:
    """The diagnosis lines of a failed losslessness test."""
    if result.divergences:
        margins = [d.margin for d in result.divergences.values()]
        if margins and all(m is not None and m.kind == "near-tie" for m in margins):
            return "diagnosis: speculative decoding (numerical near-tie) - " + (
                NEAR_TIE_ADVICE.format(margin=result.mode.near_tie)
            )
        sure = [m for m in margins if m is not None and m.kind == "confident"]
        lead = "diagnosis: speculative decoding - "
        if sure:
            lead = "diagnosis: speculative decoding (the target was sure) - "
        return lead + lossless_advice(has_baseline)
    if result.logprob_gaps:
        return "diagnosis: speculative decoding - " + LOGPROB_GAP_ADVICE
    faults = result.logprob_faults
    if any(f.side == "answer" for f in faults.values()):
        return Diagnosis("server", LOGPROB_COUNT_REASON, LOGPROB_COUNT_ADVICE).render()
    if faults:
        named = [
            Unjudged(
                f"tree_budget {_budget_label(b)}: the {result.reference_label}'s "
                f"log-probabilities are not one per token ({f.reason})",
                LOGPROB_COUNT_ADVICE,
            )
            for b, f in faults.items()
        ]
        return not_comparable_diagnosis(named).render()
    named = [
        Unjudged(f"tree_budget {_budget_label(b)}: {why.reason}", why.advice)
        for b, why in result.not_comparable.items()
    ]
    return not_comparable_diagnosis(named).render()


def _reference(
    outputs: Mapping[int | None, Completion], baseline: Completion | None
) -> tuple[Completion, str]:
    """The baseline's answer, else the lowest budget whose answer arrived whole."""
    if baseline is not None:
        return baseline, "target-only baseline"
    numbered = sorted(b for b in outputs if b is not None)
    whole = [b for b in numbered if why_not_whole(outputs[b]) is None]
    if whole and whole[0] != numbered[0]:
        label = f"lowest budget that arrived whole ({whole[0]}; no baseline configured)"
        return outputs[whole[0]], label
    lowest = numbered[0] if numbered else None
    return outputs[lowest], f"lowest budget ({lowest}; no baseline configured)"


def run_lossless(
    client: DDTreeClient,
    baseline: DDTreeClient | None,
    prompt: Any,
    budgets: Sequence[int | None],
    mode: Lossless,
    *,
    max_tokens: int,
    counter: TokenCounter | None = None,
    prompt_id: str | None = None,
    **extra: Any,
) -> tuple[LosslessResult, list[Violation]]:
    """Send ``prompt`` at temperature 0 at every budget (and to the baseline), then compare.

    Returns the comparison and its violations: ``not-comparable`` per budget
    whose answer (or the reference's) did not arrive whole or saw another
    prompt, ``not-lossless`` per diverging budget among the others. Without a
    baseline the lowest budget that arrived whole is the reference.
    """
    kw: dict[str, Any] = {"max_tokens": max_tokens, "temperature": 0.0, "prompt_id": prompt_id}
    if budgets:
        # unrecorded: state an earlier, different request left behind is a state leak
        # (check_state's business), not a difference between budgets
        client.request(prompt, tree_budget=budgets[0], **kw, **extra)
    outputs = {b: client.request(prompt, tree_budget=b, **kw, **extra) for b in budgets}
    answer = None
    if baseline is not None:
        # the same treatment as the server's: a server that caches prompts (llama.cpp)
        # computes a cold prompt in other batches than a cached one, and at temperature 0
        # that alone can change a close argmax; both sides answer with the prompt cached
        baseline.request(prompt, **kw, **extra)
        answer = baseline.request(prompt, **kw, **extra)
    reference, label = _reference(outputs, answer)
    result = judge_lossless(reference, outputs, mode, counter=counter, reference_label=label)
    if result.divergences:
        target = baseline if baseline is not None else client
        probe = {**kw, **extra, **probe_fields(client.api), "stream": False}
        result = with_margins(
            result,
            lambda: target.request(prompt, tree_budget=reference.request.tree_budget, **probe),
            lambda budget: client.request(prompt, tree_budget=budget, **probe),
        )
    return result, (
        not_comparable_violations(result) + lossless_violations(result) + logprob_violations(result)
    )


def with_margins(
    result: LosslessResult,
    target: Callable[[], Completion],
    speculative: Callable[[int | None], Completion] | None = None,
) -> LosslessResult:
    """``result`` with the target's margin at every divergence (``margin.classify``).

    ``target`` asks the reference side for the answer with log-probabilities (once);
    ``speculative`` asks the server at a budget (its own view, shown in the evidence).
    In ``near-tie`` mode a divergence within the margin moves to ``near_ties``.
    """
    try:
        probed: Completion | None = target()
    except Exception:  # a failing probe leaves the margin unknown, never a verdict
        probed = None
    divergences: dict[int | None, Divergence] = {}
    near: dict[int | None, Divergence] = dict(result.near_ties)
    for budget, div in result.divergences.items():
        comp = result.outputs[budget]
        if probed is None:
            margin = Margin(
                "unknown", result.mode.near_tie, reason="asking for log-probabilities failed"
            )
        else:
            own: Completion | None = None
            if speculative is not None:
                try:
                    own = speculative(budget)
                except Exception:
                    own = None
            margin = classify(
                probed,
                result.reference.text,
                comp.text,
                div.char_offset,
                result.mode.near_tie,
                own,
            )
        marked = replace(div, margin=margin)
        if result.mode.mode == "near-tie" and margin.kind == "near-tie":
            near[budget] = marked
        else:
            divergences[budget] = marked
    return replace(result, divergences=divergences, near_ties=near)
