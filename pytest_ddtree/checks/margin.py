"""How sure the target was where a speculative answer left it: a near-tie or a bug.

At temperature 0 a lossless speculative server gives the target's own greedy answer.
When it does not, one number tells a numerical accident from a broken verifier: the
target's margin, in nats, between the token it chose at the first differing position
and the token the speculative path produced there. A bf16 model verified in batches
computes its logits in another order than one decoding token by token; two tokens a
few hundredths of a nat apart can swap, and from there the answers part. A token the
target ranks nats below its choice is one the target would not produce: the
speculative layer is at fault.

``classify`` reads the margin from the target-only side's log-probabilities (asked
for after the divergence, see ``diagnose.probe_margin``) and, where the speculative
side returned them too, names its own view of the same position. No pytest here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from pytest_ddtree.core import jsonmodel
from pytest_ddtree.core.settings import nats, nats_text
from pytest_ddtree.wire.completion import Completion, TokenLogprob

Kind = Literal["near-tie", "confident", "unknown"]

#: alternatives asked for at each position (vLLM's default ceiling, max_logprobs, is 20)
TOP_LOGPROBS = 20

NEAR_TIE_NOTE = "a numerical near-tie; batched verification can flip it"
CONFIDENT_NOTE = "the speculative path produced a token the target would not"


@dataclass(frozen=True)
class Margin:
    """The target's margin at the first differing position, and what it makes of it.

    ``gap`` is the target's log-probability of its own token minus that of the
    speculative path's token (nats); ``bound`` says it is only a lower bound (that
    token was not among the target's listed alternatives). ``top_two`` is the gap
    between the target's two best tokens there. ``position`` counts the target's
    generated tokens (from 0). ``reason`` says why it is ``unknown``.
    """

    kind: Kind
    threshold: float
    position: int | None = None
    target_token: str | None = None
    speculative_token: str | None = None
    gap: float | None = None
    top_two: float | None = None
    bound: bool = False
    speculative_view: str | None = None
    reason: str | None = None
    #: the target-only side answered the same request otherwise when asked again (with
    #: log-probabilities) before the divergence: the target alone is not reproducible there,
    #: so a parting at that point is no evidence against speculation
    target_unstable: bool = False

    def sentence(self, position: bool = True) -> str:
        """One sentence for a failure message or a warning (``position``: lead with the
        target's token position, for a text that does not name it already)."""
        at = f"at token {self.position}: " if position and self.position is not None else ""
        if self.kind == "unknown":
            return f"{at}the target's margin is unknown ({self.reason})"
        assert self.gap is not None
        tokens = f"{self.target_token!r} over {self.speculative_token or 'its token'!r}"
        if self.kind == "near-tie":
            runner_up = self.top_two is not None and math.isclose(self.gap, self.top_two)
            what = "top two were" if runner_up else "choice and the speculative token were"
            return (
                f"{at}the target-only server's {what} "
                f"{nats_text(abs(self.gap), self.threshold)} nats apart "
                f"({tokens}; {NEAR_TIE_NOTE})"
            )
        if math.isinf(self.gap):
            sure = "it gives the speculative token no probability"
        else:
            gap = nats_text(self.gap, self.threshold)
            sure = f"margin {'at least ' if self.bound else ''}{gap} nats"
        return f"{at}the target was sure ({sure}, {tokens}): {CONFIDENT_NOTE}"

    def figures(self) -> str:
        """The numbers behind the verdict, in one line."""
        if self.gap is None:
            return f"unknown ({self.reason})"
        if math.isinf(self.gap):
            value = "infinite (the target gives the speculative token no probability)"
        else:
            gap = nats_text(self.gap, self.threshold, 4)
            value = f"{'at least ' if self.bound else ''}{gap} nats"
        at = f" at target token {self.position}" if self.position is not None else ""
        two = f"; its top two {self.top_two:.4g} nats apart" if self.top_two is not None else ""
        tokens = f"({self.target_token!r} over {self.speculative_token!r})"
        return f"{value}{at} {tokens}{two}; near-tie at most {self.threshold:g}"

    def evidence(self) -> dict[str, Any]:
        """Evidence entries of a ``not-lossless`` violation or a near-tie warning."""
        out: dict[str, Any] = {"divergence": self.kind, "margin": self.figures()}
        if self.speculative_view:
            out["speculative side"] = self.speculative_view
        return out

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (infinite or unknown numbers are null)."""
        return jsonmodel.to_json(self)


def _nats(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, 6)


jsonmodel.register(
    Margin,
    threshold=jsonmodel.override(rename="threshold_nats"),
    gap=jsonmodel.override(rename="margin_nats", unstruct_hook=_nats),
    top_two=jsonmodel.override(rename="top_two_nats", unstruct_hook=_nats),
    bound=jsonmodel.override(rename="margin_is_lower_bound"),
    target_unstable=jsonmodel.override(omit_if_default=True),
    order=(
        *("kind", "threshold_nats", "position", "target_token", "speculative_token"),
        *("margin_nats", "margin_is_lower_bound"),
    ),
)


def _ends(entries: Sequence[TokenLogprob]) -> list[int]:
    out, acc = [], 0
    for e in entries:
        acc += len(e.data)
        out.append(acc)
    return out


def _locate(answer: Completion, reference: str, offset: int, who: str) -> tuple[int, int] | str:
    """(index of the token holding character ``offset`` of ``reference``, its first byte),
    or why it cannot be found in ``answer``'s log-probabilities."""
    entries = answer.logprobs
    if not answer.ok:
        return f"the {who}'s answer with log-probabilities failed ({answer.error})"
    if not entries:
        return f"the {who} returned no log-probabilities"
    if answer.text[: offset + 1] != reference[: offset + 1]:
        return (
            f"the {who}'s answer with log-probabilities is not the answer compared "
            "(it differs before the divergence)"
        )
    prefix = reference[:offset].encode("utf-8", "surrogatepass")
    joined = b"".join(e.data for e in entries)
    if not joined.startswith(prefix):
        return f"the {who}'s log-probabilities do not spell its answer"
    ends = _ends(entries)
    for i, end in enumerate(ends):
        if end > len(prefix):
            return i, ends[i - 1] if i else 0
    return f"the {who}'s log-probabilities end before the divergence"


def _speculative_token(
    entry: TokenLogprob, actual_rest: bytes, spec_entry: TokenLogprob | None
) -> tuple[str, float] | None:
    """The speculative path's token at this position among the target's alternatives."""
    if spec_entry is not None:
        for token, lp, data in entry.top:
            if data == spec_entry.data and data != entry.data:
                return token, lp
    found = [
        (len(data), token, lp)
        for token, lp, data in entry.top
        if data and data != entry.data and actual_rest.startswith(data)
    ]
    if not found:
        return None
    _, token, lp = max(found)
    return token, lp


def classify(
    target: Completion,
    reference: str,
    actual: str,
    offset: int,
    threshold: float,
    speculative: Completion | None = None,
) -> Margin:
    """The target's margin at character ``offset``, where ``actual`` leaves ``reference``.

    ``target`` is the target-only side's answer to the same request with
    log-probabilities; ``speculative`` the speculative side's, when asked for. A margin
    of at most ``threshold`` nats is a ``near-tie``; more is ``confident``; no margin
    that can be read is ``unknown`` (with the reason).
    """
    where = _locate(target, reference, offset, "target-only server")
    if isinstance(where, str):
        unstable = target.ok and target.text[: offset + 1] != reference[: offset + 1]
        return Margin("unknown", threshold, reason=where, target_unstable=unstable)
    index, start = where
    assert target.logprobs is not None
    entry = target.logprobs[index]
    top = entry.top
    top_two = nats(top[0][1] - top[1][1]) if len(top) >= 2 else None
    spec_entry: TokenLogprob | None = None
    view: str | None = None
    if speculative is not None:
        spot = _locate(speculative, actual, offset, "speculative server")
        if isinstance(spot, str):
            view = spot
        else:
            assert speculative.logprobs is not None
            spec_entry = speculative.logprobs[spot[0]]
            view = _view(spec_entry, spot[0])
    rest = actual.encode("utf-8", "surrogatepass")[start:]
    found = _speculative_token(entry, rest, spec_entry)
    base = Margin(
        "unknown",
        threshold,
        position=index,
        target_token=entry.token,
        speculative_token=spec_entry.token if spec_entry is not None else None,
        top_two=top_two,
        speculative_view=view,
    )
    if found is not None:
        token, lp = found
        gap = nats(entry.logprob - lp)
        kind: Kind = "near-tie" if abs(gap) <= threshold else "confident"
        return replace(base, kind=kind, speculative_token=token, gap=gap)
    # a token the server did not list has at most the smallest listed probability, and at
    # most what the listed ones leave: a list that holds all the mass leaves it none
    if top:
        left = 1.0 - sum(math.exp(alt[1]) for alt in top)
        ceiling = min(math.exp(top[-1][1]), left)
        floor = nats(entry.logprob - math.log(ceiling)) if ceiling > 1e-12 else math.inf
        if floor > threshold:
            return replace(base, kind="confident", gap=floor, bound=True)
    why = (
        f"the speculative token is not among the target's {len(top)} listed alternatives, "
        "and those leave room for it within the threshold"
        if top
        else "the target-only server listed no alternatives (top_logprobs)"
    )
    return replace(base, reason=why)


def _view(entry: TokenLogprob, index: int) -> str:
    """The speculative side's own view of the position, in one line."""
    chose = (
        f"the server chose {entry.token!r} at token {index} (log-probability {entry.logprob:.4g})"
    )
    if len(entry.top) >= 2:
        (a, la, _), (b, lb, _) = entry.top[0], entry.top[1]
        return (
            f"{chose}; its own top two: {a!r} {la:.4g}, {b!r} {lb:.4g} ({la - lb:.3g} nats apart)"
        )
    return chose


def probe_fields(api: str) -> dict[str, Any]:
    """The body fields that ask a server for log-probabilities in ``api``'s shape."""
    if api == "completions":
        return {"logprobs": TOP_LOGPROBS}
    return {"logprobs": True, "top_logprobs": TOP_LOGPROBS}
