"""The generation engine (``_Engine``): plans, rounds, simulated cost, faults, and the
``/metrics`` counters (``_Metrics``)."""

from __future__ import annotations

import math
import random
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)

from ..cost import Accelerator, CostModel, jitter_factor
from ..faults import SPECULATION_FAULTS, TEMPLATE_FAULTS, parse_faults
from ..model import ForwardPass, GenerationPlan, get_model
from ..prefix_cache import Prefill, PrefixCache
from ..request import (
    Request,
)
from .options import ServerOptions
from .text_stream import _TextStream

_MODEL_FAULTS = frozenset(
    {"degenerate", "lossy", "near-tie", "draft-confidence"}
)  # applied inside the model itself
#: the grammar-skip fault strikes above this budget (as the lossy fault does)
_GRAMMAR_SKIP_ABOVE = 64

#: the garbling faults corrupt one committed token in every ``_GARBLE_EVERY``, from the
#: ``_GARBLE_AT``-th of the answer on (a token the target gives no probability, in place of its
#: own: the output reads as prose with wrong words in it, which no check of one answer sees)
_GARBLE_EVERY, _GARBLE_AT = 8, 3


class _DraftView(NamedTuple):
    """Where the ``logprobs-draft`` fault reads an accepted draft token's log-probability:
    the drafter's block after context (``c2``, ``c3``), at draft position ``depth``."""

    c2: int
    c3: int
    depth: int


@dataclass
class _Event:
    """One unit of output: text deltas from one round (or the end of generation)."""

    content: str = ""
    reasoning: str = ""
    tokens: int = 0  # the tokens the round committed


@dataclass
class _Result:
    prompt_tokens: int = 0
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    finish_reason: str = "length"
    # what ended the answer, as vLLM's ``stop_reason``: the stop string, the id of a stop
    # token, or None (the model's own end-of-turn, or the length limit)
    stop_reason: str | int | None = None
    cycles: int = 0
    # drafts accepted in each round that committed output (the bonus token not counted)
    accepted: list[int] = field(default_factory=list)
    tree_budget: int | None = None
    first_round_end: float = 0.0
    end: float = 0.0
    decode_tokens: int = 0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    #: (token, the target's state before it) of every content token, when log-probabilities
    #: were asked for
    scored: list[tuple[int, Any]] = field(default_factory=list)
    plan: GenerationPlan | None = None
    #: the prompt's prefill: how much of it the prefix cache held
    prefill: Prefill | None = None
    slot: int = 0  # handle on the shared accelerator while generating
    received: float = 0.0  # when the request arrived (perf_counter)
    first_content_sent: float | None = None  # when its first content chunk was written


class _Metrics:
    """The ``/metrics`` page under vLLM's names, counted from the server's own rounds.

    A drafted round is one verification step (``num_drafts``) of ``block_size - 1``
    draft tokens; the tokens it commits beyond the target's bonus token are the
    accepted ones, at positions 0, 1, ... of the draft. These are the counts the
    ``vllm`` statistics dialect reports per request. There is no queue, so
    ``num_requests_waiting`` stays 0.
    """

    def __init__(self, model_id: str) -> None:
        self.registry = CollectorRegistry()
        reg, labels = self.registry, ["model_name"]
        self.model = model_id
        self.drafts = Counter(
            "vllm:spec_decode_num_drafts", "Verification steps", labels, registry=reg
        )
        self.draft_tokens = Counter(
            "vllm:spec_decode_num_draft_tokens", "Draft tokens", labels, registry=reg
        )
        self.accepted = Counter(
            "vllm:spec_decode_num_accepted_tokens", "Accepted draft tokens", labels, registry=reg
        )
        self.per_pos = Counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted draft tokens by position in the draft",
            ["model_name", "position"],
            registry=reg,
        )
        self.success = Counter(
            "vllm:request_success",
            "Finished requests",
            ["model_name", "finished_reason"],
            registry=reg,
        )
        self.running = Gauge(
            "vllm:num_requests_running", "Requests generating", labels, registry=reg
        )
        self.waiting = Gauge("vllm:num_requests_waiting", "Requests queued", labels, registry=reg)
        for series in (self.drafts, self.draft_tokens, self.accepted, self.running, self.waiting):
            series.labels(model_id)  # present at 0 from the start, as vLLM's are

    def drafted_round(self, draft_len: int, committed: int) -> None:
        """One verification step of ``draft_len`` draft tokens that committed ``committed``."""
        accepted = max(committed - 1, 0)
        self.drafts.labels(self.model).inc()
        self.draft_tokens.labels(self.model).inc(draft_len)
        self.accepted.labels(self.model).inc(accepted)
        for pos in range(accepted):
            self.per_pos.labels(self.model, str(pos)).inc()

    def page(self) -> bytes:
        """The Prometheus text exposition."""
        return bytes(generate_latest(self.registry))


class _Engine:
    """Request-independent state: the model, options, counters and the drafter's cache."""

    def __init__(self, options: ServerOptions, stop_event: threading.Event) -> None:
        self.options = options
        self.model = get_model()
        self.stop_event = stop_event
        self.server_faults = parse_faults(options.faults, "server options")
        self._lock = threading.Lock()
        self._counter = 0
        self._generations = 0
        self._fault_counters: dict[str, int] = {}
        self._last_prompt: int | None = None
        self._last_tail: tuple[int, int, int] | None = None
        self._rng = random.Random(options.seed)
        # concurrent requests share one simulated accelerator (a batch on a GPU)
        self.accelerator = Accelerator()
        # prompts prefilled before, as a real engine's automatic prefix caching keeps them
        self.prefix_cache = PrefixCache()
        self.metrics = _Metrics(options.model_id)

    def cost_now(self) -> CostModel:
        """The cost model of the generation request starting now (``slowdown_after`` and
        ``jitter`` applied)."""
        opts = self.options
        with self._lock:
            self._generations += 1
            n = self._generations
        factor = jitter_factor(opts.jitter, opts.seed, n)
        if opts.slowdown_after is not None and n > opts.slowdown_after:
            factor *= opts.slowdown_factor
        if factor == 1.0:
            return opts.cost
        return replace(opts.cost, slowdown=opts.cost.slowdown * factor)

    def next_id(self) -> int:
        with self._lock:
            self._counter += 1
            return self._counter

    def count_fault(self, name: str) -> int:
        with self._lock:
            self._fault_counters[name] = self._fault_counters.get(name, 0) + 1
            return self._fault_counters[name]

    def effective_faults(self, header: str | None) -> frozenset[str]:
        faults = set(self.server_faults)
        if header:
            faults |= parse_faults(header, "header X-DDTree-Fault")
        if self.options.target_only:
            faults -= SPECULATION_FAULTS
        return frozenset(faults)

    def make_plan(self, req: Request, faults: frozenset[str]) -> GenerationPlan:
        if "temperature-ignored" in faults:
            req = replace(req, temperature=0.0, seed=None)
        elif "seed-ignored" in faults:
            req = replace(req, seed=None)
        salt = 0
        if req.temperature > 0 and req.seed is None:
            with self._lock:
                salt = self._rng.getrandbits(32)
        if "nondeterministic" in faults:
            salt ^= (self.next_id() * 2654435761) & 0xFFFFFFFF
        plan = self.model.plan(
            req.prompt_text,
            req.rendered,
            think=req.think,
            temperature=req.temperature,
            top_p=req.top_p,
            seed=0 if "seed-dropped" in faults else req.seed,
            faults=frozenset(f for f in faults if f in TEMPLATE_FAULTS or f in _MODEL_FAULTS),
            salt=salt,
        )
        key = zlib.crc32(req.rendered.encode())
        with self._lock:
            stale = self._last_tail if self._last_prompt not in (None, key) else None
            self._last_prompt = key
        if "state-leak" in faults and stale is not None:
            plan = replace(plan, start_context=stale)
        return plan

    def remember_tail(self, tail: list[int]) -> None:
        if len(tail) >= 3:
            with self._lock:
                self._last_tail = (tail[-3], tail[-2], tail[-1])

    def run(self, req: Request, faults: frozenset[str], result: _Result) -> Iterator[_Event]:
        """Generate on the shared accelerator; yield text per round (see ``_generate``)."""
        result.slot = self.accelerator.join()
        running = self.metrics.running.labels(self.metrics.model)
        running.inc()
        try:
            yield from self._generate(req, faults, result)
            self.metrics.success.labels(self.metrics.model, result.finish_reason).inc()
        finally:
            running.dec()
            self.accelerator.leave(result.slot)

    def _generate(self, req: Request, faults: frozenset[str], result: _Result) -> Iterator[_Event]:
        """Generate, sleeping the simulated cost of each round; yield text per round."""
        model = self.model
        prompt_ids = model.encode(req.rendered)
        result.prompt_tokens = len(prompt_ids)
        keep = self.options.draft_keep(result.prompt_tokens)
        plan = result.plan = replace(self.make_plan(req, faults), draft_keep=keep)
        budget = result.tree_budget = self._budget(req, faults)
        cost = self.cost_now()
        result.prefill = self.prefix_cache.prefill(prompt_ids)
        text = _TextStream(model, req, hide_reasoning=plan.think and req.think, faults=faults)
        produced = 0
        tail: list[int] = []
        # absolute deadlines: an oversleep in one round is taken out of the next one, so the
        # observed time is the simulated time (plus at most one wake-up delay)
        deadline = time.perf_counter()
        for i, rd in enumerate(self._passes(req, faults, plan, budget)):
            target = self._round_seconds(i, rd.nodes, budget, cost, result)
            toks, finished_eos = _committed(rd.tokens, model.eos, req.max_tokens - produced)
            if i > 0 and self._garbles(faults, budget, result):
                toks = self._garble(plan, toks, rd.states, produced)
            states: tuple[Any, ...] = rd.states
            if "logprobs-draft" in faults and budget is not None and i > 0:
                states = self._draft_views(states, len(rd.tokens), tail)
            ev = _Event()
            stop_at = text.feed(
                toks, states, ev, result, miss_inside="stop-missed-in-block" in faults
            )
            stop_hit = stop_at is not None
            toks, past = self._cut_at_stop(toks, stop_at, faults, budget)
            produced += len(toks)
            self._count_round(result, toks, drafted=i > 0 and budget is not None)
            tail.extend(toks)
            deadline, now = self._pace(deadline + target)
            if i == 0:
                result.first_round_end = now
            else:
                result.decode_tokens += len(toks)
            ev.tokens = len(toks)
            result.completion_tokens = produced + past
            if ev.content:
                result.content.append(ev.content)
            if ev.reasoning:
                result.reasoning.append(ev.reasoning)
            done = self._finished(req, faults, result, ev, text, stop_hit, finished_eos, produced)
            yield ev
            if done or self.stop_event.is_set():
                break
        if text.held:
            result.content.append(text.held)
            yield _Event(content=text.held)
        if "overrun" in faults and budget is not None:
            extra = self._overrun(tail, result)
            if extra:
                yield _Event(content=extra)
        result.end = time.perf_counter()
        self.remember_tail(tail)

    def _cut_at_stop(
        self, toks: list[int], stop_at: int | None, faults: frozenset[str], budget: int | None
    ) -> tuple[list[int], int]:
        """The round's tokens up to the stop (those after it are not the answer's: not
        counted), and how many positions past it the usage-past-stop fault charges."""
        if stop_at is None:
            return toks, 0
        past = 0
        if "usage-past-stop" in faults and budget is not None:
            # the fault charges every position the pass verified for the block
            past = max(len(toks), self.options.block_size) - stop_at
        return toks[:stop_at], past

    def _count_round(self, result: _Result, toks: list[int], *, drafted: bool) -> None:
        """A round's committed tokens in the statistics (``drafted``: a pass over a tree)."""
        if toks:  # a round that only emits the end-of-turn token commits no output
            result.cycles += 1
            result.accepted.append(len(toks) - 1)
            if drafted:
                self.metrics.drafted_round(self.options.block_size - 1, len(toks))

    def _finished(
        self,
        req: Request,
        faults: frozenset[str],
        result: _Result,
        ev: _Event,
        text: _TextStream,
        stop_hit: bool,
        finished_eos: bool,
        produced: int,
    ) -> bool:
        """Whether the answer ends with this round, its finish reason recorded if so (at
        the length limit, the text held back goes out with the round)."""
        if stop_hit or finished_eos:
            result.finish_reason = "stop"
            if finished_eos and not stop_hit and "early-eos" in faults:
                # the fault imitates a stop list that holds the end-of-turn id: vLLM
                # names a stop token from the request's list by its id
                result.stop_reason = self.model.eos
            return True
        if produced >= req.max_tokens:
            result.finish_reason = "length"
            if text.held:
                ev.content += text.held
                result.content.append(text.held)
                text.held = ""
            return True
        return False

    def _passes(
        self, req: Request, faults: frozenset[str], plan: GenerationPlan, budget: int | None
    ) -> Iterator[ForwardPass]:
        """The model's forward passes for ``req``: under its grammar (a tool's parameters or
        the response format) if it has one."""
        model = self.model
        grammar = req.call.parameters if req.call is not None else req.response_format
        if grammar is not None and req.call is None and "schema-ignored" in faults:
            grammar = None
        if grammar is None:
            return model.generate(plan, req.max_tokens, budget, self.options.block_size)
        from ..grammar import Constraint  # only a request with a grammar loads llguidance

        return model.generate_constrained(
            plan,
            req.max_tokens,
            budget,
            Constraint(grammar, model),
            self.options.block_size,
            skip_above=_GRAMMAR_SKIP_ABOVE if "grammar-skip" in faults else None,
        )

    def _draft_views(
        self, states: tuple[Any, ...], committed: int, tail: list[int]
    ) -> tuple[Any, ...]:
        """The ``logprobs-draft`` fault: each accepted draft token of a round (every one but
        the target's bonus token, the last) is scored from the drafter's block, drafted after
        the round's context (the last two committed tokens), at its draft position."""
        c2, c3 = (tail[-2], tail[-1]) if len(tail) >= 2 else (self.model.start[2], tail[-1])
        return tuple(
            _DraftView(c2, c3, k) if k < committed - 1 else state for k, state in enumerate(states)
        )

    def _budget(self, req: Request, faults: frozenset[str]) -> int | None:
        """The budget the request is served at (None: no tree, the target alone)."""
        if self.options.target_only:
            return None
        if req.tree_budget is None or "budget-ignored" in faults:
            return self.options.default_tree_budget
        return req.tree_budget

    def _round_seconds(
        self, i: int, nodes: int, budget: int | None, cost: CostModel, result: _Result
    ) -> float:
        """The simulated time of round ``i``: the prefill, then draft and verification (each
        verified position, the tree's nodes and the target's own token, attending to the
        prompt: ``CostModel.context_seconds``; this request's own, not the batch's)."""
        if i == 0:
            self.accelerator.step(result.slot, 0)
            prefill = result.prefill
            computed = result.prompt_tokens if prefill is None else prefill.computed_tokens
            return cost.prefill_seconds(computed)
        attention = cost.context_seconds(nodes + 1, result.prompt_tokens)
        if budget is None:
            # one token, no tree; the pass still carries the trees of the batch
            return cost.verify_seconds(self.accelerator.step(result.slot, 0)) + attention
        # the verification pass covers every tree in flight, this one included
        verify = cost.verify_seconds(self.accelerator.step(result.slot, nodes)) + attention
        result.draft_seconds += cost.draft_seconds()
        result.verify_seconds += verify
        return cost.draft_seconds() + verify

    def _garbles(self, faults: frozenset[str], budget: int | None, result: _Result) -> bool:
        """True when a garbling fault strikes this decode round (speculative decoding only).

        ``cold-garble``: the prompt was not all in the prefix cache (a cold prefill);
        ``batch-garble``: another request is in flight on the accelerator beside this one.
        """
        if budget is None or not faults & {"cold-garble", "batch-garble"}:
            return False
        if "cold-garble" in faults and result.prefill is not None and result.prefill.cold:
            return True
        return "batch-garble" in faults and self.accelerator.in_flight > 1

    def _garble(
        self, plan: GenerationPlan, toks: list[int], states: tuple[Any, ...], produced: int
    ) -> list[int]:
        """``toks`` with a token the target gives no probability at every ``_GARBLE_EVERY``-th
        position of the answer (from ``_GARBLE_AT``); the decoding goes on from the target's
        own token, as a corrupted logit row leaves the cache intact."""
        out = list(toks)
        for k in range(min(len(toks), len(states))):
            if (produced + k) % _GARBLE_EVERY == _GARBLE_AT:
                junk = self.model.foreign_token(plan, states[k])
                if junk is not None:
                    out[k] = junk
        return out

    def _pace(self, deadline: float) -> tuple[float, float]:
        """Sleep until ``deadline`` when latency is simulated; (the next deadline base, now)."""
        latency = self.options.simulated_latency
        now = time.perf_counter()
        if latency and deadline > now:
            time.sleep(deadline - now)
            now = time.perf_counter()
        elif not latency or now - deadline > 0.05:
            deadline = now  # behind schedule (a slow reader): do not bank the debt
        return deadline, now

    def logprob_entries(
        self, res: _Result, top: int, chat: bool, *, zero: bool = False
    ) -> dict[str, Any] | None:
        """``choices[0].logprobs`` of an answer, in the chat or the text-completion shape;
        ``zero`` (the ``logprobs-zero`` fault) writes every value as 0.0."""
        if res.plan is None:
            return None
        model = self.model
        entries = []
        for tok, state in res.scored:
            if isinstance(state, _DraftView):  # the logprobs-draft fault: the drafter's view
                block = model.draft_block(state.c2, state.c3, self.options.block_size - 1)
                toks, lps = block[state.depth]
                lp = dict(zip(toks, lps, strict=True)).get(tok, -math.inf)
                best = list(zip(toks, lps, strict=True))[: max(top, 1)]
            else:
                lp, best = model.logprobs(res.plan, state, tok, max(top, 1))

            def item(t: int, value: float) -> dict[str, Any]:
                raw = model.pieces[t]
                # minus infinity as vLLM writes it (JSON has no infinity)
                lp = value if math.isfinite(value) else -9999.0
                if zero:
                    lp = 0.0
                return {"token": raw.decode("utf-8", "replace"), "logprob": lp, "bytes": list(raw)}

            entries.append({**item(tok, lp), "top_logprobs": [item(t, v) for t, v in best[:top]]})
        if chat:
            return {"content": entries}
        return {
            "tokens": [e["token"] for e in entries],
            "token_logprobs": [e["logprob"] for e in entries],
            "top_logprobs": [
                {t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries
            ],
        }

    def _overrun(self, tail: list[int], result: _Result) -> str:
        model = self.model
        c2, c3 = (tail[-2], tail[-1]) if len(tail) >= 2 else (model.start[2], model.start[2])
        block = model.draft_block(c2, c3, self.options.block_size - 1)
        extra = [pos[0][0] for pos in block[: self.options.block_size - 1] if pos[0]]
        text = model.decode(extra)
        if result.finish_reason == "stop":
            text = "<|im_end|>" + text
        result.completion_tokens += len(extra)
        result.content.append(text)
        return text


def _committed(toks: list[int], eos: int, room: int) -> tuple[list[int], bool]:
    """A round's tokens up to the end token and within ``room``; whether it ended on it."""
    finished_eos = False
    if eos in toks:
        at = toks.index(eos)
        toks = toks[:at]
        # a real server stops at max_tokens before it ever samples the end token
        finished_eos = at < room
    return toks[:room], finished_eos
