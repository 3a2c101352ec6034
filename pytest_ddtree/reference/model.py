"""The reference model: a target n-gram language model, a cheaper drafter, and DDTree decoding.

The target is an order-4 n-gram model with one table per topic, trained on the corpus of
:mod:`._corpus`. Its choice at each position is a deterministic function of
(sampling key, position, last three tokens): the candidate distribution of the context,
sharpened by the temperature, is sampled with a uniform number hashed from those values.
At temperature 0 the key is derived from the prompt, so the output is fixed for a prompt and
never loops; with ``seed`` it is derived from the seed. Temperature 0 is greedy decoding, as
on real engines: the token is the argmax of logits that carry a Gumbel noise hashed from the
same values (the Gumbel-max view of that draw), and the log-probabilities the server reports
are their log-softmax, so the chosen token is always the best one listed. Structure that an
n-gram cannot learn (when to stop, list numbering, the reasoning block) is applied by
deterministic rules over the committed prefix, so the whole target remains a pure function
of (prompt, prefix).

The drafter sees only the last two committed tokens, knows no topic and no rules, and
proposes distributions for every position of a block at once (block-diffusion style): it
propagates a small beam of its own hypotheses and reports each position's marginal. The tree
is built best-first from those per-position candidates and verified against the target;
the longest agreeing path plus the target's bonus token is committed.
"""

from __future__ import annotations

import codecs
import heapq
import math
import re
import zlib
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from operator import itemgetter
from pathlib import Path
from threading import Lock
from typing import TYPE_CHECKING

from tokenizers import Tokenizer

from ._corpus import TOPICS
from ._state import _ANSWER, _FORCED, _FRESH, _THINK, _State, _unit
from ._tables import ANSWER_START, DRAFT_TABLE, TABLE_NAMES, NGramTables, encode_key
from .verify import ForwardPass, FreeTarget, GrammarTarget, decode

if TYPE_CHECKING:
    from .grammar import Constraint

__all__ = [
    "MODEL_ID",
    "ForwardPass",
    "GenerationPlan",
    "ReferenceModel",
    "get_model",
    "tokenizer_path",
]

MODEL_ID = "ddtree-reference"
_HERE = Path(__file__).resolve().parent
#: temperature 0 is greedy over logits whose argmax falls on a candidate with its share of
#: counts**2 (sharper than the corpus; see ``ReferenceModel._greedy_logprobs``)
_ZERO_T_EXPONENT = 2.0
#: the hash slot of the greedy logits' maximum (no token id is negative)
_PEAK_SLOT = -1
#: the near-tie fault flips the target's token for its runner-up this close (nats): the size
#: of the flip real vLLM showed (0.125 nats between its top two), within the near-tie margin
_FLIP_MARGIN = 0.15
_DRAFT_BEAM = 8
_DRAFT_TOPK = 24
# cache sizes bound memory (a few tens of MB) while keeping hot contexts warm
_TREE_CACHE = 256
_DRAFT_CACHE = 4096
_DIST_CACHE = 100_000


def tokenizer_path() -> Path:
    """Path of the shipped ``tokenizer.json``."""
    return _HERE / "tokenizer.json"


def _bytes_to_unicode() -> dict[int, str]:
    # byte-level BPE renders every byte as a printable character; invert it to get raw bytes
    keep = list(range(ord("!"), ord("~") + 1))
    keep += list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    table: dict[int, str] = {}
    extra = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


_LONG_RE = re.compile(
    r"\b(essay|in detail|detailed|at length|long|lengthy|thorough|comprehensive|article|"
    r"report|story|paragraphs|\d{3,} words)\b",
    re.IGNORECASE,
)
_SHORT_RE = re.compile(
    r"\b(briefly|brief|one sentence|short answer|in short|quick question)\b", re.IGNORECASE
)
_QUESTION_START = re.compile(
    r"^\s*(what|who|where|when|which|how many|how much|is|are|does|do|can|name)\b",
    re.IGNORECASE,
)
_LIST_RE = re.compile(
    r"\b(?:list|name|give|write)\s+(?:me\s+)?(\d{1,3}|three|four|five|six|seven|eight|nine|ten|"
    r"twenty)\b|\b(?:numbered list|steps)\b",
    re.IGNORECASE,
)
_NUMBER_WORDS = {
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "twenty": 20,
}
_EXTRA_KEYWORDS: dict[str, tuple[str, ...]] = {
    "code": ("code", "function", "python", "program", "script", "implement", "loop", "def"),
    "arithmetic": ("plus", "minus", "times", "sum", "add", "calculate", "arithmetic", "math"),
    "facts": ("capital", "country", "city", "largest", "founded"),
}


@dataclass(frozen=True)
class GenerationPlan:
    """What the target intends for one request: derived from the prompt only."""

    table: int
    reasoning_table: int
    key: int
    max_sentences: int | None  # None: a long answer that never ends by itself
    min_tokens: int
    list_items: int | None  # numbered-list answer, or None for prose
    think: bool
    temperature: float = 0.0
    top_p: float = 1.0
    faults: frozenset[str] = frozenset()
    think_requested: bool = False
    start_context: tuple[int, int, int] | None = None  # stale context (state-leak fault)
    #: the chance the drafter keeps track of each token the target would accept (a long
    #: prompt lowers it: ``cost.draft_keep``); 1 at a short prompt
    draft_keep: float = 1.0


@dataclass
class _Tree:
    children: dict[tuple[int, int], int]
    first_child: list[int]
    tokens: list[int]
    nodes: int


class ReferenceModel:
    """Tokenizer, target model and drafter; :meth:`generate` runs the speculative decoding
    loop of :mod:`.verify`."""

    def __init__(self) -> None:
        self.tokenizer = Tokenizer.from_file(str(tokenizer_path()))
        self.tables = NGramTables(_HERE / "data" / "ngram.bin")
        vocab = self.tokenizer.get_vocab(with_added_tokens=True)
        self.vocab_size = len(vocab)
        inv = {c: b for b, c in _bytes_to_unicode().items()}
        self.pieces: list[bytes] = [b""] * self.vocab_size
        special = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"}
        for tok, i in vocab.items():
            if tok in special:
                self.pieces[i] = tok.encode()
            else:
                self.pieces[i] = bytes(inv.get(ch, 63) for ch in tok)
        self.eos = vocab["<|im_end|>"]
        self.endoftext = vocab["<|endoftext|>"]
        self.think_open = vocab["<think>"]
        self.think_close = vocab["</think>"]
        self.special_ids = frozenset(vocab[s] for s in special)
        self.newline = vocab["Ċ"]
        start = self.tokenizer.encode(ANSWER_START).ids
        self.start: tuple[int, int, int] = (start[0], start[1], start[2])
        # a sentence ends at a token ending in . ! ? that is followed by whitespace
        self.ends_sentence = [
            p.rstrip(b"\"')").endswith((b".", b"!", b"?")) and i not in self.special_ids
            for i, p in enumerate(self.pieces)
        ]
        self.bare_number = [p.isdigit() for p in self.pieces]
        self.starts_space = [p[:1] in (b" ", b"\n") for p in self.pieces]
        self._dist_cache: dict[
            tuple[int, int, int, int, float, float], tuple[Sequence[int], Sequence[float], float]
        ] = {}
        self._draft_cache: dict[
            tuple[int, int], list[tuple[tuple[int, ...], tuple[float, ...]]]
        ] = {}
        self._tree_cache: OrderedDict[tuple[int, int, int, int], _Tree] = OrderedDict()
        self._lock = Lock()
        self._foreign: tuple[int, ...] | None = None
        self._topic_words = {i: frozenset(t.keywords) for i, t in enumerate(TOPICS)}
        for name, words in _EXTRA_KEYWORDS.items():
            self._topic_words[TABLE_NAMES.index(name)] = frozenset(words)
        self._think_close_plain = (self.newline, self.think_close, self.newline, self.newline)
        # list numbering: "1." at the start, "\n2." ... at each later item
        self._numbers: list[tuple[int, ...]] = [()] + [
            tuple(self.encode(f"{k}." if k == 1 else f"\n{k}.")) for k in range(1, 202)
        ]

    # ---------------------------------------------------------------- text

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (special tokens in the text are recognised)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``, special tokens included."""
        return b"".join(self.pieces[i] for i in ids).decode("utf-8", "replace")

    def incremental_decoder(self) -> codecs.IncrementalDecoder:
        """A UTF-8 decoder for streaming pieces (a character may span tokens)."""
        return codecs.getincrementaldecoder("utf-8")("replace")

    @staticmethod
    def render_chat(messages: Sequence[tuple[str, str]], enable_thinking: bool) -> str:
        """ChatML rendering of ``(role, content)`` messages with the generation prompt."""
        parts = [f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in messages]
        parts.append("<|im_start|>assistant\n")
        if not enable_thinking:
            parts.append("<think>\n\n</think>\n\n")
        return "".join(parts)

    # ---------------------------------------------------------------- planning

    def plan(
        self,
        prompt_text: str,
        rendered: str,
        *,
        think: bool = False,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        faults: frozenset[str] = frozenset(),
        salt: int = 0,
    ) -> GenerationPlan:
        """Derive the target's plan from the request. Deterministic in its arguments."""
        h = zlib.crc32(rendered.encode("utf-8"))
        words = re.findall(r"[a-z]+", prompt_text.lower())
        best, best_score = -1, 0
        for table, kws in self._topic_words.items():
            score = sum(1 for w in words if w in kws)
            if score > best_score:
                best, best_score = table, score
        if best < 0:
            best = h % len(TOPICS)
        lm = _LIST_RE.search(prompt_text)
        list_items: int | None = None
        if lm and best < len(TOPICS):
            num = lm.group(1)
            if num is None:
                list_items = 5
            else:
                list_items = int(num) if num.isdigit() else _NUMBER_WORDS[num.lower()]
            list_items = max(1, min(list_items, 200))
        max_sentences = _max_sentences(prompt_text, words, list_items, h)
        if temperature > 0:
            key = seed if seed is not None else salt
            key = zlib.crc32(f"seed:{key}".encode())
        else:
            key = h ^ salt
        topic = TABLE_NAMES[best]
        return GenerationPlan(
            table=TABLE_NAMES.index(f"{topic}:list") if list_items is not None else best,
            reasoning_table=TABLE_NAMES.index(f"{topic}:reasoning"),
            key=key,
            max_sentences=max_sentences,
            min_tokens=8,
            list_items=list_items,
            think=think or "think-leak" in faults,
            think_requested=think,
            temperature=temperature,
            top_p=top_p,
            faults=faults,
        )

    # ---------------------------------------------------------------- target

    def _dist(
        self, table: int, c1: int, c2: int, c3: int, temperature: float, top_p: float
    ) -> tuple[Sequence[int], Sequence[float], float]:
        ck = (table, c1, c2, c3, temperature, top_p)
        hit = self._dist_cache.get(ck)
        if hit is not None:
            return hit
        found = None
        for ctx in ((c1, c2, c3), (c2, c3), (c3,), ()):
            found = self.tables.lookup(encode_key(table, ctx))
            if found is not None:
                break
        if found is None:  # the table's unigram always exists; this is defensive
            found = self.tables.lookup(encode_key(DRAFT_TABLE, ()))
            assert found is not None
        toks, counts = found
        expo = _ZERO_T_EXPONENT if temperature <= 0 else 1.0 / temperature
        weights = [c**expo for c in counts]
        total = sum(weights)
        if top_p < 1.0:
            acc, keep = 0.0, 0
            for w in weights:
                acc += w
                keep += 1
                if acc >= top_p * total:
                    break
            toks, weights = toks[:keep], weights[:keep]
        cum: list[float] = []
        acc = 0.0
        for w in weights:
            acc += w
            cum.append(acc)
        out = (toks, cum, acc)
        if len(self._dist_cache) > _DIST_CACHE:
            self._dist_cache.clear()
        self._dist_cache[ck] = out
        return out

    def initial_state(self, plan: GenerationPlan) -> _State:
        """The target's state before the first completion token."""
        c1, c2, c3 = plan.start_context or self.start
        if plan.think:
            if self._thinking_process_variant(plan):
                opening = tuple(self.encode("Thinking Process:\n"))
            else:
                opening = (self.think_open, self.newline)
            return (0, c1, c2, c3, 0, _FORCED, opening, 0, _THINK, 0, (), 0)
        return self._answer_state(plan, 0, (c1, c2, c3))

    def _thinking_process_variant(self, plan: GenerationPlan) -> bool:
        return (
            "think-leak" in plan.faults and not plan.think_requested and bool((plan.key >> 7) % 2)
        )

    def _answer_state(self, plan: GenerationPlan, pos: int, ctx: tuple[int, int, int]) -> _State:
        c1, c2, c3 = ctx
        if plan.list_items is not None:
            return (pos, c1, c2, c3, 0, _FORCED, self._numbers[1], 0, _ANSWER, 1, (), pos)
        return (pos, c1, c2, c3, 0, _ANSWER, (), 0, _ANSWER, 0, (), pos)

    def step(self, plan: GenerationPlan, s: _State) -> tuple[int, _State]:
        """The target's next token in state ``s`` and the state after it."""
        pos, c1, c2, c3, sent, phase, forced, fidx, after, line, buf, a0 = s
        faults = plan.faults
        if faults and "early-eos" in faults and pos >= 4 + plan.key % 3:
            return self.eos, s
        if phase == _FORCED:
            tok = forced[fidx]
            if fidx + 1 < len(forced):
                return tok, _forced(pos + 1, c2, c3, forced, fidx + 1, sent, after, line, buf, a0)
            if after == _FRESH:
                # the reasoning block has closed: the answer starts from a fresh context
                return tok, self._answer_state(plan, pos + 1, self.start)
            return tok, (pos + 1, c2, c3, tok, sent, after, (), 0, after, line, buf, a0)
        table = plan.reasoning_table if phase == _THINK else plan.table
        toks, cum, total = self._dist(table, c1, c2, c3, plan.temperature, plan.top_p)
        u = (hash((plan.key, pos, c1, c2, c3)) & 0xFFFFFFFF) / 4294967296.0
        i = bisect_right(cum, u * total)
        tok = toks[i if i < len(toks) else len(toks) - 1]
        if self.ends_sentence[c3] and self.starts_space[tok] and not self.bare_number[c2]:
            sent += 1
            nxt = pos + 1
            if phase == _THINK:
                if sent >= 2 + plan.key % 2:
                    close: tuple[int, ...] = self._think_close_plain
                    if self._thinking_process_variant(plan):
                        close = (self.newline, self.newline)
                    return close[0], _forced(nxt, c2, c3, close, 1, 0, _FRESH, 0, (), a0)
            elif faults and "degenerate" in faults:
                rep = tuple(self.encode(" " + self.decode(buf).strip())) if buf else (tok,)
                if len(rep) == 1:
                    return rep[0], (
                        nxt,
                        c2,
                        c3,
                        rep[0],
                        sent,
                        _ANSWER,
                        (),
                        0,
                        _ANSWER,
                        line,
                        buf,
                        a0,
                    )
                return rep[0], _forced(nxt, c2, c3, rep, 1, sent, _ANSWER, line, buf, a0)
            else:
                stop = plan.max_sentences is not None and sent >= plan.max_sentences
                if faults and "role-leak" in faults and line >= 0 and (sent >= 2 or stop):
                    leak = self._role_leak(plan)
                    return leak[0], _forced(nxt, c2, c3, leak, 1, sent, _ANSWER, -1, buf, a0)
                if stop and pos - a0 >= plan.min_tokens:
                    return self.eos, s
                if plan.list_items is not None and line > 0:
                    num = self._numbers[line + 1]
                    return num[0], _forced(nxt, c2, c3, num, 1, sent, _ANSWER, line + 1, buf, a0)
        elif faults and "degenerate" in faults and sent == 0 and phase == _ANSWER and len(buf) < 48:
            buf = (*buf, tok)
        return tok, (pos + 1, c2, c3, tok, sent, phase, (), 0, phase, line, buf, a0)

    def _role_leak(self, plan: GenerationPlan) -> tuple[int, ...]:
        if plan.key % 2:
            return tuple(self.encode("\n<|im_start|>user\nCan you tell me more?"))
        return tuple(self.encode("\nuser: Can you tell me more?\nassistant:"))

    def advance(self, plan: GenerationPlan, s: _State, tok: int) -> _State:
        """The state after committing ``tok`` whatever the target would have chosen."""
        pos, _c1, c2, c3, sent, phase, _forced, _fidx, after, line, buf, a0 = s
        if phase == _FORCED:
            phase = _ANSWER if after == _FRESH else after
        return (pos + 1, c2, c3, tok, sent, phase, (), 0, phase, line, buf, a0)

    # ---------------------------------------------------------------- drafter

    def draft_block(
        self, c2: int, c3: int, depth: int
    ) -> list[tuple[tuple[int, ...], tuple[float, ...]]]:
        """Per-position (tokens, log-probabilities) for ``depth`` positions after (c2, c3)."""
        key = (c2, c3)
        hit = self._draft_cache.get(key)
        if hit is not None and len(hit) >= depth:
            return hit
        out: list[tuple[tuple[int, ...], tuple[float, ...]]] = []
        # the beam holds distinct two-token contexts (packed as b * VOCAB + t) with their mass
        vocab = self.vocab_size
        beam: list[tuple[int, float]] = [(c2 * vocab + c3, 1.0)]
        dist = self._draft_dist
        log = math.log
        for _ in range(max(depth, 15)):
            marg: dict[int, float] = {}
            ctxs: dict[int, float] = {}
            for packed, p in beam:
                a, b = divmod(packed, vocab)
                toks, probs = dist(a, b)
                base = b * vocab
                for t, q in zip(toks, probs, strict=True):
                    pq = p * q
                    marg[t] = marg.get(t, 0.0) + pq
                    ctxs[base + t] = ctxs.get(base + t, 0.0) + pq
            # nlargest is stable, so ties keep a deterministic (insertion) order
            ranked = heapq.nlargest(_DRAFT_TOPK, marg.items(), key=itemgetter(1))
            z = sum(marg.values()) or 1.0
            out.append((tuple(t for t, _ in ranked), tuple(log(v / z) for _, v in ranked)))
            beam = heapq.nlargest(_DRAFT_BEAM, ctxs.items(), key=itemgetter(1))
            zz = sum(v for _, v in beam) or 1.0
            beam = [(k, v / zz) for k, v in beam]
        if len(self._draft_cache) > _DRAFT_CACHE:
            self._draft_cache.clear()
        self._draft_cache[key] = out
        return out

    @cache  # noqa: B019 - one model per process; the cache is the drafter's weights
    def _draft_dist(self, a: int, b: int) -> tuple[tuple[int, ...], tuple[float, ...]]:
        for ctx in ((a, b), (b,), ()):
            found = self.tables.lookup(encode_key(DRAFT_TABLE, ctx))
            if found is not None:
                toks, counts = found
                toks, counts = toks[:_DRAFT_TOPK], counts[:_DRAFT_TOPK]
                z = float(sum(counts))
                return toks, tuple(c / z for c in counts)
        return (), ()

    def build_tree(self, c2: int, c3: int, budget: int, block_size: int) -> _Tree:
        """Best-first draft tree with ``budget`` non-root nodes (DDTree construction)."""
        depth = block_size - 1
        ck = (c2, c3, budget, block_size)
        with self._lock:
            tree = self._tree_cache.get(ck)
            if tree is not None:
                self._tree_cache.move_to_end(ck)
                return tree
        block = self.draft_block(c2, c3, depth)
        children: dict[tuple[int, int], int] = {}
        first_child: list[int] = [-1]
        tokens: list[int] = [-1]
        parent_of: list[int] = [-1]
        # heap items: (-score, tie, parent node, depth index, rank, parent score)
        heap: list[tuple[float, int, int, int, int, float]] = []
        if depth > 0 and block[0][0]:
            heap.append((-block[0][1][0], 0, 0, 0, 0, 0.0))
        tie = 1
        n = 0
        while heap and n < budget:
            neg, _, parent, d, rank, pscore = heapq.heappop(heap)
            toks, lps = block[d]
            tok = toks[rank]
            n += 1
            children[(parent, tok)] = n
            tokens.append(tok)
            parent_of.append(parent)
            first_child.append(-1)
            if rank == 0:
                first_child[parent] = n
            score = -neg
            if rank + 1 < len(toks):
                heapq.heappush(heap, (-(pscore + lps[rank + 1]), tie, parent, d, rank + 1, pscore))
                tie += 1
            if d + 1 < depth and block[d + 1][0]:
                heapq.heappush(heap, (-(score + block[d + 1][1][0]), tie, n, d + 1, 0, score))
                tie += 1
        tree = _Tree(children, first_child, tokens, n)
        with self._lock:
            self._tree_cache[ck] = tree
            if len(self._tree_cache) > _TREE_CACHE:
                self._tree_cache.popitem(last=False)
        return tree

    # ---------------------------------------------------------------- log-probabilities

    def logprobs(
        self, plan: GenerationPlan, s: _State, tok: int, top: int
    ) -> tuple[float, list[tuple[int, float]]]:
        """The target's log-probability of ``tok`` in state ``s`` and its ``top`` best tokens.

        A token drawn from the context's distribution has its share of it; at temperature 0
        its log-softmax share of the greedy logits (:meth:`_greedy_logprobs`), where the
        target's own token is always the best. A token a rule decides (a forced sequence, a
        stop, a list number) is certain; a token outside the distribution of a free position
        (one a faulty verifier committed) has none (minus infinity).
        """
        dist = self._candidates(plan, s, greedy=True)
        if dist is None:
            return 0.0, [(tok, 0.0)]
        if tok not in dist or tok != self._drawn(plan, s):
            ruled, _ = self.step(plan, s)
            if ruled == tok:  # a rule overrode the draw: the target is sure of its token
                return 0.0, [(tok, 0.0)]
        best = sorted(dist.items(), key=lambda kv: -kv[1])[:top]
        return dist.get(tok, -math.inf), best

    def _candidates(
        self, plan: GenerationPlan, s: _State, *, greedy: bool = False
    ) -> dict[int, float] | None:
        """Log-probability of every candidate of a freely drawn position (None: a rule's).

        The candidates' shares of the context's distribution, or with ``greedy`` at
        temperature 0 the log-softmax of the greedy logits (the same candidates).
        """
        phase = s[5]
        if phase == _FORCED or (plan.faults and "early-eos" in plan.faults):
            return None
        if greedy and plan.temperature <= 0:
            return self._greedy_logprobs(plan, s)
        table = plan.reasoning_table if phase == _THINK else plan.table
        toks, cum, total = self._dist(table, s[1], s[2], s[3], plan.temperature, plan.top_p)
        out: dict[int, float] = {}
        prev = 0.0
        for t, c in zip(toks, cum, strict=True):
            if c > prev:
                out[t] = math.log((c - prev) / total)
            prev = c
        return out

    def _drawn(self, plan: GenerationPlan, s: _State) -> int:
        """The token the target draws at the free position ``s``, before any rule (as
        :meth:`step` draws it)."""
        pos, c1, c2, c3 = s[0], s[1], s[2], s[3]
        table = plan.reasoning_table if s[5] == _THINK else plan.table
        toks, cum, total = self._dist(table, c1, c2, c3, plan.temperature, plan.top_p)
        u = (hash((plan.key, pos, c1, c2, c3)) & 0xFFFFFFFF) / 4294967296.0
        i = bisect_right(cum, u * total)
        return toks[i if i < len(toks) else len(toks) - 1]

    def _greedy_logprobs(self, plan: GenerationPlan, s: _State) -> dict[int, float]:
        """The log-softmax of the target's logits at the free position ``s``, temperature 0.

        The logits are ``a + g``: ``a`` the log-weight of each candidate
        (``_ZERO_T_EXPONENT * log(count)``), ``g`` a Gumbel(0, 1) noise fixed by (sampling
        key, position, context, token). Their argmax is the token :meth:`step` draws, so
        temperature 0 is greedy decoding of these logits, and by the Gumbel-max property the
        argmax falls on each candidate with its share of the weights: answers vary and do
        not loop, as a corpus model's plain greedy path would. The noise is drawn top-down
        (Maddison et al., A* sampling): the maximum, Gumbel around the log of the total
        weight, goes to the drawn token; every other candidate's logit is a Gumbel around its
        ``a`` truncated below that maximum, from a uniform hashed from its token. The joint
        law is that of independent noises, and the text is the one the draw gives.
        """
        pos, c1, c2, c3 = s[0], s[1], s[2], s[3]
        table = plan.reasoning_table if s[5] == _THINK else plan.table
        toks, cum, total = self._dist(table, c1, c2, c3, plan.temperature, plan.top_p)
        key = plan.key
        u = (hash((key, pos, c1, c2, c3)) & 0xFFFFFFFF) / 4294967296.0
        k = min(bisect_right(cum, u * total), len(toks) - 1)
        log = math.log
        exp = math.exp
        peak = log(total) - log(-log(_unit(key, pos, c1, c2, c3, _PEAK_SLOT)))
        logits: dict[int, float] = {}
        prev = 0.0
        for i, (t, c) in enumerate(zip(toks, cum, strict=True)):
            w, prev = c - prev, c
            if w <= 0:
                continue
            if i == k:
                logits[t] = peak
                continue
            a = log(w)
            # inverse CDF of a Gumbel around ``a`` truncated below ``peak`` (a <= log(total)
            # and peak > log(total) - 4, so the exponent stays small)
            logits[t] = a - log(exp(a - peak) - log(_unit(key, pos, c1, c2, c3, t)))
        z = peak + log(sum(exp(x - peak) for x in logits.values()))
        return {t: x - z for t, x in logits.items()}

    def impossible(self, plan: GenerationPlan, s: _State, tok: int) -> bool:
        """True when the target, free to choose in state ``s``, gives ``tok`` no probability."""
        dist = self._candidates(plan, s)
        return dist is not None and tok not in dist

    def near_tie(self, plan: GenerationPlan, s: _State, s2: _State, tok: int) -> int | None:
        """The target's runner-up at a free position where its logits put it within
        ``_FLIP_MARGIN`` nats of the target's ``tok`` (temperature 0): the near-tie a
        batched verification can flip."""
        if not (s[5] == s2[5] != _FORCED and s[4] == s2[4] and s2[0] == s[0] + 1):
            return None
        dist = self._candidates(plan, s, greedy=True)
        if dist is None or tok not in dist:
            return None
        mine = dist[tok]
        rival = max(((lp, t) for t, lp in dist.items() if t != tok), default=None)
        if rival is None or mine - rival[0] > _FLIP_MARGIN:
            return None
        return rival[1]

    def foreign_token(self, plan: GenerationPlan, s: _State) -> int | None:
        """A whole-word token the target gives no probability in state ``s``, where it is free
        to choose (None where a rule decides the token): the corrupted step of a faulty server.

        Chosen from the vocabulary's alphabetic words by the state's position, so one state
        always gets the same token.
        """
        dist = self._candidates(plan, s)
        if dist is None:
            return None
        words = self._foreign_words()
        start = s[0] * 7919 % len(words)
        for k in range(len(words)):
            tok = words[(start + k) % len(words)]
            if tok not in dist:
                return tok
        return None

    def _foreign_words(self) -> tuple[int, ...]:
        with self._lock:
            if self._foreign is None:
                self._foreign = tuple(
                    i
                    for i, p in enumerate(self.pieces)
                    if p[:1] == b" " and len(p) >= 5 and p[1:].isalpha() and p[1:].islower()
                )
            return self._foreign

    # ---------------------------------------------------------------- decoding

    def generate(
        self,
        plan: GenerationPlan,
        max_tokens: int,
        budget: int | None,
        block_size: int = 16,
    ) -> Iterator[ForwardPass]:
        """Decode up to ``max_tokens`` tokens, one :class:`ForwardPass` per target forward pass.

        ``budget=None`` is plain target decoding. The end-of-turn token, when the target
        emits it, is the last token of the last pass and is not counted by the caller.
        """
        return decode(self, plan, max_tokens, budget, block_size, FreeTarget(self, plan, budget))

    def generate_constrained(
        self,
        plan: GenerationPlan,
        max_tokens: int,
        budget: int | None,
        grammar: Constraint,
        block_size: int = 16,
        *,
        skip_above: int | None = None,
    ) -> Iterator[ForwardPass]:
        """:meth:`generate` under a grammar: the target's choice at each step is the
        grammar's (``Constraint.choose``), and a drafted token is accepted only when it is
        that choice, so a token the grammar forbids is never accepted. ``skip_above`` (the
        grammar-skip fault) accepts once, above that budget, a drafted token the grammar
        forbids, as a verifier that skips the grammar on drafted tokens does."""
        target = GrammarTarget(self, plan, grammar, budget, skip_above)
        return decode(self, plan, max_tokens, budget, block_size, target)

    def ranked(self, plan: GenerationPlan, s: _State) -> list[int]:
        """The target's candidates in state ``s``, most likely first."""
        _pos, c1, c2, c3 = s[0], s[1], s[2], s[3]
        toks, cum, _total = self._dist(plan.table, c1, c2, c3, plan.temperature, plan.top_p)
        weights = [c - p for c, p in zip(cum, (0.0, *cum[:-1]), strict=True)]
        order = sorted(range(len(toks)), key=lambda i: -weights[i])
        return [toks[i] for i in order]


def _forced(
    pos: int,
    c2: int,
    c3: int,
    seq: tuple[int, ...],
    idx: int,
    sent: int,
    after: int,
    line: int,
    buf: tuple[int, ...],
    a0: int,
) -> _State:
    """The state after ``seq[idx - 1]``, a token of the forced sequence ``seq`` a rule
    emits (``after``: the phase once it is out)."""
    return (pos, c2, c3, seq[idx - 1], sent, _FORCED, seq, idx, after, line, buf, a0)


def _max_sentences(
    prompt_text: str, words: list[str], list_items: int | None, h: int
) -> int | None:
    """How many sentences the answer to ``prompt_text`` has (None: a long answer that never
    ends by itself); ``h`` is the rendered prompt's hash."""
    if _LONG_RE.search(prompt_text) or (list_items is not None and list_items >= 8):
        return None
    if list_items is not None:
        return list_items
    if _SHORT_RE.search(prompt_text) or (
        prompt_text.rstrip().endswith("?")
        and _QUESTION_START.search(prompt_text)
        and len(words) <= 24
    ):
        return 1 + (h >> 3) % 2
    return 5 + (h >> 5) % 4


_MODEL: ReferenceModel | None = None
_MODEL_LOCK = Lock()


def get_model() -> ReferenceModel:
    """The process-wide model (loaded once; read-only afterwards)."""
    global _MODEL
    with _MODEL_LOCK:
        if _MODEL is None:
            _MODEL = ReferenceModel()
        return _MODEL
