"""OpenAI-compatible HTTP front end of the reference DDTree server (standard library only)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import select
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)

from .cost import Accelerator, CostModel, check_jitter, jitter_factor
from .faults import SPECULATION_FAULTS, TEMPLATE_FAULTS, parse_faults
from .model import MODEL_ID, GenerationPlan, ReferenceModel, get_model
from .request import (
    MAX_MODEL_LEN,
    MAX_TREE_BUDGET,
    Request,
    RequestError,
    error_body,
    parse_request,
)

__all__ = [
    "ReferenceServer",
    "ServerOptions",
    "spawn_reference_server",
    "start_reference_server",
]

MAX_BODY_BYTES = 1 << 20
STATS_DIALECTS = ("ddtree", "vllm", "omlx", "none")
_URL_PREFIX = "ddtree reference server listening on "
_MID_STREAM = 2  # content chunks sent before a mid-stream fault strikes
_MODEL_FAULTS = frozenset(
    {"degenerate", "lossy", "near-tie", "draft-confidence"}
)  # applied inside the model itself


@dataclass(frozen=True)
class ServerOptions:
    """Every option of the reference server; the command line maps onto these fields.

    ``host``/``port``: where to listen (port 0 picks a free one). ``target_only``: plain
    target decoding, the baseline (no drafter; speculation faults are ignored).
    ``faults``: names from :data:`FAULTS` applied to every request. ``simulated_latency``:
    wait the cost model's time per round (off for fast tests). ``default_tree_budget``:
    budget of requests without ``tree_budget``. ``block_size``: drafter block (tree depth is
    ``block_size - 1``). ``cost``: the simulated accelerator. ``seed``: seeds sampling of
    requests with ``temperature > 0`` and no ``seed``. ``stats_dialect``: where statistics
    are reported (``ddtree``, ``vllm``, ``omlx`` or ``none``). ``hang_seconds``: how long the
    ``hang`` fault stalls. ``model_id``: the model id served. ``slowdown_after``: after
    this many generation requests, every simulated cost is multiplied by
    ``slowdown_factor`` (a server that degrades mid-run: throttling, another tenant).
    ``jitter``: the coefficient of variation of a seeded, multiplicative noise on each
    generation request's simulated costs (0: none; see :func:`~.cost.jitter_factor`).
    """

    host: str = "127.0.0.1"
    port: int = 0
    target_only: bool = False
    faults: tuple[str, ...] = ()
    simulated_latency: bool = True
    default_tree_budget: int = 64
    block_size: int = 16
    cost: CostModel = field(default_factory=CostModel)
    seed: int = 0
    stats_dialect: str = "ddtree"
    hang_seconds: float = 600.0
    model_id: str = MODEL_ID
    slowdown_after: int | None = None
    slowdown_factor: float = 3.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        _check_slowdown_after(self.slowdown_after, self.slowdown_factor)
        object.__setattr__(self, "jitter", check_jitter(self.jitter))
        if not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise ValueError(f"port: must be an integer in 0..65535, got {self.port!r}")
        b = self.default_tree_budget
        if not isinstance(b, int) or isinstance(b, bool) or not 1 <= b <= MAX_TREE_BUDGET:
            raise ValueError(f"default_tree_budget: must be in 1..{MAX_TREE_BUDGET}, got {b!r}")
        bs = self.block_size
        if not isinstance(bs, int) or isinstance(bs, bool) or not 2 <= bs <= 64:
            raise ValueError(f"block_size: must be an integer in 2..64, got {bs!r}")
        if self.stats_dialect not in STATS_DIALECTS:
            raise ValueError(
                f"stats_dialect: must be one of {', '.join(STATS_DIALECTS)}, "
                f"got {self.stats_dialect!r}"
            )
        hs = self.hang_seconds
        if not isinstance(hs, (int, float)) or not math.isfinite(hs) or hs < 0:
            raise ValueError(f"hang_seconds: must be a number >= 0, got {self.hang_seconds!r}")
        if not isinstance(self.cost, CostModel):
            raise ValueError(f"cost: must be a CostModel, got {type(self.cost).__name__}")
        raw: Any = self.faults
        faults = (raw,) if isinstance(raw, str) else tuple(raw)
        parse_faults(faults, "faults")
        object.__setattr__(self, "faults", faults)


def _check_slowdown_after(after: object, factor: object) -> None:
    if after is not None and (not isinstance(after, int) or isinstance(after, bool) or after < 0):
        raise ValueError(f"slowdown_after: must be an integer >= 0, got {after!r}")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)):
        raise ValueError(f"slowdown_factor: must be a number > 0, got {factor!r}")
    if not math.isfinite(factor) or factor <= 0:
        raise ValueError(f"slowdown_factor: must be a number > 0, got {factor!r}")


# ------------------------------------------------------------------ generation


@dataclass
class _Event:
    """One unit of output: text deltas from one round (or the end of generation)."""

    content: str = ""
    reasoning: str = ""


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
        plan = result.plan = self.make_plan(req, faults)
        budget = result.tree_budget = self._budget(req, faults)
        cost = self.cost_now()
        result.prompt_tokens = len(model.encode(req.rendered))
        text = _TextStream(model, req, hide_reasoning=plan.think and req.think, faults=faults)
        produced = 0
        tail: list[int] = []
        # absolute deadlines: an oversleep in one round is taken out of the next one, so the
        # observed time is the simulated time (plus at most one wake-up delay)
        deadline = time.perf_counter()
        gen = model.generate(plan, req.max_tokens, budget, self.options.block_size)
        for i, rd in enumerate(gen):
            target = self._round_seconds(i, rd.nodes, budget, cost, result)
            toks, finished_eos = _committed(rd.tokens, model.eos, req.max_tokens - produced)
            produced += len(toks)
            if toks:  # a round that only emits the end-of-turn token commits no output
                result.cycles += 1
                result.accepted.append(len(toks) - 1)
                if i > 0 and budget is not None:
                    self.metrics.drafted_round(self.options.block_size - 1, len(toks))
            tail.extend(toks)
            deadline, now = self._pace(deadline + target)
            if i == 0:
                result.first_round_end = now
            else:
                result.decode_tokens += len(toks)
            ev = _Event()
            stop_hit = text.feed(toks, rd.states, ev, result)
            result.completion_tokens = produced
            if ev.content:
                result.content.append(ev.content)
            if ev.reasoning:
                result.reasoning.append(ev.reasoning)
            if stop_hit or finished_eos:
                result.finish_reason = "stop"
                if finished_eos and not stop_hit and "early-eos" in faults:
                    # the fault imitates a stop list that holds the end-of-turn id: vLLM
                    # names a stop token from the request's list by its id
                    result.stop_reason = model.eos
                yield ev
                break
            if produced >= req.max_tokens:
                result.finish_reason = "length"
                if text.held:
                    ev.content += text.held
                    result.content.append(text.held)
                    text.held = ""
                yield ev
                break
            yield ev
            if self.stop_event.is_set():
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
        """The simulated time of round ``i``: the prefill, then draft and verification."""
        if i == 0:
            self.accelerator.step(result.slot, 0)
            return cost.prefill_seconds(result.prompt_tokens)
        if budget is None:
            # one token, no tree; the pass still carries the trees of the batch
            return cost.verify_seconds(self.accelerator.step(result.slot, 0))
        # the verification pass covers every tree in flight, this one included
        verify = cost.verify_seconds(self.accelerator.step(result.slot, nodes))
        result.draft_seconds += cost.draft_seconds()
        result.verify_seconds += verify
        return cost.draft_seconds() + verify

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

    def logprob_entries(self, res: _Result, top: int, chat: bool) -> dict[str, Any] | None:
        """``choices[0].logprobs`` of an answer, in the chat or the text-completion shape."""
        if res.plan is None:
            return None
        model = self.model
        entries = []
        for tok, state in res.scored:
            lp, best = model.logprobs(res.plan, state, tok, max(top, 1))

            def item(t: int, value: float) -> dict[str, Any]:
                raw = model.pieces[t]
                # minus infinity as vLLM writes it (JSON has no infinity)
                lp = value if math.isfinite(value) else -9999.0
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

    def feed(self, toks: list[int], states: Any, ev: _Event, result: _Result) -> bool:
        """One round's tokens into ``ev``; True when a stop string was hit."""
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
            elif self._content(piece, ev, result):
                return True
        return False

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

    def _content(self, piece: str, ev: _Event, result: _Result) -> bool:
        stops = self.req.stop
        if not stops:
            ev.content += piece
            return False
        held = self.held + piece
        cut = _find_stop(held, stops)
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


# ------------------------------------------------------------------ HTTP


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    engine: _Engine

    def __init__(self, addr: tuple[str, int], engine: _Engine) -> None:
        if ":" in addr[0]:
            self.address_family = socket.AF_INET6
        self.engine = engine
        self.active: set[socket.socket] = set()
        self.active_lock = threading.Lock()
        self.handler_threads: set[threading.Thread] = set()
        super().__init__(addr, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.active_lock:
            self.active.add(request)
        t = threading.Thread(
            target=self._serve_one,
            args=(request, client_address),
            daemon=True,
            name=f"ddtree-reference-request-{self.server_address[1]}",
        )
        with self.active_lock:
            self.handler_threads.add(t)
        t.start()

    def _serve_one(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            pass
        finally:
            with self.active_lock:
                self.active.discard(request)
                self.handler_threads.discard(threading.current_thread())
            self.shutdown_request(request)

    def close_connections(self) -> None:
        with self.active_lock:
            socks = list(self.active)
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ddtree-reference/0.1"
    server: _HTTPServer
    timeout = 120
    # one small write per decode round: Nagle's algorithm would batch them and distort timings
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        return

    def parse_request(self) -> bool:
        # the request line has just been read: the server's clock for this request starts here
        self._received = time.perf_counter()
        return super().parse_request()

    # routing ---------------------------------------------------------------

    # /models only under /v1, like the completion routes: a base URL without /v1 must
    # fail the start-up probe instead of failing every request later
    _GET: ClassVar[frozenset[str]] = frozenset(
        {"/health", "/v1/health", "/v1/models", "/version", "/metrics"}
    )
    _POST: ClassVar[frozenset[str]] = frozenset(
        {
            "/v1/chat/completions",
            "/v1/completions",
            "/tokenize",
            "/v1/tokenize",
            "/detokenize",
            "/v1/detokenize",
        }
    )

    def _route(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        if len(path) > 1:
            path = path.rstrip("/")
        try:
            if method == "GET" and path in self._GET:
                self._get(path)
            elif method == "POST" and path in self._POST:
                self._post(path)
            elif path in self._GET or path in self._POST:
                allow = "GET" if path in self._GET else "POST"
                self._drain()
                self._send_json(
                    405,
                    error_body(
                        405,
                        f"method {method} not allowed on {path}; use {allow}",
                        "method_not_allowed",
                    ),
                    {"Allow": allow},
                )
            else:
                self._drain()
                self._send_json(404, error_body(404, f"no route {method} {path}", "not_found"))
        except RequestError as e:
            self._send_json(e.status, error_body(e.status, e.message, e.code, e.param))
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            self.close_connection = True

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PUT(self) -> None:
        self._route("PUT")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    def do_PATCH(self) -> None:
        self._route("PATCH")

    def do_OPTIONS(self) -> None:
        self._route("OPTIONS")

    def do_HEAD(self) -> None:
        self._route("HEAD")

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Protocol-level errors (bad request line, unsupported method) as JSON too."""
        self.close_connection = True
        text = message or self.responses.get(code, ("error",))[0]
        body = error_body(code, text, "bad_request" if code < 500 else "server_error")
        self.send_response(code, message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD" and code >= 200 and code not in (204, 304):
            self.wfile.write(body)

    # plumbing --------------------------------------------------------------

    def _drain(self) -> None:
        length = self.headers.get("Content-Length")
        if length and length.isdigit() and int(length) <= MAX_BODY_BYTES:
            self.rfile.read(int(length))
        elif length:
            self.close_connection = True

    def _read_json(self) -> dict[str, Any]:
        length = self.headers.get("Content-Length")
        if length is None:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                self.close_connection = True
                raise RequestError(
                    411,
                    "chunked request bodies are not supported; send Content-Length",
                    "length_required",
                )
            length = "0"
        if not length.isdigit():
            self.close_connection = True
            raise RequestError(400, f"bad Content-Length {length!r}", "invalid_request")
        n = int(length)
        if n > MAX_BODY_BYTES:
            self.close_connection = True
            raise RequestError(
                413,
                f"request body of {n} bytes exceeds the limit of {MAX_BODY_BYTES} bytes",
                "request_too_large",
            )
        raw = self.rfile.read(n)
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise RequestError(400, f"request body is not valid JSON: {e}", "invalid_json") from e
        except RecursionError:
            raise RequestError(400, "request body is nested too deeply", "invalid_json") from None
        if not isinstance(body, dict):
            raise RequestError(400, "request body must be a JSON object", "invalid_type")
        return body

    def _send_metrics(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE_LATEST)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_json(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _sse(self, obj: Any) -> None:
        self._chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")

    # GET ------------------------------------------------------------------

    def _get(self, path: str) -> None:
        engine = self.server.engine
        if path == "/metrics":
            self._send_metrics(engine.metrics.page())
            return
        if path.endswith("health"):
            self._send_json(200, json.dumps({"status": "ok"}).encode())
            return
        if path == "/version":  # at the root, as vLLM serves it
            self._send_json(200, json.dumps({"version": self.server_version}).encode())
            return
        body = {
            "object": "list",
            "data": [
                {
                    "id": engine.options.model_id,
                    "object": "model",
                    "created": 1700000000,
                    "owned_by": "pytest-ddtree",
                    "max_model_len": MAX_MODEL_LEN,
                }
            ],
        }
        self._send_json(200, json.dumps(body).encode())

    # POST -----------------------------------------------------------------

    def _detokenize(self, body: dict[str, Any]) -> None:
        """vLLM's ``/detokenize``: ``{"tokens": [ids]}`` -> ``{"prompt": text}``."""
        ids = body.get("tokens")
        model = self.server.engine.model
        size = len(model.pieces)
        if not isinstance(ids, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < size for i in ids
        ):
            why = f"'tokens' must be a list of token ids in [0, {size})"
            raise RequestError(400, why, "invalid_type", "tokens")
        text = model.tokenizer.decode(ids, skip_special_tokens=False)
        self._send_json(200, json.dumps({"prompt": text}).encode())

    def _post(self, path: str) -> None:
        engine = self.server.engine
        body = self._read_json()
        if path.endswith("detokenize"):
            self._detokenize(body)
            return
        if path.endswith("tokenize"):
            prompt = body.get("prompt")
            if not isinstance(prompt, str):
                raise RequestError(400, "'prompt' must be a string", "invalid_type", "prompt")
            ids = engine.model.encode(prompt)
            self._send_json(
                200,
                json.dumps(
                    {"tokens": ids, "count": len(ids), "max_model_len": MAX_MODEL_LEN}
                ).encode(),
            )
            return
        chat = path.endswith("chat/completions")
        req = parse_request(body, chat, engine.options.model_id)
        try:
            faults = engine.effective_faults(self.headers.get("X-DDTree-Fault"))
        except ValueError as e:
            raise RequestError(400, str(e), "invalid_fault") from e
        if "intermittent-5xx" in faults and engine.count_fault("intermittent-5xx") % 2 == 0:
            raise RequestError(503, "service temporarily unavailable (injected)", "unavailable")
        if "stream-error-event" in faults and not req.stream:
            raise RequestError(500, "internal error during generation (injected)", "internal_error")
        if req.stream:
            self._stream(req, faults)
        else:
            self._complete(req, faults)

    def _usage(self, req: Request, res: _Result, faults: frozenset[str]) -> dict[str, Any]:
        prompt = res.prompt_tokens
        completion = res.completion_tokens
        total = prompt + completion
        if "usage-mismatch" in faults:
            completion = completion + max(24, completion // 2)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": total,
        }
        if req.think or res.reasoning_tokens:
            usage["completion_tokens_details"] = {"reasoning_tokens": res.reasoning_tokens}
        return usage

    def _stats(self, req: Request, res: _Result, faults: frozenset[str]) -> dict[str, Any]:
        decode_time = max(res.end - res.first_round_end, 1e-9)
        tps = res.decode_tokens / decode_time if res.decode_tokens else 0.0
        avg = res.completion_tokens / res.cycles if res.cycles else 0.0
        if "stats-inflated" in faults:
            tps *= 3.0
            avg = avg * 1.6 + 1.0
        stats: dict[str, Any] = {
            "tree_budget": res.tree_budget if res.tree_budget is not None else 0,
            "cycles": res.cycles,
            "avg_acceptance": round(avg, 4),
            "tok_per_sec": round(tps, 2),
            "block_size": self.server.engine.options.block_size,
            "acceptance_histogram": acceptance_histogram(
                res.accepted, self.server.engine.options.block_size
            ),
            "draft_ms": round(res.draft_seconds * 1000, 3),
            "verify_ms": round(res.verify_seconds * 1000, 3),
        }
        if res.first_content_sent is not None and res.received:
            # the server's own time to first content: request read to first content written
            stats["ttft_ms"] = round((res.first_content_sent - res.received) * 1000, 3)
        if "budget-ignored" in faults:
            del stats["tree_budget"]
        return stats

    def _dialect_fields(
        self, req: Request, res: _Result, faults: frozenset[str], usage: dict[str, Any]
    ) -> dict[str, Any]:
        """Top-level fields carrying the statistics (and usage) in the configured dialect."""
        dialect = self.server.engine.options.stats_dialect
        stats = self._stats(req, res, faults)
        if dialect == "ddtree":
            return {"ddtree_stats": stats}
        if dialect == "vllm":
            return {"metrics": {"speculative_decoding": self._vllm_spec(res, faults)}}
        if dialect == "omlx":
            if "tree_budget" in stats:
                usage["dflash_ddtree_tree_budget"] = stats["tree_budget"]
            usage["dflash_ddtree_cycles_completed"] = stats["cycles"]
            usage["dflash_ddtree_avg_acceptance"] = stats["avg_acceptance"]
            usage["dflash_ddtree_tokens_per_second"] = stats["tok_per_sec"]
        return {}

    def _vllm_spec(self, res: _Result, faults: frozenset[str]) -> dict[str, Any]:
        """``metrics.speculative_decoding`` as vLLM counts it: the first round is the
        prefill's (its token is no speculative step); every later round is one step of
        ``block_size - 1`` drafts. The ``stats-inflated`` fault claims that every step
        accepted all its drafts."""
        k = self.server.engine.options.block_size - 1
        steps = res.accepted[1:]
        if "stats-inflated" in faults:
            steps = [k] * len(steps)
        accepted = sum(steps)
        drafted = k * len(steps)
        return {
            "mean_acceptance_length": 1.0 + accepted / len(steps) if steps else 1.0,
            "draft_acceptance_rate": accepted / drafted if drafted else 0.0,
            "acceptance_histogram": acceptance_histogram(steps, k + 1),
            "num_spec_steps": len(steps),
            "num_accepted_draft_tokens": accepted,
            "num_draft_tokens": drafted,
            "num_spec_tokens": k,
        }

    def _hang(self) -> None:
        engine = self.server.engine
        deadline = time.monotonic() + engine.options.hang_seconds
        sock = self.connection
        while time.monotonic() < deadline and not engine.stop_event.is_set():
            try:
                r, _, _ = select.select([sock], [], [], 0.05)
            except (OSError, ValueError):
                return
            if r:
                try:
                    if not sock.recv(1, socket.MSG_PEEK):
                        return  # the client went away
                except OSError:
                    return
                time.sleep(0.05)

    def _complete(self, req: Request, faults: frozenset[str]) -> None:
        engine = self.server.engine
        res = _Result()
        for _ in engine.run(req, faults, res):
            pass
        if "hang" in faults:
            self._hang()
        content = "".join(res.content)
        reasoning = "".join(res.reasoning)
        if "empty-200" in faults:
            content = ""
        finish = res.finish_reason
        if "finish-always-stop" in faults:
            finish = "stop"
        usage = self._usage(req, res, faults)
        rid = engine.next_id()
        choice: dict[str, Any]
        if req.chat:
            msg: dict[str, Any] = {"role": "assistant", "content": content}
            if reasoning or req.think or "reasoning-only" in faults:
                msg["reasoning_content"] = reasoning
            choice = {"index": 0, "message": msg, "finish_reason": finish, "logprobs": None}
        else:
            choice = {"index": 0, "text": content, "finish_reason": finish, "logprobs": None}
        if req.logprobs is not None:
            choice["logprobs"] = engine.logprob_entries(res, req.logprobs, req.chat)
        choice["stop_reason"] = res.stop_reason
        out: dict[str, Any] = {
            "id": f"{'chatcmpl' if req.chat else 'cmpl'}-{rid:08x}",
            "object": "chat.completion" if req.chat else "text_completion",
            "created": int(time.time()),
            "model": engine.options.model_id,
            "choices": [choice],
            "usage": usage,
        }
        out.update(self._dialect_fields(req, res, faults, usage))
        data = json.dumps(out).encode()
        if "stream-no-done" in faults:
            data = data[: len(data) // 2]
        self._send_json(200, data)

    def _mid_stream_faults(self, faults: frozenset[str]) -> bool:
        """Apply ``hang`` and ``stream-error-event``; True when the stream must end here."""
        if "hang" in faults:
            self._hang()
        if "stream-error-event" in faults:
            error = {
                "message": "internal error during generation (injected)",
                "type": "server_error",
                "code": 500,
            }
            self._sse({"error": error})
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")
            return True
        return False

    def _stream(self, req: Request, faults: frozenset[str]) -> None:
        engine = self.server.engine
        rid = engine.next_id()
        obj = "chat.completion.chunk" if req.chat else "text_completion"
        base = {
            "id": f"{'chatcmpl' if req.chat else 'cmpl'}-{rid:08x}",
            "object": obj,
            "created": int(time.time()),
            "model": engine.options.model_id,
        }

        def chunk(delta: dict[str, Any] | None, finish: str | None = None, text: str = "") -> Any:
            ch: dict[str, Any]
            if req.chat:
                ch = {
                    "index": 0,
                    "delta": delta or {},
                    "finish_reason": finish,
                    "logprobs": None,
                }
            else:
                ch = {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}
            if finish is not None:  # as vLLM: on the chunk that carries the finish
                ch["stop_reason"] = res.stop_reason
            return {**base, "choices": [ch]}

        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        if "stream-no-done" in faults:
            # this connection closes after the cut stream: say so up front, or a client that
            # reuses it races the close ("server disconnected without sending a response")
            self.close_connection = True
            self.send_header("Connection", "close")
        self.end_headers()
        res = _Result(received=getattr(self, "_received", 0.0))
        sent_chunks = 0
        empty = "empty-200" in faults
        try:
            if req.chat:
                self._sse(chunk({"role": "assistant", "content": ""}))
            for ev in engine.run(req, faults, res):
                content = "" if empty else ev.content
                if not content and not ev.reasoning:
                    continue
                if req.chat:
                    delta: dict[str, Any] = {}
                    if ev.reasoning:
                        delta["reasoning_content"] = ev.reasoning
                    if content:
                        delta["content"] = content
                    self._sse(chunk(delta))
                else:
                    if not content:
                        continue
                    self._sse(chunk(None, text=content))
                if res.first_content_sent is None:
                    res.first_content_sent = time.perf_counter()
                sent_chunks += 1
                if sent_chunks == _MID_STREAM and self._mid_stream_faults(faults):
                    return
            if sent_chunks < _MID_STREAM and self._mid_stream_faults(faults):
                return  # a short answer: the mid-stream faults strike before the finish chunk
            finish = res.finish_reason
            if "finish-always-stop" in faults:
                finish = "stop"
            self._sse(chunk({}, finish))
            usage = self._usage(req, res, faults)
            extra = self._dialect_fields(req, res, faults, usage)
            # as llama.cpp and vLLM do: the statistics ride in the final usage chunk, so a
            # consumer reading usage from the last chunk before [DONE] finds it there
            if req.include_usage:
                tail_obj: dict[str, Any] | None = {**base, "choices": [], "usage": usage, **extra}
            elif "metrics" in extra:
                tail_obj = None  # vLLM sends its statistics only on the usage chunk
            else:
                tail_obj = {**base, "choices": [], **extra} if extra else None
            if "stream-no-done" in faults:
                data = json.dumps(tail_obj or {**base, "choices": [], "usage": usage}).encode()
                self._chunk(b"data: " + data[: len(data) // 2])
                self._chunk(b"")
                self.close_connection = True
                return
            if tail_obj is not None:
                self._sse(tail_obj)
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            self.close_connection = True


# ------------------------------------------------------------------ handles


class ReferenceServer:
    """Handle on a running reference server (in-process or a child process).

    ``host``, ``port``, ``options`` (the :class:`ServerOptions` it runs with) and, for a
    spawned server, ``process`` (the child's ``Popen``; ``None`` in-process).
    """

    def __init__(
        self,
        host: str,
        port: int,
        options: ServerOptions,
        stop: Callable[[], None],
        process: subprocess.Popen[bytes] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.options = options
        self.process = process
        self._stop = stop
        self._stopped = False

    @property
    def root_url(self) -> str:
        """``http://HOST:PORT`` (where ``/health`` and ``/tokenize`` live)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT/v1``: the OpenAI base URL."""
        return self.root_url + "/v1"

    def stop(self) -> None:
        """Stop serving and release the port (idempotent)."""
        if not self._stopped:
            self._stopped = True
            self._stop()

    def __enter__(self) -> ReferenceServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        kind = f"pid {self.process.pid}" if self.process else "in-process"
        return f"<ReferenceServer {self.base_url} ({kind})>"


def _options(kwargs: dict[str, Any]) -> ServerOptions:
    names = {f.name for f in fields(ServerOptions)}
    unknown = sorted(set(kwargs) - names)
    if unknown:
        raise TypeError(f"unknown reference server option(s): {', '.join(unknown)}")
    return ServerOptions(**kwargs)


def serve(options: ServerOptions) -> tuple[_HTTPServer, threading.Event]:
    """Bind (listening) and return the HTTP server without serving yet."""
    stop_event = threading.Event()
    engine = _Engine(options, stop_event)
    httpd = _HTTPServer((options.host, options.port), engine)
    return httpd, stop_event


def start_reference_server(**kwargs: Any) -> ReferenceServer:
    """Start the reference server in this process, on background threads.

    Keyword arguments are :class:`ServerOptions` fields. Returns once the socket listens.
    """
    options = _options(kwargs)
    httpd, stop_event = serve(options)
    thread = threading.Thread(
        target=httpd.serve_forever,
        kwargs={"poll_interval": 0.05},
        daemon=True,
        name="ddtree-reference-server",
    )
    thread.start()
    host, port = httpd.server_address[:2]

    def stop() -> None:
        stop_event.set()
        httpd.shutdown()
        httpd.server_close()
        httpd.close_connections()
        thread.join(5)
        with httpd.active_lock:
            workers = list(httpd.handler_threads)
        for t in workers:
            t.join(5)

    return ReferenceServer(str(host), int(port), options, stop)


def options_to_argv(options: ServerOptions) -> list[str]:
    """Command-line arguments reproducing ``options`` (from the flag table, ``.flags``)."""
    from .flags import options_to_argv as from_flag_table  # .flags reads this module

    return from_flag_table(options)


# The child runs this package's command line (as ``python -m pytest_ddtree.reference`` would)
# without executing ``pytest_ddtree/__init__.py``: the plugin's imports (pytest, httpx, ...)
# would triple the start-up time of a server that needs none of them.
_CHILD_BOOTSTRAP = """\
import sys, types
parent = types.ModuleType("pytest_ddtree")
parent.__path__ = [sys.argv.pop(1)]
sys.modules["pytest_ddtree"] = parent
from pytest_ddtree.reference.__main__ import main
raise SystemExit(main(sys.argv[1:]))
"""


def spawn_reference_server(timeout: float = 15.0, **kwargs: Any) -> ReferenceServer:
    """Start the reference server as a child process running this package's command line.

    Returns once the child accepts connections; raises ``RuntimeError`` with the child's
    error output if it exits or does not report its URL within ``timeout`` seconds.
    """
    options = _options(kwargs)
    package_dir = str(Path(__file__).resolve().parent.parent)
    # the child stops when its stdin closes, which the OS does when this process dies,
    # however it dies (SIGKILL, a cancelled CI job): a server never outlives its parent
    cmd = [
        sys.executable,
        "-c",
        _CHILD_BOOTSTRAP,
        package_dir,
        *options_to_argv(options),
        "--stop-on-stdin-eof",
    ]
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert proc.stdout is not None and proc.stderr is not None
    err_lines: deque[str] = deque(maxlen=40)
    line_box: list[str] = []
    got = threading.Event()

    def read_stdout() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            if not line_box:
                line_box.append(raw.decode(errors="replace").strip())
                got.set()
        got.set()

    def read_stderr() -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            err_lines.append(raw.decode(errors="replace").rstrip())

    threading.Thread(target=read_stdout, daemon=True).start()
    threading.Thread(target=read_stderr, daemon=True).start()

    def kill() -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    if not got.wait(timeout) or not line_box or not line_box[0].startswith(_URL_PREFIX):
        kill()
        detail = "; ".join(err_lines) or (line_box[0] if line_box else "no output")
        raise RuntimeError(
            f"reference server child (exit code {proc.returncode}) did not start within "
            f"{timeout:g} s: {detail}"
        )
    url = line_box[0][len(_URL_PREFIX) :]
    hostport = url.split("//", 1)[1].split("/", 1)[0]
    host, port = hostport.rsplit(":", 1)
    host = host.strip("[]")
    return ReferenceServer(host, int(port), options, kill, process=proc)


def announce(httpd: _HTTPServer) -> str:
    """The one line a child prints once it accepts connections."""
    host, port = httpd.server_address[:2]
    if isinstance(host, bytes):
        host = host.decode()
    if ":" in host:
        host = f"[{host}]"
    return f"{_URL_PREFIX}http://{host}:{port}/v1"
