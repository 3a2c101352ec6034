"""DDTree verification: the target checks a draft tree and commits the longest path it agrees
with plus its own bonus token, one :class:`ForwardPass` per target forward pass.

One loop, :func:`decode`, serves free decoding and decoding under a grammar. What differs is
held by the target passed to it: how the target chooses its token (:class:`FreeTarget`
alone, :class:`GrammarTarget` under a grammar), what committing a token does (a grammar
consumes it), and the verifier faults each kind of decoding shows.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from ._state import _ANSWER, _FORCED, _THINK, _free, _State, _unit

if TYPE_CHECKING:
    from .grammar import Constraint
    from .model import GenerationPlan, ReferenceModel, _Tree

# the draft-confidence fault accepts a drafted token the drafter gives at least this probability
_CONFIDENT = 0.5
# the hash slot of the drafter's draw of losing track (see ``FreeTarget.loses_track``)
_LOST_SLOT = -2


class ForwardPass(NamedTuple):
    """One target forward pass: the tokens it committed and the size of the verified tree.

    ``states`` holds the target's state before each committed token (for its
    log-probabilities, ``ReferenceModel.logprobs``).
    """

    tokens: list[int]
    nodes: int
    states: tuple[_State, ...] = ()


class FreeTarget:
    """The target choosing each token alone, and the verifier faults free decoding shows:
    ``near-tie`` (temperature 0), ``draft-confidence`` (sampling only) and ``lossy``."""

    def __init__(self, model: ReferenceModel, plan: GenerationPlan, budget: int | None) -> None:
        self.model, self.plan = model, plan
        self.lossy_armed = "lossy" in plan.faults and budget is not None and budget > 64
        # a verifier bug that only sampling shows: at temperature 0 nothing changes
        self.confident = (
            "draft-confidence" in plan.faults and budget is not None and plan.temperature > 0
        )
        # batched verification flipping a near-tie of the target once (temperature 0)
        self.tie_armed = "near-tie" in plan.faults and budget is not None and plan.temperature == 0
        self.liked: tuple[bool, ...] = ()

    def pick(self, s: _State) -> tuple[int, _State, _State, bool]:
        """The target's token in state ``s``, the state after it, the state its
        log-probability is read in, and whether a grammar holds the token (none here)."""
        tok, s2 = self.model.step(self.plan, s)
        return tok, s2, s, False

    def commit(self, tok: int, live: bool) -> None:
        """``tok`` is committed (``live``: a grammar holds it); nothing to do here."""

    def new_tree(self, c2: int, c3: int, block_size: int) -> None:
        """A draft tree is drafted from context ``(c2, c3)``."""
        self.liked = self._liked(c2, c3, block_size) if self.confident else ()

    def verified(self, s: _State, s2: _State, tok: int, done: int) -> tuple[int, _State]:
        """The target's token as the verification sees it, ``done`` tokens into the answer:
        the near-tie fault flips one near-tie for the runner-up."""
        if self.tie_armed and done >= 3:
            other = self.model.near_tie(self.plan, s, s2, tok)
            if other is not None:
                self.tie_armed = False
                return other, self.model.advance(self.plan, s, other)
        return tok, s2

    def trusts_draft(self, depth: int, s: _State, s2: _State, drafted: int, tok: int) -> bool:
        """The draft-confidence bug: the drafter liked its token, so it stands for the
        target's sample."""
        return depth < len(self.liked) and self.liked[depth] and _free(s, s2, drafted, tok)

    def slips(self, s: _State, drafted: int, tok: int, live: bool, done: int) -> bool:
        """Where the target's token is not in the tree, the lossy bug commits once the
        drafter's own token, one the target gives no probability."""
        if (
            self.lossy_armed
            and done >= 10
            and tok != self.model.eos
            and self.model.impossible(self.plan, s, drafted)
        ):
            self.lossy_armed = False
            return True
        return False

    def loses_track(self, s: _State, depth: int) -> bool:
        """Whether the drafter, after a long prompt, lost track at ``depth`` of the tree in
        state ``s``: its token there is rejected though the target agrees (a fixed draw,
        kept with ``plan.draft_keep``; the text is the target's either way)."""
        keep = self.plan.draft_keep
        return keep < 1.0 and _unit(self.plan.key, s[0], depth, _LOST_SLOT) >= keep

    def _liked(self, c2: int, c3: int, block_size: int) -> tuple[bool, ...]:
        """Per draft depth: does the drafter give its top token at least ``_CONFIDENT``?"""
        block = self.model.draft_block(c2, c3, block_size - 1)[: block_size - 1]
        return tuple(bool(toks) and math.exp(lps[0]) >= _CONFIDENT for toks, lps in block)


class GrammarTarget(FreeTarget):
    """The target under a grammar (``Constraint.choose``): a drafted token is accepted only
    when it is the grammar's choice. ``skip_above`` (the grammar-skip fault) accepts once,
    above that budget, a drafted token the grammar forbids."""

    def __init__(
        self,
        model: ReferenceModel,
        plan: GenerationPlan,
        grammar: Constraint,
        budget: int | None,
        skip_above: int | None,
    ) -> None:
        # the free-decoding faults are not armed under a grammar
        super().__init__(model, plan, None)
        self.grammar = grammar
        self.skip_armed = skip_above is not None and budget is not None and budget > skip_above

    def pick(self, s: _State) -> tuple[int, _State, _State, bool]:
        """The target's next token under the grammar, the state after it, the state its
        log-probability is read in (``s``, or, where the grammar overrode the target, ``s``
        marked as a rule's position: the token is certain, as a forced token is), and whether
        the grammar holds the token (reasoning is free: engines constrain the answer)."""
        model, plan = self.model, self.plan
        tok, s2 = model.step(plan, s)
        phase = s[5]
        if phase == _THINK or (phase == _FORCED and s[8] != _ANSWER):
            return tok, s2, s, False
        choice = self.grammar.choose(tok, lambda: model.ranked(plan, s))
        if choice == tok:
            return tok, s2, s, True
        ruled = (*s[:5], _FORCED, *s[6:])
        if choice == model.eos:
            return choice, s, ruled, True
        return choice, model.advance(plan, s, choice), ruled, True

    def commit(self, tok: int, live: bool) -> None:
        """The grammar consumes a token it holds."""
        if live:
            self.grammar.consume(tok)

    def slips(self, s: _State, drafted: int, tok: int, live: bool, done: int) -> bool:
        """The grammar-skip bug: a drafted token the grammar forbids is accepted unchecked."""
        if self.skip_armed and live and not self.grammar.allows(drafted):
            self.skip_armed = False
            return True
        return False


def decode(
    model: ReferenceModel,
    plan: GenerationPlan,
    max_tokens: int,
    budget: int | None,
    block_size: int,
    target: FreeTarget,
) -> Iterator[ForwardPass]:
    """Decode up to ``max_tokens`` tokens, one :class:`ForwardPass` per target forward pass
    (``budget=None``: plain target decoding, one token a pass)."""
    eos = model.eos
    s = model.initial_state(plan)
    tok, s, read, live = target.pick(s)
    target.commit(tok, live)
    yield ForwardPass([tok], 0, (read,))
    if tok == eos or max_tokens <= 1:
        return
    n = 1
    c2, c3 = model.start[2], tok
    while n < max_tokens:
        if budget is None:
            tok, s, read, live = target.pick(s)
            target.commit(tok, live)
            n += 1
            yield ForwardPass([tok], 0, (read,))
            if tok == eos:
                return
            continue
        tree = model.build_tree(c2, c3, budget, block_size)
        target.new_tree(c2, c3, block_size)
        out, states, s = _verify(model, plan, tree, s, n, target)
        n += len(out)
        yield ForwardPass(out, tree.nodes, tuple(states))
        if out[-1] == eos:
            return
        if len(out) >= 2:
            c2, c3 = out[-2], out[-1]
        else:
            c2, c3 = c3, out[-1]


def _verify(
    model: ReferenceModel,
    plan: GenerationPlan,
    tree: _Tree,
    s: _State,
    done: int,
    target: FreeTarget,
) -> tuple[list[int], list[_State], _State]:
    """One forward pass over ``tree`` from state ``s``, ``done`` tokens into the answer: the
    tokens committed (the target's bonus token last), the state before each, the state after."""
    children = tree.children
    node = 0
    out: list[int] = []
    states: list[_State] = []
    while True:
        tok, s2, read, live = target.pick(s)
        tok, s2 = target.verified(s, s2, tok, done + len(out))
        fc = tree.first_child[node]
        child = children.get((node, tok))
        if fc > 0 and (
            target.trusts_draft(len(out), s, s2, tree.tokens[fc], tok)
            or (child is None and target.slips(s, tree.tokens[fc], tok, live, done + len(out)))
        ):
            # a faulty verifier commits the drafted token, not the target's
            drafted = tree.tokens[fc]
            out.append(drafted)
            states.append(s)
            target.commit(drafted, True)
            s = model.advance(plan, s, drafted)
            node = fc
            continue
        if child is None or target.loses_track(s, len(out)):
            break
        out.append(tok)
        states.append(read)
        target.commit(tok, live)
        s = s2
        node = child
    out.append(tok)  # the target's bonus token
    states.append(read)
    target.commit(tok, live)
    return out, states, s2
