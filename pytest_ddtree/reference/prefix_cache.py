"""The reference server's prefix cache: a model of a real engine's automatic prefix caching.

vLLM and SGLang keep the KV blocks of prompts they have prefilled and reuse them for a later
prompt that starts with the same tokens; llama.cpp keeps each slot's last prompt. Here a
prompt's tokens are cut into blocks of ``block`` tokens and each block is keyed by a hash of
the whole prefix up to its end (so a block is reused only after the very same tokens), plus
one key for the whole prompt: an identical repeat reuses everything. ``prefill`` finds the
longest cached prefix of a prompt, records the prompt's blocks, and says how many tokens
were reused; only the rest is prefilled (``CostModel.prefill_seconds``).

Bounded (least recently used blocks go first) and thread-safe. Imports nothing of the
package.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Prefill", "PrefixCache"]


@dataclass(frozen=True)
class Prefill:
    """One prompt's prefill: its length and how many of its first tokens the cache held."""

    prompt_tokens: int
    cached_tokens: int

    @property
    def cold(self) -> bool:
        """True when some of the prompt had to be prefilled (it was not all in the cache)."""
        return self.cached_tokens < self.prompt_tokens

    @property
    def computed_tokens(self) -> int:
        """Tokens the prefill computes: the uncached ones, and at least the last (its logits
        give the first output token)."""
        return max(self.prompt_tokens - self.cached_tokens, 1 if self.prompt_tokens else 0)


class PrefixCache:
    """Prompt prefixes seen before, in blocks of ``block`` tokens, at most ``capacity`` keys."""

    def __init__(self, block: int = 16, capacity: int = 4096) -> None:
        if block < 1 or capacity < 1:
            raise ValueError(f"PrefixCache: block {block} and capacity {capacity} must be >= 1")
        self.block = block
        self.capacity = capacity
        self._keys: OrderedDict[int, None] = OrderedDict()
        self._lock = threading.Lock()
        self.queries = 0  # prompt tokens looked up (vLLM's prefix_cache_queries)
        self.hits = 0  # of those, tokens found cached (vLLM's prefix_cache_hits)

    def _boundaries(self, tokens: Sequence[int]) -> list[tuple[int, int]]:
        """(length, key) of every block boundary of ``tokens`` and of its whole length."""
        n = len(tokens)
        ends = list(range(self.block, n + 1, self.block))
        if n and (not ends or ends[-1] != n):
            ends.append(n)
        return [(end, hash(("prefix", tuple(tokens[:end])))) for end in ends]

    def prefill(self, tokens: Sequence[int]) -> Prefill:
        """Look ``tokens`` up (the longest cached prefix) and cache all of its blocks."""
        bounds = self._boundaries(tokens)
        with self._lock:
            cached = 0
            for end, key in bounds:
                if key not in self._keys:
                    break
                cached = end
            for _, key in bounds:
                self._keys[key] = None
                self._keys.move_to_end(key)
            while len(self._keys) > self.capacity:
                self._keys.popitem(last=False)
            self.queries += len(tokens)
            self.hits += cached
        return Prefill(len(tokens), cached)

    def __len__(self) -> int:
        with self._lock:
            return len(self._keys)
