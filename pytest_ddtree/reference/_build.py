"""Regenerate the reference model's shipped artifacts.

Run ``python -m pytest_ddtree.reference._build`` from a checkout. It generates the corpus
(:mod:`._corpus`), trains a byte-level BPE tokenizer on it with ``tokenizers`` and writes
``tokenizer.json``, then counts the n-gram tables of the target and the drafter over the
tokenized corpus and writes them to ``data/ngram.bin``. The output is deterministic for a
given corpus seed and ``tokenizers`` version.
"""

from __future__ import annotations

import argparse
import json
import sys
import zlib
from array import array
from collections import Counter, defaultdict
from pathlib import Path

import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from ._corpus import generate_corpus
from ._tables import (
    ANSWER_START,
    DRAFT_ORDER,
    DRAFT_TABLE,
    MAX_CANDIDATES,
    SPECIAL_TOKENS,
    TABLE_NAMES,
    TARGET_ORDER,
    VOCAB_SIZE,
    encode_key,
    write_tables,
)

_HERE = Path(__file__).resolve().parent


def train_tokenizer(texts: list[str]) -> Tokenizer:
    """Train the byte-level BPE tokenizer on ``texts``."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def _count(seqs: list[tuple[int, list[int]]], order: int) -> dict[int, Counter[int]]:
    counts: dict[int, Counter[int]] = defaultdict(Counter)
    for table, ids in seqs:
        for i in range(3, len(ids)):
            nxt = ids[i]
            for k in range(order):  # context lengths 0 .. order-1
                ctx = ids[i - k : i] if k else []
                counts[encode_key(table, ctx)][nxt] += 1
    return counts


def build(out_dir: Path = _HERE, seed: int = 2024) -> None:
    """Build ``tokenizer.json`` and ``data/ngram.bin`` into ``out_dir``."""
    docs = generate_corpus(seed)
    chat_texts = [f"<|im_start|>assistant\n{d.text}<|im_end|>\n" for d in docs]
    tok = train_tokenizer(chat_texts)
    (out_dir / "data").mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"), pretty=False)

    start = tok.encode(ANSWER_START).ids
    if len(start) != 3:
        raise SystemExit(f"answer start {ANSWER_START!r} tokenizes to {len(start)} tokens, not 3")
    table_index = {name: i for i, name in enumerate(TABLE_NAMES)}
    encoded = tok.encode_batch([d.text for d in docs])
    target_seqs = [
        (table_index[d.table], start + e.ids) for d, e in zip(docs, encoded, strict=True)
    ]
    draft_seqs = [(DRAFT_TABLE, ids) for _, ids in target_seqs]

    merged: dict[int, Counter[int]] = {}
    merged.update(_count(target_seqs, TARGET_ORDER))
    merged.update(_count(draft_seqs, DRAFT_ORDER))
    keys = sorted(merged)
    key_arr = array("Q")
    off_arr = array("I", [0])
    tok_arr = array("H")
    cnt_arr = array("H")
    for key in keys:
        best = merged[key].most_common(MAX_CANDIDATES)
        key_arr.append(key)
        for t, c in best:
            tok_arr.append(t)
            cnt_arr.append(min(c, 65535))
        off_arr.append(len(tok_arr))
    blob = write_tables(key_arr, off_arr, tok_arr, cnt_arr)
    (out_dir / "data" / "ngram.bin").write_bytes(zlib.compress(blob, 9))
    info = {
        "corpus_seed": seed,
        "documents": len(docs),
        "corpus_characters": sum(len(d.text) for d in docs),
        "vocab_size": tok.get_vocab_size(),
        "contexts": len(keys),
        "entries": len(tok_arr),
        "tokenizers_version": tokenizers.__version__,
    }
    (out_dir / "data" / "build.json").write_text(json.dumps(info, indent=2) + "\n")
    print(
        f"vocab {tok.get_vocab_size()}, contexts {len(keys)}, entries {len(tok_arr)}, "
        f"ngram.bin {(out_dir / 'data' / 'ngram.bin').stat().st_size} bytes",
        file=sys.stderr,
    )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: rebuild the artifacts in place (or into ``--out``)."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, default=_HERE, help="output directory")
    p.add_argument("--seed", type=int, default=2024, help="corpus seed")
    a = p.parse_args(argv)
    build(a.out, a.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
