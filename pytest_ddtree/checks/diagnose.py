"""Differential diagnosis and losslessness.

Two questions a failing speculative-decoding endpoint raises, answered with a
target-only baseline server for the same model:

* which layer is at fault? ``Diagnoser`` replays a failing request on the
  baseline: if the baseline fails the same way the prompt, chat template or
  model is to blame; if it passes, the speculative-decoding layer is.
* does speculation change the output? ``run_lossless`` compares the
  temperature-0 output at every budget with the baseline's (token-exact when
  a tokenizer is available) and reports the first divergence. That part lives
  in ``lossless`` (the determinism check in ``state``, ``Diagnosis`` and the
  advice in ``verdict``); its names are importable from here too.

Both judge only answers that arrived whole and saw the same prompt
(``comparable``); any other pair is ``not-comparable``: the test fails with
the reason and no layer is blamed.

No pytest here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from pytest_ddtree.checks.blame import (
    BLAME_TITLES,
    CLIENT_SIDE_ADVICE,
    NEAR_TIE_FLIP_ADVICE,
    NO_BASELINE_LOSSY_ADVICE,
    NO_DRAFTS_ADVICE,
    NO_DRAFTS_TITLE,
    NOT_COMPARABLE_TITLE,
    NOT_WHOLE_ADVICE,
    OWN_FAILURE_ADVICE,
    PROMPT_MISMATCH_ADVICE,
    REJECTED_ADVICE,
    SAMPLED_ADVICE,
    SERVER_ADVICE,
    SPECULATION_ADVICE,
    TEMPLATE_ADVICE,
    UNSTABLE_TARGET_ADVICE,
    Blame,
    Diagnosis,
    lossless_advice,
    server_advice,
)
from pytest_ddtree.checks.comparable import (
    NOT_SENT_KIND,
    feature_advice,
    kind_name,
    not_whole_advice,
    prompt_mismatch,
    refused,
    requested_features,
    why_not_whole,
)
from pytest_ddtree.checks.invariants import CODE_LAYERS
from pytest_ddtree.checks.lossless import (
    NEAR_TIE_ADVICE,
    Divergence,
    LosslessResult,
    Unjudged,
    comparability,
    compare_lossless,
    first_divergence,
    judge_lossless,
    lossless_footer,
    lossless_header,
    lossless_violations,
    margin_reason,
    near_tie_warning,
    not_comparable_diagnosis,
    not_comparable_violations,
    run_lossless,
    with_margins,
)
from pytest_ddtree.checks.margin import Margin, classify, probe_fields
from pytest_ddtree.checks.state import (
    check_state,
    run_state_check,
    state_footer,
    state_unjudged,
)
from pytest_ddtree.core.codes import UNJUDGED_CODES
from pytest_ddtree.core.settings import DEFAULT_NEAR_TIE
from pytest_ddtree.core.violation import Violation
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.completion import Completion, RequestSpec, summarize_text
from pytest_ddtree.wire.tokens import TokenCounter

__all__ = [
    "BLAME_TITLES",
    "CLIENT_SIDE_ADVICE",
    "NEAR_TIE_ADVICE",
    "NEAR_TIE_FLIP_ADVICE",
    "NOT_COMPARABLE_TITLE",
    "NOT_WHOLE_ADVICE",
    "NO_BASELINE_ADVICE",
    "NO_BASELINE_LOSSY_ADVICE",
    "NO_DRAFTS_ADVICE",
    "NO_DRAFTS_TITLE",
    "PATH_CODES",
    "PROMPT_MISMATCH_ADVICE",
    "REJECTED_ADVICE",
    "SAMPLED_ADVICE",
    "SERVER_ADVICE",
    "SPECULATION_ADVICE",
    "SPECULATION_ONLY",
    "STATS_CODES",
    "STOP_CLUES",
    "STOP_LIST_ADVICE",
    "TEMPLATE_ADVICE",
    "TRANSPORT_CODES",
    "UNSTABLE_TARGET_ADVICE",
    "Blame",
    "Diagnoser",
    "Diagnosis",
    "Divergence",
    "LosslessResult",
    "Unjudged",
    "check_state",
    "comparability",
    "compare_lossless",
    "drafts_absent",
    "first_divergence",
    "judge_lossless",
    "lossless_advice",
    "lossless_footer",
    "lossless_header",
    "lossless_violations",
    "margin_reason",
    "near_tie_warning",
    "not_comparable_diagnosis",
    "not_comparable_violations",
    "prompt_mismatch",
    "run_lossless",
    "run_state_check",
    "state_footer",
    "state_unjudged",
    "stop_clue",
    "with_margins",
]

# Failures of the exchange or of the server's own accounting, rather than of the text
# the model wrote: shared with the baseline they point at the serving stack.
TRANSPORT_CODES = frozenset(code for code, layer in CODE_LAYERS.items() if layer == "server")
# Shared together with a serving-stack code these follow from it (e.g. an overrun
# computed from a usage count the server lied about).
_FOLLOWERS = frozenset({"overrun", "finish-reason", "empty"})

# Codes that describe the speculation statistics: a target-only baseline has
# no meaningful counterpart, so they never count as "the baseline fails too".
STATS_CODES = frozenset({"budget-mismatch", "stats-inconsistent", "stats-inflated"})
# Codes that judge the text a decoding path wrote (its length, leaks, loops, characters): a
# sampled answer, or one that left the target's path at a near-tie, may write another text,
# so the baseline's replay is evidence about them only where the paths are comparable.
PATH_CODES = frozenset(
    {
        "empty",
        "early-stop",
        "finish-reason",
        "role-leak",
        "special-token-leak",
        "reasoning-leak",
        "reasoning-only",
        "degenerate",
        "non-printable",
    }
)
# Codes that only exist for speculation and are a wrapper problem by definition.
SPECULATION_ONLY = frozenset({"not-lossless"})


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


def drafts_absent(completion: Completion, codes: Sequence[str] = ()) -> str | None:
    """The answer's own statistics showing that no drafted token reached it (nothing drafted,
    or nothing accepted), as ``name=count`` evidence; None when they show drafts, say nothing
    about them (absent, or no counts) or are themselves broken (a statistics code in
    ``codes``): no evidence either way."""
    stats = completion.stats
    if stats is None or set(codes) & STATS_CODES:
        return None
    counts = {
        "num_draft_tokens": stats.num_draft_tokens,
        "num_accepted_draft_tokens": stats.num_accepted_draft_tokens,
    }
    if 0 not in counts.values():
        return None
    return ", ".join(f"{name}={n}" for name, n in counts.items() if n is not None)


def _not_the_drafts(completion: Completion, codes: Sequence[str], found: Diagnosis) -> Diagnosis:
    """A failure blamed on speculation in an answer no drafted token reached: the speculative
    endpoint's stack is at fault, not its drafts (the rest of the verdict's reason kept)."""
    if found.blame != "speculation":
        return found
    evidence = drafts_absent(completion, codes)
    if evidence is None:
        return found
    return replace(
        found,
        blame="server",
        reason=f"{NO_DRAFTS_TITLE}: its statistics show no drafted token reached this answer "
        f"({evidence}); {found.reason}",
        advice=NO_DRAFTS_ADVICE,
    )


def _and_its_own(found: Diagnosis, own: Sequence[str]) -> Diagnosis:
    """A verdict on the failures the baseline shares, with those it does not named beside it:
    the shared ones clear speculation of themselves only, never of the rest (a gateway's
    role-leak beside an early stop the target model makes too)."""
    if not own:
        return found
    names = ", ".join(own)
    return replace(
        found,
        reason=f"{found.reason}; not shared: {names} (the target-only baseline's answer does "
        "not break it)",
        advice=f"{found.advice} - for the shared failure only; {OWN_FAILURE_ADVICE} ({names})",
    )


def _not_comparable(completion: Completion, replay: Completion) -> Diagnosis | None:
    """No verdict when either answer did not arrive whole (their failures are not shared:
    that case is judged before); None when both did."""
    for who, answer in (("server", completion), ("target-only baseline", replay)):
        why = why_not_whole(answer)
        if why is not None:
            return Diagnosis(
                "undetermined",
                f"{NOT_COMPARABLE_TITLE}: the {who}'s answer did not arrive whole ({why}); "
                "nothing about the layers can be told from it",
                not_whole_advice(answer, default=NOT_WHOLE_ADVICE, who=who),
            )
    return None


def _rejected_advice(completion: Completion) -> str:
    """What to do about a request the server rejected: the options that shape it, and the
    fields beyond plain chat it asked for (a tool choice, a schema) when it asked for any."""
    if not refused(completion):  # 401, 403, 404, 413...: no field of the request is at stake
        return REJECTED_ADVICE
    return REJECTED_ADVICE + feature_advice(requested_features(completion))


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

    A replay is evidence only where a lossless server must give the baseline's answer:
    a sampled answer (temperature above 0) that the baseline's same-seed replay does not
    share is not comparable (a speculative sampler draws differently), and a
    temperature-0 answer that fails where the baseline's passes is judged at the point
    where the two part: the target's margin there (``near_tie`` nats at most is a
    near-tie, asked of the baseline with log-probabilities) tells a flipped near-tie, from
    which the model's own continuation fails, from a token the target would not produce.
    ``counter`` (exact) locates that point in tokens.
    """

    def __init__(
        self,
        baseline: DDTreeClient | None,
        *,
        max_replays: int = 24,
        near_tie: float = DEFAULT_NEAR_TIE,
        counter: TokenCounter | None = None,
    ) -> None:
        self.baseline = baseline
        self.max_replays = max_replays
        self.near_tie = near_tie
        self.counter = counter
        self.replays = 0
        self._cache: dict[str, Diagnosis] = {}
        self._lock = threading.Lock()
        self._props: tuple[dict[str, Any] | None] | None = None  # read once, when needed

    def diagnose(
        self,
        completion: Completion,
        violations: Sequence[Violation],
        check: Callable[[Completion], list[Violation]],
    ) -> Diagnosis:
        """The verdict for ``completion``, which broke ``violations``; the stop the
        server says ended the answer, when telling, is added to the reason."""
        codes = [v.code for v in violations]
        found = _not_the_drafts(completion, codes, self._diagnose(completion, violations, check))
        clue = stop_clue(violations)
        if clue is None or found.blame == "speculation":
            return found
        text, kind = clue
        if found.blame == "undetermined" and kind == "template-token":
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
        if codes and set(codes) <= UNJUDGED_CODES:
            # nothing was judged (an answer cut before its JSON closed): no replay, no layer
            first = next(v for v in violations if v.code in UNJUDGED_CODES)
            cut = first.code == "json-cut"
            return Diagnosis(
                "undetermined",
                f"no layer judged: {first.message}",
                "raise max_tokens so the JSON can close, then run again"
                if cut
                else NOT_WHOLE_ADVICE,
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
                _rejected_advice(completion),
            )
        if self.baseline is None:
            return Diagnosis("undetermined", "no baseline server is configured", NO_BASELINE_ADVICE)
        key = _replay_key(completion.request, codes)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                return replace(hit, cached=True)
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
        own = sorted(set(output_codes) - set(base_codes))
        if shared and set(shared) & TRANSPORT_CODES and set(shared) <= TRANSPORT_CODES | _FOLLOWERS:
            return _and_its_own(
                Diagnosis(
                    "server",
                    f"the target-only baseline fails the same way ({', '.join(shared)})",
                    server_advice(shared, _FOLLOWERS, self._baseline_props),
                    base_codes,
                ),
                own,
            )
        unjudged = _not_comparable(completion, replay)
        if unjudged is not None:
            return unjudged
        if shared:
            return _and_its_own(
                Diagnosis(
                    "template",
                    f"the target-only baseline fails the same way ({', '.join(shared)})",
                    TEMPLATE_ADVICE,
                    base_codes,
                ),
                own,
            )
        # the new rules judge the text a (flipped or sampled) path wrote; statistics,
        # accounting, wire and structure failures keep the replay's verdict
        of_the_text = bool(codes) and set(codes) <= PATH_CODES
        if completion.request.temperature > 0 and of_the_text:
            return _sampled(completion, codes, base_codes)
        if not base_codes:
            if of_the_text and completion.request.temperature == 0:
                return self._parted(completion, replay, codes)
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

    def _baseline_props(self) -> dict[str, Any] | None:
        """The baseline's ``GET /props`` (llama.cpp: what its chat template supports), read
        once on the first diagnosis that asks; None when it says nothing."""
        with self._lock:
            if self._props is None:
                found = self.baseline.props() if self.baseline is not None else None
                self._props = (found,)
            return self._props[0]

    def _parted(
        self, completion: Completion, replay: Completion, codes: Sequence[str]
    ) -> Diagnosis:
        """A temperature-0 answer that fails where the baseline's passes: judged where the
        two part, by the target's margin there."""
        passes = (
            f"the target-only baseline passes every check ({', '.join(codes)} only with "
            "speculation)"
        )
        found = first_divergence(replay.text, completion.text, self.counter)
        if found is None:
            return Diagnosis("speculation", passes, SPECULATION_ADVICE)
        margin = self._margin(completion, replay, found.char_offset)
        where = f"the answer leaves the baseline's at {found.where()}"
        if margin.target_unstable:
            return Diagnosis(
                "undetermined",
                f"{passes}; {where}, but the target alone is not reproducible there: asked "
                "again (with log-probabilities), the target-only server answered otherwise "
                f"before that point, so the parting is no evidence against speculation",
                UNSTABLE_TARGET_ADVICE,
                margin=margin.to_json(),
            )
        if margin.kind == "near-tie":
            return Diagnosis(
                "template",
                f"near-tie flip, then the model's own path fails ({', '.join(codes)}): {where}, "
                f"where {margin.sentence(position=False)}; the baseline's path passes every check",
                NEAR_TIE_FLIP_ADVICE,
                margin=margin.to_json(),
            )
        return Diagnosis(
            "speculation",
            f"{passes}; {where}: {margin.sentence(position=False)}",
            SPECULATION_ADVICE,
            margin=margin.to_json(),
        )

    def _margin(self, completion: Completion, replay: Completion, offset: int) -> Margin:
        """The target's margin at character ``offset`` of the baseline's answer, read from
        the baseline's answer to the same request with log-probabilities."""
        assert self.baseline is not None
        spec = completion.request
        body = {k: v for k, v in spec.body.items() if k not in ("stream", "stream_options")}
        body.update(probe_fields(spec.api))
        try:
            probed = self.baseline.replay(replace(spec, body=body, stream=False))
        except Exception as exc:  # a failing probe leaves the margin unknown, never a verdict
            return Margin(
                "unknown", self.near_tie, reason=f"asking for log-probabilities failed ({exc})"
            )
        if not probed.ok:
            why = summarize_text(str(probed.error), 120)
            return Margin(
                "unknown", self.near_tie, reason=f"asking for log-probabilities failed ({why})"
            )
        return classify(probed, replay.text, completion.text, offset, self.near_tie)


def _sampled(completion: Completion, codes: Sequence[str], base_codes: Sequence[str]) -> Diagnosis:
    """A sampled answer whose failure the baseline's same-seed replay does not share."""
    baseline = (
        f"fails differently ({', '.join(base_codes)})" if base_codes else "passes every check"
    )
    return Diagnosis(
        "undetermined",
        f"{NOT_COMPARABLE_TITLE}: sampled (temperature {completion.request.temperature:g}): the "
        f"target-only baseline's answer at the same seed {baseline}, which says nothing about a "
        f"speculative sampler (it draws differently from the target's); {', '.join(codes)} is "
        "not blamed on either layer",
        SAMPLED_ADVICE,
        tuple(base_codes),
    )
