"""Tokens into text (``_TextStream``): the reasoning apart, the content held back while
it could still be the start of a stop string; the acceptance histogram."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..model import ReferenceModel
from ..request import (
    Request,
)

if TYPE_CHECKING:
    from .engine import _Event, _Result


class _TextStream:
    """Tokens into text: the reasoning apart (inside ``<think>``), the content held back
    while it could still be the start of a stop string."""

    def __init__(
        self, model: ReferenceModel, req: Request, *, hide_reasoning: bool, faults: frozenset[str]
    ) -> None:
        self.model, self.req = model, req
        self.dec = model.incremental_decoder()
        self.reasoning_only = "reasoning-only" in faults
        self.in_think = hide_reasoning  # reasoning goes to reasoning_content
        self.strip_leading = False
        self.think_lead = False
        self.nl_pending = ""
        self.held = ""  # content held back while it could still be the start of a stop string

    def feed(
        self,
        toks: list[int],
        states: Any,
        ev: _Event,
        result: _Result,
        *,
        miss_inside: bool = False,
    ) -> int | None:
        """One round's tokens into ``ev``; when a stop string was hit, how many of them it
        took to complete it (the tokens after it are not the answer's), else None.

        ``miss_inside`` (the fault ``stop-missed-in-block``): a stop that completes before
        the round's last token is not seen, and the text goes on past it."""
        for k, tok in enumerate(toks):
            if self.req.logprobs is not None and not self.in_think and k < len(states):
                result.scored.append((tok, states[k]))
            if self.in_think:
                result.reasoning_tokens += 1
                self._think(tok, ev)
                continue
            piece = self.dec.decode(self.model.pieces[tok])
            if self.strip_leading:
                piece = piece.lstrip("\n")
                if not piece:
                    continue
                self.strip_leading = False
            if self.reasoning_only:
                ev.reasoning += piece
            elif self._content(piece, ev, result, blind=miss_inside and k < len(toks) - 1):
                return k + 1
        return None

    def _think(self, tok: int, ev: _Event) -> None:
        model = self.model
        if tok == model.think_open:
            self.think_lead = True
            return
        if tok == model.think_close:
            self.in_think = False
            self.strip_leading = True
            self.nl_pending = ""
            return
        piece = self.dec.decode(model.pieces[tok])
        if self.think_lead:
            piece = piece.lstrip("\n")
            if not piece:
                return
            self.think_lead = False
        # a newline right before </think> belongs to the markup, not the reasoning
        if self.nl_pending:
            ev.reasoning += self.nl_pending
            self.nl_pending = ""
        if piece.endswith("\n"):
            stripped = piece.rstrip("\n")
            self.nl_pending = piece[len(stripped) :]
            piece = stripped
        ev.reasoning += piece

    def _content(self, piece: str, ev: _Event, result: _Result, *, blind: bool = False) -> bool:
        stops = self.req.stop
        if not stops:
            ev.content += piece
            return False
        held = self.held + piece
        cut = _find_stop(held, stops)
        if cut is not None and blind:
            # the stop completed inside the block and was not seen: the text goes on
            ev.content += held
            self.held = ""
            return False
        if cut is not None:
            ev.content += held[:cut]
            result.stop_reason = _stop_at(held, cut, stops)
            self.held = ""
            return True
        keep = _partial_stop_len(held, stops)
        ev.content += held[: len(held) - keep]
        self.held = held[len(held) - keep :]
        return False


def _stop_at(text: str, cut: int, stops: tuple[str, ...]) -> str | None:
    """The stop string found at ``cut`` in ``text``."""
    for s in stops:
        if text.startswith(s, cut):
            return s
    return None


def acceptance_histogram(accepted: list[int], block_size: int) -> list[int]:
    """Rounds that accepted 0, 1, ... drafts, dense over ``0..block_size - 1`` (wider if
    a round accepted more)."""
    hist = [0] * max(block_size, max(accepted, default=0) + 1)
    for n in accepted:
        hist[n] += 1
    return hist


def _find_stop(text: str, stops: tuple[str, ...]) -> int | None:
    best: int | None = None
    for s in stops:
        i = text.find(s)
        if i >= 0 and (best is None or i < best):
            best = i
    return best


def _partial_stop_len(text: str, stops: tuple[str, ...]) -> int:
    keep = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:k]):
                keep = max(keep, k)
                break
    return keep
