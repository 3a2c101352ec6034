"""The incremental decoder of server-sent events over raw bytes (``StreamDecoder``).

Exact byte offsets of invalid UTF-8, the byte cap counted in bytes, a bounded
number of chunk objects kept. No I/O.
"""

from __future__ import annotations

import codecs
import json
import re
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_ddtree.wire import dialects
from pytest_ddtree.wire.completion import (
    Api,
    StreamInfo,
    TokenLogprob,
)
from pytest_ddtree.wire.protocol.parse import ToolCallDeltas, chunk_choice

# Stream chunk objects kept whole: the first few hundred (every normal answer), then the
# first, the last few and every chunk carrying statistics or usage, so a stream of any
# length holds a bounded number of objects and the dialects still find what they read.
KEEP_ALL_CHUNKS = 512
KEEP_LAST_CHUNKS = 8
KEEP_STATS_CHUNKS = 64
STATS_KEYS = ("usage", "timings", "ddtree_stats", "metrics", "meta_info", "sglext", "error")
MAX_NOTES = 16

_NEWLINES = re.compile(r"\r\n|\r|\n")
_json_decode = json.JSONDecoder().decode


class StreamDecoder:
    """Incremental Server-Sent Events decoder over raw bytes, with bounded state.

    ``feed(bytes, stamp)`` takes the body as it arrives (``stamp``: when those
    bytes arrived). Lines are split on CR, LF and CRLF (the SSE rule); the bytes
    are decoded as strict UTF-8 and the first invalid byte is recorded with its
    exact offset in the stream (then replaced, so the rest is still read).
    ``received`` counts bytes, which is what the byte cap is compared with.
    Each event's JSON goes to the chunk accumulator (``_event``).
    """

    def __init__(self, api: Api) -> None:
        self.api: Api = api
        self.received = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self.bad_utf8: str | None = None
        self._partial: list[str] = []
        self._cr = False
        self._data: list[str] = []
        self._now = 0.0
        self.events = 0
        self.done_seen = False
        self.finish: str | None = None
        self.stop: str | int | None = None
        self.stop_field: str | None = None
        self.finish_chunks = 0
        self.usage_seen = False
        self.first: float | None = None
        self.stamps: list[float] = []
        self.pieces: list[str] = []
        self.text_parts: list[str] = []
        self.reasoning_parts: list[str] = []
        self.parse_errors: list[str] = []
        self.error_events: list[Mapping[str, Any]] = []
        self._chunks: list[tuple[int, dict[str, Any]]] = []
        self._last: deque[tuple[int, dict[str, Any]]] = deque(maxlen=KEEP_LAST_CHUNKS)
        self._stats: deque[tuple[int, dict[str, Any]]] = deque(maxlen=KEEP_STATS_CHUNKS)
        self._seen_chunks = 0
        self._bad = 0
        #: per-token log-probabilities, when the chunks carry them (None: none seen)
        self.logprobs: list[TokenLogprob] | None = None
        #: streamed tool-call fragments, assembled (``choices[0].delta.tool_calls``)
        self.tool_calls = ToolCallDeltas()

    # -- bytes -> lines

    def feed(self, chunk: bytes, stamp: float | None = None) -> None:
        """Take the next bytes of the body, which arrived at ``stamp`` (default: now)."""
        self._now = time.perf_counter() if stamp is None else stamp
        self._text(self._decode(chunk, False))
        self.received += len(chunk)

    def feed_many(self, chunks: Sequence[bytes], stamps: Sequence[float]) -> None:
        """``feed`` each of ``chunks`` with its stamp (the same result, fewer calls: the
        load runner decodes a whole point's recorded bytes after it ran)."""
        decode = self._decoder.decode
        for i, chunk in enumerate(chunks):
            self._now = stamps[i]
            try:
                text = decode(chunk, False)
            except UnicodeDecodeError:
                # the decoder kept its state: the slow path decodes again, names the
                # byte and goes on replacing
                text = self._decode(chunk, False)
                decode = self._decoder.decode
            self._text(text)
            self.received += len(chunk)

    def _decode(self, chunk: bytes, final: bool) -> str:
        try:
            return self._decoder.decode(chunk, final)
        except UnicodeDecodeError as exc:
            pending = len(exc.object) - len(chunk)
            offset = self.received - pending + exc.start
            self.bad_utf8 = (
                f"invalid UTF-8 at byte {offset} of the stream: "
                f"{bytes(exc.object[exc.start : exc.end])!r}"
            )
            self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
            return self._decoder.decode(bytes(exc.object), final)

    def close(self) -> None:
        """The body ended: flush what is left."""
        self._text(self._decode(b"", True))
        if self._cr:
            self._cr = False
            self._line("".join(self._partial))
            self._partial = []
        elif self._partial:
            self._line("".join(self._partial))
            self._partial = []
        self._line("")

    def _text(self, text: str) -> None:
        if not text:
            return
        # the common read: whole ``data: ...`` events, LF-terminated, nothing pending
        if text[-2:] == "\n\n" and not (self._partial or self._data or self._cr):
            body = text[:-2]
            blocks = body.split("\n\n")
            # no other newline, so each block is one line; every one a ``data: `` line
            if (
                text.count("\n") == 2 * len(blocks)
                and "\r" not in text
                and ("\n\n" + body).count("\n\ndata: ") == len(blocks)
            ):
                event = self._event
                for block in blocks:
                    event(block[6:])
                return
        if self._cr:
            text = "\r" + text
            self._cr = False
        if text.endswith("\r"):
            self._cr = True
            text = text[:-1]
            if not text:
                return
        has_cr = "\r" in text
        if not has_cr and "\n" not in text:
            self._partial.append(text)
            return
        lines = _NEWLINES.split(text) if has_cr else text.split("\n")
        rest = lines.pop()
        if self._partial:
            lines[0] = "".join(self._partial) + lines[0]
            self._partial = []
        if rest:
            self._partial.append(rest)
        line_of = self._line
        for line in lines:
            line_of(line)

    # -- lines -> events

    def _line(self, line: str) -> None:
        if line[:6] == "data: ":  # the common case first
            self._data.append(line[6:])
            return
        if not line:
            if self._data:
                data = "\n".join(self._data)
                self._data = []
                self._event(data)
            return
        if line[0] == ":":
            return
        name, _, value = line.partition(":")
        if name == "data":
            self._data.append(value[1:] if value[:1] == " " else value)

    # -- events -> the answer (the chunk accumulator)

    def _event(self, data: str) -> None:
        self.events += 1
        if self.done_seen:
            self._note(f"event after [DONE]: {data[:120]!r}")
            return
        if data[:1] != "{" and data.strip() == "[DONE]":
            self.done_seen = True
            return
        try:
            obj = _json_decode(data)
        except RecursionError:
            self._note(f"nested too deep to parse: {data[:120]}")
            return
        except ValueError:
            self._note(data[:200])
            return
        if not isinstance(obj, dict):
            self._note(data[:200])
            return
        if self._seen_chunks < KEEP_ALL_CHUNKS:  # inline: once per event
            self._chunks.append((self._seen_chunks, obj))
            self._seen_chunks += 1
        else:
            self._keep(obj)
        if "error" in obj:
            err = obj["error"]
            if len(self.error_events) < MAX_NOTES:
                self.error_events.append(err if isinstance(err, dict) else {"error": err})
        if type(obj.get("usage")) is dict:
            self.usage_seen = True
        piece, rpiece, fin = chunk_choice(obj, self.api)
        choices = obj.get("choices")
        if (
            type(choices) is list
            and choices
            and type(choices[0]) is dict
            and choices[0].get("logprobs") is not None
        ):
            found = dialects.logprobs_of(choices[0])
            if found is not None:
                if self.logprobs is None:
                    self.logprobs = found
                else:
                    self.logprobs.extend(found)
        if type(choices) is list and choices and type(choices[0]) is dict:
            delta = choices[0].get("delta")
            if type(delta) is dict and delta.get("tool_calls"):
                self.tool_calls.feed(delta)
        if piece or rpiece:
            now = self._now
            if self.first is None:
                self.first = now
            self.stamps.append(now)
            self.pieces.append(piece + rpiece)
            if piece:
                self.text_parts.append(piece)
            if rpiece:
                self.reasoning_parts.append(rpiece)
        if fin is not None:
            self.finish_chunks += 1
            self.finish = fin
            # vLLM and SGLang name the stop on the chunk that carries the finish
            self.stop, self.stop_field = dialects.stop_of(obj["choices"][0])

    def _note(self, what: str) -> None:
        # the count matters, not a thousand copies of the same garbage
        self._bad += 1
        if len(self.parse_errors) < MAX_NOTES:
            self.parse_errors.append(what)

    def _keep(self, obj: dict[str, Any]) -> None:
        index = self._seen_chunks
        self._seen_chunks += 1
        if index < KEEP_ALL_CHUNKS:
            self._chunks.append((index, obj))
            return
        self._last.append((index, obj))
        if any(k in obj for k in STATS_KEYS):
            self._stats.append((index, obj))

    def kept(self) -> list[dict[str, Any]]:
        """The chunk objects kept, in stream order."""
        if self._seen_chunks <= KEEP_ALL_CHUNKS:
            return [obj for _, obj in self._chunks]
        merged = {i: obj for i, obj in (*self._chunks, *self._stats, *self._last)}
        return [merged[i] for i in sorted(merged)]

    def info(self, content_type: str | None) -> StreamInfo:
        """What the stream looked like."""
        errors = list(self.parse_errors)
        if self._bad > MAX_NOTES:
            errors.append(f"... {self._bad - MAX_NOTES} more unparseable events")
        return StreamInfo(
            events=self.events,
            done_seen=self.done_seen,
            finish_chunks=self.finish_chunks,
            parse_errors=tuple(errors),
            error_events=tuple(self.error_events),
            usage_seen=self.usage_seen,
            content_type=content_type,
            chunks_dropped=self._seen_chunks - len(self.kept()),
        )
