"""Compact storage of the n-gram tables shared by the builder and the runtime.

All tables live in one sorted array of 64-bit context keys; each key owns a slice of
candidate next tokens with their counts, most frequent first. Lookups bisect the key array,
so loading is a single decompress + ``frombytes`` and start-up stays fast.
"""

from __future__ import annotations

import sys
import zlib
from array import array
from bisect import bisect_left
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "ANSWER_START",
    "DRAFT_ORDER",
    "DRAFT_TABLE",
    "MAX_CANDIDATES",
    "SPECIAL_TOKENS",
    "TABLE_NAMES",
    "TARGET_ORDER",
    "VOCAB_SIZE",
    "NGramTables",
    "encode_key",
    "write_tables",
]

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>")
VOCAB_SIZE = 4096
TARGET_ORDER = 4  # three tokens of context
DRAFT_ORDER = 3  # two tokens of context: cheaper and blind to the topic
MAX_CANDIDATES = 24
ANSWER_START = "<|im_start|>assistant\n"
_TOPIC_NAMES = (
    "rivers",
    "gardens",
    "computers",
    "cooking",
    "music",
    "railways",
    "weather",
    "bees",
    "astronomy",
    "libraries",
    "oceans",
    "mountains",
)
_PLAIN_NAMES = ("code", "arithmetic", "facts")
# one table per topic, per topic's numbered lists, and per topic's reasoning notes
TABLE_NAMES: tuple[str, ...] = (
    _TOPIC_NAMES
    + _PLAIN_NAMES
    + tuple(f"{t}:list" for t in _TOPIC_NAMES)
    + tuple(f"{t}:reasoning" for t in _TOPIC_NAMES + _PLAIN_NAMES)
)
DRAFT_TABLE = 63
_MAGIC = b"DDTNG1\n"


def encode_key(table: int, ctx: Sequence[int]) -> int:
    """Pack a table id and a context of up to three token ids into one integer key."""
    k = len(ctx)
    c = 0
    for t in ctx:
        c = (c << 12) | t
    return (table << 40) | (k << 36) | c


def write_tables(
    keys: array[int], offsets: array[int], toks: array[int], cnts: array[int]
) -> bytes:
    """Serialise the four arrays (little-endian) into one blob."""
    parts = [_MAGIC]
    for arr in (keys, offsets, toks, cnts):
        a = array(arr.typecode, arr)
        if sys.byteorder == "big":
            a.byteswap()
        raw = a.tobytes()
        parts.append(f"{arr.typecode}{len(raw)}\n".encode())
        parts.append(raw)
    return b"".join(parts)


class NGramTables:
    """Read-only view of the shipped n-gram tables."""

    def __init__(self, path: Path) -> None:
        blob = zlib.decompress(path.read_bytes())
        if not blob.startswith(_MAGIC):
            raise ValueError(f"{path}: not an n-gram table file")
        pos = len(_MAGIC)
        arrays: list[array[int]] = []
        for _ in range(4):
            nl = blob.index(b"\n", pos)
            header = blob[pos:nl].decode()
            code, size = header[0], int(header[1:])
            a: array[int] = array(code)
            a.frombytes(blob[nl + 1 : nl + 1 + size])
            if sys.byteorder == "big":
                a.byteswap()
            arrays.append(a)
            pos = nl + 1 + size
        self.keys, self.offsets, self.tokens, self.counts = arrays

    def lookup(self, key: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """Candidates (tokens, counts), most frequent first, for a packed context key."""
        keys = self.keys
        i = bisect_left(keys, key)
        if i == len(keys) or keys[i] != key:
            return None
        a, b = self.offsets[i], self.offsets[i + 1]
        return tuple(self.tokens[a:b]), tuple(self.counts[a:b])
