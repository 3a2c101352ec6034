"""Differential diagnosis and losslessness.

Two questions a failing speculative-decoding endpoint raises, answered with a
target-only baseline server for the same model:

* which layer is at fault? ``Diagnoser`` replays a failing request on the
  baseline: if the baseline fails the same way the prompt, chat template or
  model is to blame; if it passes, the speculative-decoding layer is.
* does speculation change the output? ``run_lossless`` compares the
  temperature-0 output at every budget with the baseline's (token-exact when
  a tokenizer is available) and reports the first divergence.

Both judge only answers that arrived whole and saw the same prompt
(``comparable``); any other pair is ``not-comparable``: the test fails with
the reason and no layer is blamed.

No pytest here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pytest_ddtree.checks.comparable import (
    NOT_COMPARABLE,
    NOT_SENT_KIND,
    kind_name,
    prompt_mismatch,
    prompt_tokens,
    why_not_whole,
)
from pytest_ddtree.checks.invariants import CODE_LAYERS, LAYERS, check_determinism
from pytest_ddtree.checks.margin import Margin, classify, probe_fields
from pytest_ddtree.core.settings import Lossless
from pytest_ddtree.core.violation import Violation
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.completion import Completion, RequestSpec, summarize_text
from pytest_ddtree.wire.tokens import TokenCounter

Verdict = Literal["template", "server", "speculation", "undetermined"]

VERDICT_TITLES: dict[str, str] = {**LAYERS, "undetermined": "undetermined"}

# Failures of the exchange or of the server's own accounting, rather than of the text
# the model wrote: shared with the baseline they point at the serving stack.
TRANSPORT_CODES = frozenset(code for code, layer in CODE_LAYERS.items() if layer == "server")
# Shared together with a serving-stack code these follow from it (e.g. an overrun
# computed from a usage count the server lied about).
_FOLLOWERS = frozenset({"overrun", "finish-reason", "empty"})

# Codes that describe the speculation statistics: a target-only baseline has
# no meaningful counterpart, so they never count as "the baseline fails too".
STATS_CODES = frozenset({"budget-mismatch", "stats-inconsistent", "stats-inflated"})
# Codes that only exist for speculation and are a wrapper problem by definition.
SPECULATION_ONLY = frozenset({"not-lossless"})


@dataclass(frozen=True)
class Diagnosis:
    """Which layer is at fault for one failing request, and what to do."""

    verdict: Verdict
    reason: str
    advice: str
    baseline_codes: tuple[str, ...] = ()
    cached: bool = False

    @property
    def title(self) -> str:
        """Human name of the verdict."""
        return VERDICT_TITLES[self.verdict]

    def render(self) -> str:
        """Two lines appended to a failure message."""
        return f"diagnosis: {self.title} - {self.reason}\n    what to do: {self.advice}"

    def to_json(self) -> dict[str, Any]:
        """Plain JSON for reports and JUnit properties."""
        return {
            "verdict": self.verdict,
            "title": self.title,
            "reason": self.reason,
            "advice": self.advice,
            "baseline_codes": list(self.baseline_codes),
        }


TEMPLATE_ADVICE = (
    "the target model alone fails the same way: fix the chat template, the stop tokens "
    "or the prompt; speculative decoding is not the cause"
)
SPECULATION_ADVICE = (
    "the target model alone is fine: the speculative-decoding layer (wrapper, drafter or "
    "tree verification) is at fault"
)
SERVER_ADVICE = (
    "the target-only server fails the same way (errors, timeouts, broken streams, wrong "
    "usage or finish accounting): check the serving stack, its resources and the network; "
    "speculation is not the cause"
)
REJECTED_ADVICE = (
    "the server refused the request as sent: check the options that shape it (for example a "
    "tree budget outside the server's range, the model id or max_tokens)"
)
NO_BASELINE_LOSSY_ADVICE = (
    "the output changes with the tree budget, which lossless speculation never does: look at "
    "the speculative-decoding layer; no baseline is configured, so target-only decoding was "
    "not compared (give --ddtree-baseline-endpoint to compare with it)"
)
CLIENT_SIDE_ADVICE = (
    "this is the client's side of the exchange (its connection, deadline or size limit), not "
    "evidence about speculation or the template: check the network, --ddtree-timeout and "
    "--ddtree-max-response-bytes, then run again"
)


def lossless_advice(has_baseline: bool) -> str:
    """What to do about a not-lossless result; no claim about the target alone without one."""
    return SPECULATION_ADVICE if has_baseline else NO_BASELINE_LOSSY_ADVICE


NOT_WHOLE_ADVICE = (
    "an answer that did not arrive whole (a broken or cut stream, an in-band error, a failed "
    "request) cannot be compared: fix what cut it (the server's stream, a proxy in between, or "
    "the client's --ddtree-timeout and --ddtree-max-response-bytes), then run again"
)
NOT_COMPARABLE_TITLE = "not comparable"

PROMPT_MISMATCH_ADVICE = (
    "serve the baseline with the same chat template and tokenizer as the server (same model "
    "files, same --chat-template); until both see the same prompt, a difference in output says "
    "nothing about speculative decoding"
)


STOP_LIST_ADVICE = (
    "take the template token out of the request's stop list ('stop', 'stop_token_ids') or "
    "the server's generation config: it ends answers where the model did not"
)
# what the stop the server names (evidence ``stop_kind``) says about an early end
STOP_CLUES = {
    "template-token": "the stop list holds a template token",
    "end-of-sequence": "the model chose to stop",
}


def stop_clue(violations: Sequence[Violation]) -> tuple[str, str] | None:
    """(a sentence naming the stop that ended the answer and what it means, its kind),
    from the first violation whose evidence names a telling stop."""
    for v in violations:
        kind = v.evidence.get("stop_kind")
        if kind in STOP_CLUES:
            return f"{v.evidence.get('stop')} ended the answer: {STOP_CLUES[kind]}", str(kind)
    return None


NO_BASELINE_ADVICE = (
    "give a target-only server for the same model with --ddtree-baseline-endpoint to get a verdict"
)


def _not_comparable(completion: Completion, replay: Completion) -> Diagnosis | None:
    """No verdict when either answer did not arrive whole (their failures are not shared:
    that case is judged before); None when both did."""
    for who, answer in (("the server's", completion), ("the target-only baseline's", replay)):
        why = why_not_whole(answer)
        if why is not None:
            return Diagnosis(
                "undetermined",
                f"{NOT_COMPARABLE_TITLE}: {who} answer did not arrive whole ({why}); "
                "nothing about the layers can be told from it",
                NOT_WHOLE_ADVICE,
            )
    return None


def _replay_key(spec: RequestSpec, codes: Sequence[str]) -> str:
    body = {k: v for k, v in spec.body.items() if k != "tree_budget"}
    parts = [spec.api, repr(sorted(body.items(), key=lambda kv: kv[0]))]
    parts.append(repr(sorted(spec.headers.items())))
    parts.append(",".join(sorted(set(codes))))
    return "\x1f".join(parts)


class Diagnoser:
    """Replays failing requests on the baseline, bounded and cached.

    ``check`` judges the baseline's completion with the same expectations as
    the failing one. At most one replay per request kind (request body minus
    budget, headers and failing codes) and ``max_replays`` in all, so an
    endpoint that fails everything cannot double the run time.
    """

    def __init__(
        self,
        baseline: DDTreeClient | None,
        *,
        max_replays: int = 24,
    ) -> None:
        self.baseline = baseline
        self.max_replays = max_replays
        self.replays = 0
        self._cache: dict[str, Diagnosis] = {}
        self._lock = threading.Lock()

    def diagnose(
        self,
        completion: Completion,
        violations: Sequence[Violation],
        check: Callable[[Completion], list[Violation]],
    ) -> Diagnosis:
        """The verdict for ``completion``, which broke ``violations``; the stop the
        server says ended the answer, when telling, is added to the reason."""
        found = self._diagnose(completion, violations, check)
        clue = stop_clue(violations)
        if clue is None or found.verdict == "speculation":
            return found
        text, kind = clue
        if found.verdict == "undetermined" and kind == "template-token":
            # no baseline needed: the server itself says a template token stopped it
            return Diagnosis("template", f"{text} ({found.reason})", STOP_LIST_ADVICE)
        return replace(found, reason=f"{found.reason}; {text}")

    def _diagnose(
        self,
        completion: Completion,
        violations: Sequence[Violation],
        check: Callable[[Completion], list[Violation]],
    ) -> Diagnosis:
        codes = sorted({v.code for v in violations})
        if completion.client_side_failure:
            # a stale connection, the client's deadline or size cap: replaying it on the
            # baseline would only turn the client's own trouble into a verdict
            return Diagnosis(
                "undetermined",
                f"the request failed on the client's side ({kind_name(completion.error_kind)}: "
                f"{summarize_text(str(completion.error), 160)})",
                CLIENT_SIDE_ADVICE,
            )
        if codes and set(codes) <= SPECULATION_ONLY:
            if self.baseline is None:
                return Diagnosis(
                    "speculation",
                    "the output changes between tree budgets (no baseline configured)",
                    NO_BASELINE_LOSSY_ADVICE,
                )
            return Diagnosis(
                "speculation",
                "the output changes with speculation (target-only decoding differs)",
                SPECULATION_ADVICE,
            )
        if completion.error_kind == NOT_SENT_KIND:
            return Diagnosis(
                "undetermined",
                "the request was not sent: the endpoint stalled on the requests before it",
                "fix the stalled endpoint first (see the first failures of the run)",
            )
        if 400 <= completion.status_code < 500 and completion.status_code not in (408, 429):
            return Diagnosis(
                "undetermined",
                f"the server rejected the request ({completion.error})",
                REJECTED_ADVICE,
            )
        if self.baseline is None:
            return Diagnosis("undetermined", "no baseline server is configured", NO_BASELINE_ADVICE)
        key = _replay_key(completion.request, codes)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                return Diagnosis(
                    hit.verdict, hit.reason, hit.advice, hit.baseline_codes, cached=True
                )
            if self.replays >= self.max_replays:
                return Diagnosis(
                    "undetermined",
                    f"replay limit reached ({self.max_replays} baseline replays this session)",
                    "fix the failures already diagnosed, then run again",
                )
            self.replays += 1
        result = self._replay(completion, codes, check)
        with self._lock:
            self._cache[key] = result
        return result

    def _replay(
        self,
        completion: Completion,
        codes: Sequence[str],
        check: Callable[[Completion], list[Violation]],
    ) -> Diagnosis:
        assert self.baseline is not None
        try:
            replay = self.baseline.replay(completion.request)
        except Exception as exc:  # a broken baseline must not hide the original failure
            return Diagnosis(
                "undetermined",
                f"the baseline replay failed: {type(exc).__name__}: {exc}",
                "check --ddtree-baseline-endpoint",
            )
        if replay.client_side_failure and replay.status_code != 0:
            return Diagnosis(
                "undetermined",
                f"the baseline replay failed on the client's side ({replay.error})",
                CLIENT_SIDE_ADVICE,
            )
        if not replay.ok and replay.status_code == 0:
            return Diagnosis(
                "undetermined",
                f"the baseline at {self.baseline.base_url} is unreachable ({replay.error})",
                "start the baseline server or fix --ddtree-baseline-endpoint",
            )
        found = [v for v in check(replay) if v.code not in STATS_CODES]
        base_codes = tuple(sorted({v.code for v in found}))
        mismatch = prompt_mismatch(completion, replay)
        if mismatch is not None:
            return Diagnosis("template", mismatch, PROMPT_MISMATCH_ADVICE, base_codes)
        output_codes = [c for c in codes if c not in STATS_CODES]
        shared = sorted(set(output_codes) & set(base_codes))
        if shared and set(shared) & TRANSPORT_CODES and set(shared) <= TRANSPORT_CODES | _FOLLOWERS:
            return Diagnosis(
                "server",
                f"the target-only baseline fails the same way ({', '.join(shared)})",
                SERVER_ADVICE,
                base_codes,
            )
        unjudged = _not_comparable(completion, replay)
        if unjudged is not None:
            return unjudged
        if shared:
            return Diagnosis(
                "template",
                f"the target-only baseline fails the same way ({', '.join(shared)})",
                TEMPLATE_ADVICE,
                base_codes,
            )
        if not base_codes:
            return Diagnosis(
                "speculation",
                f"the target-only baseline passes every check ({', '.join(codes)} only "
                "with speculation)",
                SPECULATION_ADVICE,
            )
        return Diagnosis(
            "undetermined",
            f"the baseline fails differently ({', '.join(base_codes)} instead of "
            f"{', '.join(codes)})",
            "look at both outputs; the server and the baseline may differ in more than speculation",
            base_codes,
        )


# ------------------------------------------------------------ losslessness


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
        return Unjudged(reason, NOT_WHOLE_ADVICE, names_reference=True)
    why = why_not_whole(answer)
    if why is not None:
        return Unjudged(f"its answer did not arrive whole ({why})", NOT_WHOLE_ADVICE)
    theirs, ours = prompt_tokens(reference), prompt_tokens(answer)
    if theirs is not None and ours is not None and theirs != ours:
        return Unjudged(
            f"the {reference_label} sees {theirs} prompt tokens, the server {ours} "
            "(usage.prompt_tokens): a different chat template or tokenizer",
            PROMPT_MISMATCH_ADVICE,
            names_reference=True,
        )
    return None


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

    @property
    def ok(self) -> bool:
        """True when every budget was compared and none diverges beyond the tolerance."""
        return not self.divergences and not self.not_comparable


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
        div = first_divergence(reference.text, comp.text, counter)
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
    return LosslessResult(
        reference_label=reference_label,
        reference=reference,
        outputs=dict(outputs),
        divergences=result.divergences,
        mode=mode,
        tolerated=result.tolerated,
        not_comparable=unjudged,
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
    named = [
        Unjudged(f"tree_budget {_budget_label(b)}: {why.reason}", why.advice)
        for b, why in result.not_comparable.items()
    ]
    return not_comparable_diagnosis(named).render()


def state_footer(violations: Sequence[Violation]) -> str:
    """The diagnosis lines of a determinism test whose answers could not be compared."""
    return not_comparable_diagnosis(
        [Unjudged(v.message, NOT_WHOLE_ADVICE) for v in violations]
    ).render()


def check_state(
    first: Completion,
    repeat: Completion,
    after_other: Completion,
    before: Completion | None = None,
) -> list[Violation]:
    """Identical temperature-0 requests must agree, whatever ran before them.

    ``first`` and ``repeat`` are back-to-back identical requests (``first``
    itself following an identical one): when they differ the server is
    ``nondeterministic``. When they agree but the same request right after a
    different one (``after_other``, and ``before``, which followed whatever
    the session sent earlier) comes out changed, state such as a drafter cache
    is not reset between requests: ``state-leak``. An answer that did not
    arrive whole is compared with nothing: ``not-comparable``, no verdict.
    """
    unjudged = state_unjudged(first, repeat, after_other, before)
    if unjudged:
        return unjudged
    found = check_determinism(first, repeat)
    if found:
        return found
    if first.request.temperature != 0:
        return []
    out: list[Violation] = []
    for label, other in (("after another request", after_other), ("first of a series", before)):
        if other is None or first.text == other.text:
            continue
        div = first_divergence(first.text, other.text)
        assert div is not None
        out.append(
            Violation(
                code="state-leak",
                message=(
                    "the same temperature-0 request gave different output right after a "
                    f"different request (first difference at character {div.char_offset}); "
                    "identical back-to-back repeats agree"
                ),
                evidence={"repeat": div.reference_excerpt, label: div.actual_excerpt},
                request=other.request.describe(),
            )
        )
        break
    return out


def state_unjudged(
    first: Completion,
    repeat: Completion,
    after_other: Completion,
    before: Completion | None = None,
) -> list[Violation]:
    """``not-comparable`` for each answer of a determinism check that did not arrive whole."""
    runs = {
        "first of a series": before,
        "first run": first,
        "repeat": repeat,
        "run after another request": after_other,
    }
    out: list[Violation] = []
    for label, comp in runs.items():
        why = None if comp is None else why_not_whole(comp)
        if comp is not None and why is not None:
            out.append(
                Violation(
                    NOT_COMPARABLE,
                    f"the {label} did not arrive whole ({why}): the identical requests were "
                    "not compared",
                    {},
                    comp.request.describe(),
                )
            )
    return out


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
    return result, not_comparable_violations(result) + lossless_violations(result)


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


def run_state_check(
    client: DDTreeClient, prompt: Any, other_prompt: Any, **kw: Any
) -> list[Violation]:
    """Run ``prompt`` twice, ``other_prompt``, then ``prompt`` again (see ``check_state``)."""
    kw = {**kw, "temperature": 0.0}
    before = client.request(prompt, **kw)  # follows whatever the session sent last
    first = client.request(prompt, **kw)
    repeat = client.request(prompt, **kw)
    client.request(other_prompt, **kw)
    after = client.request(prompt, **kw)
    return check_state(first, repeat, after, before)
