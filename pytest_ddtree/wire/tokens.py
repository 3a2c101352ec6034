"""Token counting: a local ``tokenizer.json``, the server's ``/tokenize``, or an
approximation.

Counts are of decoded text without special tokens added (no BOS), which is what
a server's ``usage.completion_tokens`` measures up to an end-of-sequence token.
Nothing here downloads anything: a tokenizer is read from a file the user names.
"""

from __future__ import annotations

import math
import os
import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import httpx

from pytest_ddtree.core.dialects import TokenizeShape, tokenize_shapes
from pytest_ddtree.wire.completion import ErrorKind

_CACHE_SIZE = 2048
# a decoded token is shown in evidence: at most this many characters of it, and at most
# this many bytes read from a server's /detokenize answer
MAX_TOKEN_TEXT = 80
MAX_DETOKENIZE_BYTES = 65536


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens of text. ``exact`` is False for approximations."""

    source: str
    exact: bool
    special_tokens: tuple[str, ...]

    def count(self, text: str) -> int:
        """Number of tokens in ``text`` (no special tokens added)."""
        ...

    def encode(self, text: str) -> list[int] | None:
        """Token ids of ``text``, or None when the counter is not exact."""
        ...


class _LRU:
    """A small bounded cache: the same text is often counted by several checks
    and by the client, and encoding is the costly part of a check run."""

    def __init__(self, size: int = _CACHE_SIZE) -> None:
        self._data: OrderedDict[str, list[int]] = OrderedDict()
        self._size = size

    def get(self, key: str) -> list[int] | None:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: str, value: list[int]) -> None:
        self._data[key] = value
        if len(self._data) > self._size:
            self._data.popitem(last=False)


class TokenizerCounter:
    """Exact counts from a local ``tokenizer.json`` with the ``tokenizers`` library."""

    exact = True

    def __init__(self, path: str | os.PathLike[str]) -> None:
        from tokenizers import Tokenizer

        file = Path(path)
        if file.is_dir():
            file = file / "tokenizer.json"
        if not file.is_file():
            raise ValueError(f"tokenizer file not found: {str(path)!r}")
        try:
            self._tokenizer: Any = Tokenizer.from_file(str(file))
        except Exception as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ValueError(f"not a valid tokenizer.json: {str(file)!r} ({first})") from None
        self.path = file
        self.source = f"tokenizer.json ({file})"
        self.special_tokens = _special_tokens_of(self._tokenizer)
        self._cache = _LRU()

    def _ids(self, text: str) -> list[int]:
        ids = self._cache.get(text)
        if ids is None:
            ids = list(self._tokenizer.encode(text, add_special_tokens=False).ids)
            self._cache.put(text, ids)
        return ids

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without added special tokens (a fresh list)."""
        return list(self._ids(text))

    def count(self, text: str) -> int:
        """Number of tokens in ``text``."""
        return len(self._ids(text)) if text else 0

    def decode_token(self, token_id: int) -> str | None:
        """The text of token ``token_id`` (special tokens included), or None when the
        vocabulary has no such id."""
        try:
            if self._tokenizer.id_to_token(token_id) is None:
                return None
            text = self._tokenizer.decode([token_id], skip_special_tokens=False)
        except Exception:  # an id out of range, an odd decoder: no text, never a crash
            return None
        return text[:MAX_TOKEN_TEXT] if isinstance(text, str) else None


def _special_tokens_of(tokenizer: Any) -> tuple[str, ...]:
    found: list[str] = []
    try:
        decoder = tokenizer.get_added_tokens_decoder()
    except Exception:  # older tokenizers releases lack this accessor
        return ()
    for _id, added in sorted(decoder.items()):
        if getattr(added, "special", False):
            content = getattr(added, "content", None)
            if isinstance(content, str) and content:
                found.append(content)
    return tuple(found)


# every family's /tokenize request is declared by its dialect (``core.dialects``); tried in
# the registry's order by ``detect_tokenize_shape``: the first whose answer holds a
# plausible count for the probe wins (the embedded reference server's first)
TOKENIZE_SHAPES: tuple[TokenizeShape, ...] = tokenize_shapes()
SHAPES_BY_NAME = {shape.name: shape for shape in TOKENIZE_SHAPES}
PROBE_TEXT = "Hello, world."


class ServerCounter:
    """Exact counts from the endpoint's ``/tokenize``, cached per text.

    ``shape`` names the request and answer layout (``TOKENIZE_SHAPES``); the
    answer must carry ``count`` (an integer) or ``tokens`` (a list of ids).
    """

    exact = True
    remote = True  # each count may cost an HTTP request: callers count sparingly
    special_tokens: tuple[str, ...] = ()

    def __init__(
        self,
        root_url: str,
        client: httpx.Client | None = None,
        *,
        shape: str = "reference",
        model: str | None = None,
    ) -> None:
        self.root_url = root_url.rstrip("/")
        self.shape = SHAPES_BY_NAME[shape]
        self.model = model
        self.url = f"{self.root_url}{self.shape.path}"
        self.source = f"server {self.url}"
        if shape != "reference":
            self.source += f" ({shape} shape)"
        self._client = client if client is not None else httpx.Client(timeout=10.0)
        self._cache = _LRU()
        self._counts: OrderedDict[str, int] = OrderedDict()
        self.retries = 0  # requests sent again after a stale keep-alive connection
        self._pieces: dict[int, str | None] = {}

    def _ask(self, text: str) -> tuple[int, list[int] | None]:
        body = self.shape.body(text, self.model)
        try:
            response = self._client.post(self.url, json=body)
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
            # a pooled keep-alive connection the server had just closed (llama.cpp and
            # uvicorn close idle ones after 5 s): counting is idempotent and untimed, so
            # one retry (the dead connection has left the pool) is safe; it is counted
            self.retries += 1
            try:
                response = self._client.post(self.url, json=body)
            except httpx.HTTPError as exc:
                raise RuntimeError(f"{self.url} failed: {type(exc).__name__}: {exc}") from None
        except httpx.HTTPError as exc:
            raise RuntimeError(f"{self.url} failed: {type(exc).__name__}: {exc}") from None
        if response.status_code != 200:
            raise RuntimeError(f"{self.url} answered HTTP {response.status_code}")
        try:
            data = response.json()
        except ValueError:
            raise RuntimeError(f"{self.url} answered with a body that is not JSON") from None
        return parse_tokenize_answer(data, self.url)

    def encode(self, text: str) -> list[int] | None:
        """Token ids from the server, or None when it reports only a count."""
        ids = self._cache.get(text)
        if ids is None:
            count, ids = self._ask(text)
            self._remember(text, count)
            if ids is not None:
                self._cache.put(text, ids)
        return None if ids is None else list(ids)

    def count(self, text: str) -> int:
        """Number of tokens in ``text`` according to the server."""
        if not text:
            return 0
        cached = self._counts.get(text)
        if cached is not None:
            return cached
        count, ids = self._ask(text)
        self._remember(text, count)
        if ids is not None:
            self._cache.put(text, ids)
        return count

    def decode_token(self, token_id: int) -> str | None:
        """The text of token ``token_id`` from the server's ``/detokenize`` (llama.cpp,
        vLLM, SGLang and the reference server have one), or None when it has none or
        answers something else; one request per id, bounded in time and bytes."""
        if token_id in self._pieces:
            return self._pieces[token_id]
        path = self.shape.detokenize
        body: dict[str, Any] = {"tokens": [token_id]}
        if self.shape.with_model and self.model:
            body["model"] = self.model
        text = self._detokenize(path, body)
        if text == "":
            # SGLang skips special tokens unless told not to: its end-of-sequence decodes
            # to "" by default; asked again only then, so no other server sees the field
            again = self._detokenize(path, {**body, "skip_special_tokens": False})
            text = again if again else text
        self._pieces[token_id] = text
        return text

    def _detokenize(self, path: str, body: dict[str, Any]) -> str | None:
        try:
            response = self._client.post(f"{self.root_url}{path}", json=body, timeout=5.0)
            if response.status_code == 200 and len(response.content) <= MAX_DETOKENIZE_BYTES:
                return detokenize_text(response.json())
        except Exception:  # no /detokenize, a slow or odd one: the id is shown alone
            return None
        return None

    def _remember(self, text: str, count: int) -> None:
        self._counts[text] = count
        if len(self._counts) > _CACHE_SIZE:
            self._counts.popitem(last=False)


def detokenize_text(data: Any) -> str | None:
    """The text of a ``/detokenize`` answer: vLLM's and the reference server's
    ``prompt``, llama.cpp's ``content``, SGLang's ``text``; None for anything else."""
    if not isinstance(data, Mapping):
        return None
    for key in ("prompt", "content", "text"):
        value = data.get(key)
        if isinstance(value, str):
            return value[:MAX_TOKEN_TEXT]
    return None


def _token_id(item: Any) -> int | None:
    if isinstance(item, Mapping):  # llama.cpp with_pieces: {"id": 1, "piece": "a"}
        item = item.get("id")
    if isinstance(item, bool) or not isinstance(item, int) or item < 0:
        return None
    return item


def parse_tokenize_answer(data: Any, url: str) -> tuple[int, list[int] | None]:
    """``(count, ids or None)`` from a ``/tokenize`` answer; ``RuntimeError`` naming
    ``url`` when it holds neither a count nor a list of ids, or they disagree."""
    if not isinstance(data, Mapping):
        raise RuntimeError(f"{url} answered {type(data).__name__}, not a JSON object")
    tokens = data.get("tokens")
    ids: list[int] | None = None
    if isinstance(tokens, list):
        parsed = [_token_id(t) for t in tokens]
        if all(t is not None for t in parsed):
            ids = [t for t in parsed if t is not None]
    count = data.get("count")
    if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
        if ids is not None and len(ids) != count:
            raise RuntimeError(f"{url} answered count {count} with {len(ids)} tokens")
        return count, ids
    if ids is not None:
        return len(ids), ids
    raise RuntimeError(f"{url} answered without an integer 'count' or a list of token ids")


@dataclass
class TokenizeProbe:
    """What ``detect_tokenize_shape`` found: the shape that works (or None), the
    shapes tried, and a one-line warning when an endpoint answered garbage or not in time."""

    shape: str | None
    tried: list[str]
    warning: str | None = None
    #: how the probe's request stalled (no answer within the client's timeout), or None: a
    #: stall the session's guard counts as the endpoint's first
    stall: ErrorKind | None = None


def detect_tokenize_shape(
    root_url: str, client: httpx.Client, *, model: str | None = None
) -> TokenizeProbe:
    """Try every ``TOKENIZE_SHAPES`` entry on ``root_url`` with a probe text.

    A shape fits when the answer parses and gives a plausible count for the
    probe (at least 1, at most one token per character). A 200 answer that does
    not fit is remembered for the warning, so a ``/tokenize`` that answers
    garbage is named rather than silently ignored.
    """
    root = root_url.rstrip("/")
    tried: list[str] = []
    garbage: list[str] = []
    for shape in TOKENIZE_SHAPES:
        tried.append(shape.name)
        url = f"{root}{shape.path}"
        try:
            response = client.post(url, json=shape.body(PROBE_TEXT, model))
        except httpx.TimeoutException as exc:
            # a server that holds a request without answering holds the next shape's too:
            # the start-up probe does not wait for each of them
            kind = (
                ErrorKind.CONNECT_TIMEOUT
                if isinstance(exc, httpx.ConnectTimeout)
                else ErrorKind.READ_TIMEOUT
            )
            late = f"{url}: no answer in time; no more shapes tried"
            return TokenizeProbe(None, tried, late, stall=kind)
        except httpx.HTTPError:
            continue
        if response.status_code != 200:
            continue
        try:
            count, _ids = parse_tokenize_answer(response.json(), url)
        except (ValueError, RuntimeError) as exc:
            garbage.append(str(exc) if isinstance(exc, RuntimeError) else f"{url}: not JSON")
            continue
        if 1 <= count <= len(PROBE_TEXT):
            return TokenizeProbe(shape.name, tried)
        garbage.append(f"{url} counted {count} tokens in {PROBE_TEXT!r}")
    warning = None
    if garbage:
        warning = f"ignoring /tokenize: {garbage[0]}"
    return TokenizeProbe(None, tried, warning)


_WORD = re.compile(r"\S+")


class ApproxCounter:
    """An approximation for when no tokenizer is available.

    ``max(ceil(words * 4 / 3), ceil(chars / 4))``: English BPE tokenizers give
    about 4/3 tokens per word and 4 characters per token; the larger of the two
    holds up better on code and punctuation-heavy text. Checks that need exact
    counts skip or widen their tolerance when ``exact`` is False.
    """

    exact = False
    source = "approximation (max(words*4/3, chars/4))"
    special_tokens: tuple[str, ...] = ()

    def count(self, text: str) -> int:
        """Approximate number of tokens in ``text``."""
        if not text:
            return 0
        words = sum(1 for _ in _WORD.finditer(text))
        return max(math.ceil(words * 4 / 3), math.ceil(len(text) / 4))

    def encode(self, text: str) -> None:
        """Always None: an approximation has no token ids."""
        return None


def load_counter(
    tokenizer: str,
    *,
    root_url: str | None = None,
    client: httpx.Client | None = None,
    shape: str = "reference",
    model: str | None = None,
) -> TokenCounter:
    """Build a counter from a ``--ddtree-tokenizer`` value.

    ``tokenizer`` is a path to a ``tokenizer.json`` (or a directory holding one),
    ``"server"`` for the endpoint's ``/tokenize`` (needs ``root_url``, the server
    root without ``/v1``), or ``"none"`` for the approximation. A missing or
    invalid file raises ``ValueError`` with one line naming it.
    """
    if not isinstance(tokenizer, str) or not tokenizer.strip():
        raise ValueError(
            f"tokenizer: expected a tokenizer.json path, 'server' or 'none', got {tokenizer!r}"
        )
    value = tokenizer.strip()
    if value.lower() == "none":
        return ApproxCounter()
    if value.lower() == "server":
        if not root_url:
            raise ValueError("tokenizer 'server' needs the endpoint's root URL")
        return ServerCounter(root_url, client, shape=shape, model=model)
    return TokenizerCounter(os.path.expanduser(value))


def server_supports_tokenize(root_url: str, client: httpx.Client) -> bool:
    """True when the server's ``/tokenize`` answers a probe in any known shape."""
    try:
        return detect_tokenize_shape(root_url, client).shape is not None
    except Exception:  # any failure just means "no usable /tokenize"
        return False
