"""The HTTP front end: the threading server (``_HTTPServer``) and the OpenAI-compatible
request handler (``_Handler``): routes, plain and streamed answers, statistics dialects,
wire faults."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
import time
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
)

from pytest_ddtree.core import dialects
from pytest_ddtree.core.dialects.ddtree import DDTree
from pytest_ddtree.core.dialects.omlx import OMLX
from pytest_ddtree.core.dialects.vllm import VLLM

from ..request import (
    Request,
    RequestError,
    error_body,
    parse_request,
)
from .engine import _Engine, _Result
from .text_stream import acceptance_histogram

MAX_BODY_BYTES = 1 << 20
_MID_STREAM = 2  # content chunks sent before a mid-stream fault strikes


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
                    **(
                        {"max_model_len": engine.options.max_model_len}
                        if engine.options.state_context
                        else {}
                    ),
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
                    {
                        "tokens": ids,
                        "count": len(ids),
                        "max_model_len": engine.options.max_model_len,
                    }
                ).encode(),
            )
            return
        chat = path.endswith("chat/completions")
        req = parse_request(body, chat, engine.options.model_id)
        _fits_context(req, engine)
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
        if res.prefill is not None:  # what its prefix cache held, as vLLM and SGLang report it
            usage["prompt_tokens_details"] = {"cached_tokens": res.prefill.cached_tokens}
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
        dialect = dialects.lookup(self.server.engine.options.stats_dialect)
        stats = self._stats(req, res, faults)
        if isinstance(dialect, DDTree):
            return {"ddtree_stats": stats}
        if isinstance(dialect, VLLM):
            if self.server.engine.options.target_only:
                # vLLM without a speculative config answers "metrics": null (no drafter, so
                # no step drafted anything, and its /metrics counters stay at 0)
                return {"metrics": None}
            return {"metrics": {"speculative_decoding": self._vllm_spec(res, faults)}}
        if isinstance(dialect, OMLX):
            if "tree_budget" in stats:
                usage["dflash_ddtree_tree_budget"] = stats["tree_budget"]
            usage["dflash_ddtree_cycles_completed"] = stats["cycles"]
            usage["dflash_ddtree_avg_acceptance"] = stats["avg_acceptance"]
            usage["dflash_ddtree_tokens_per_second"] = stats["tok_per_sec"]
            return {}
        if dialect is not None and dialect.reports_statistics:
            # a dialect marked reference_emits needs its emitter here, or answers carry nothing
            raise RuntimeError(f"the reference server cannot emit dialect {dialect.name!r}")
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

    def _tool_call(
        self, req: Request, rid: int, faults: frozenset[str], arguments: str | None
    ) -> dict[str, Any]:
        """The call of ``req.call`` (whole, or the head of a stream: ``arguments`` "")."""
        assert req.call is not None
        call: dict[str, Any] = {"id": f"call_{rid:08x}{zlib.crc32(req.call.name.encode()):08x}"}
        if "tool-call-no-id" in faults:
            del call["id"]
        call["type"] = "function"
        call["function"] = {"name": req.call.name, "arguments": arguments}
        return call

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
            if req.call is not None:
                # the answer is the call: content null, its arguments the generated JSON
                msg["content"] = None
                msg["tool_calls"] = [self._tool_call(req, rid, faults, content)]
                finish = _tool_finish(req, finish)
            choice = {"index": 0, "message": msg, "finish_reason": finish, "logprobs": None}
        else:
            choice = {"index": 0, "text": content, "finish_reason": finish, "logprobs": None}
        if req.logprobs is not None:
            choice["logprobs"] = engine.logprob_entries(
                res, req.logprobs, req.chat, zero="logprobs-zero" in faults
            )
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

    def _stream_headers(self, faults: frozenset[str]) -> None:
        """The status line and headers of an event stream."""
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

    def _stream_end(
        self,
        req: Request,
        res: _Result,
        faults: frozenset[str],
        base: dict[str, Any],
        chunk: Callable[..., Any],
    ) -> None:
        """The finish chunk, the usage and statistics chunk, and ``[DONE]``."""
        finish = res.finish_reason
        if "finish-always-stop" in faults:
            finish = "stop"
        if req.call is not None:
            finish = _tool_finish(req, finish)
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

    def _chunker(
        self, req: Request, res: _Result, faults: frozenset[str], base: dict[str, Any]
    ) -> Callable[..., Any]:
        """The builder of one chunk of ``req``'s stream: the finish chunk carries the stop
        reason and, when asked, every token's log-probabilities."""
        engine = self.server.engine

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
                if req.logprobs is not None:  # every token's entry at once, on the last chunk
                    ch["logprobs"] = engine.logprob_entries(
                        res, req.logprobs, req.chat, zero="logprobs-zero" in faults
                    )
            return {**base, "choices": [ch]}

        return chunk

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
        self._stream_headers(faults)
        res = _Result(received=getattr(self, "_received", 0.0))
        chunk = self._chunker(req, res, faults, base)
        sent_chunks = 0
        empty = "empty-200" in faults
        try:
            if req.chat:
                self._sse(chunk({"role": "assistant", "content": ""}))
            for ev in engine.run(req, faults, res):
                content = "" if empty else ev.content
                if req.call is not None and content:
                    if res.first_content_sent is None:
                        head = self._tool_call(req, rid, faults, "")
                        self._sse(chunk({"tool_calls": [{"index": 0, **head}]}))
                    if "tool-args-dropped" in faults and ev.tokens > 1:
                        content = ""  # the bug: a chunk of several fragments is lost
                    else:
                        fragment = {"index": 0, "function": {"arguments": content}}
                        self._sse(chunk({"tool_calls": [fragment]}))
                    content = ""
                    if res.first_content_sent is None:
                        res.first_content_sent = time.perf_counter()
                    sent_chunks += 1
                    if sent_chunks == _MID_STREAM and self._mid_stream_faults(faults):
                        return
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
            self._stream_end(req, res, faults, base, chunk)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            self.close_connection = True


def _tool_finish(req: Request, finish: str) -> str:
    """The finish of an answer that called a tool: "tool_calls" when it ended by itself, or
    "stop" for a named ``tool_choice`` (as OpenAI's API and vLLM answer); "length" stays."""
    if finish == "stop" and not req.named_tool:
        return "tool_calls"
    return finish


def _fits_context(req: Request, engine: Any) -> None:
    """Refuse, as vLLM does (HTTP 400, its words), a request whose prompt and ``max_tokens``
    exceed the context."""
    limit = engine.options.max_model_len
    prompt = len(engine.model.encode(req.rendered))
    if prompt + req.max_tokens > limit:
        raise RequestError(
            400,
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{prompt + req.max_tokens} tokens ({prompt} in the messages, {req.max_tokens} in "
            "the completion). Please reduce the length of the messages or completion.",
            "invalid_request",
        )
