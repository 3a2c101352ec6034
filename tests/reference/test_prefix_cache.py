"""The reference server's prefix cache: reuse of whole blocks of a prompt seen before."""

from __future__ import annotations

import threading

import pytest

from pytest_ddtree.reference.prefix_cache import PrefixCache


def test_a_repeat_is_warm_and_a_new_prompt_cold() -> None:
    cache = PrefixCache(block=4)
    first = cache.prefill(list(range(10)))
    assert (first.cached_tokens, first.cold, first.computed_tokens) == (0, True, 10)
    again = cache.prefill(list(range(10)))
    # all of it is reused; the last token is still computed (its logits give the first token)
    assert (again.cached_tokens, again.cold, again.computed_tokens) == (10, False, 1)


def test_a_shared_prefix_is_reused_in_whole_blocks() -> None:
    cache = PrefixCache(block=4)
    cache.prefill([1, 2, 3, 4, 5, 6, 7, 8, 9])
    # the first two blocks agree; the third differs at its last token
    hit = cache.prefill([1, 2, 3, 4, 5, 6, 7, 8, 0, 0])
    assert (hit.cached_tokens, hit.cold) == (8, True)
    # a change in the first token makes every later block new
    assert cache.prefill([0, 2, 3, 4, 5, 6, 7, 8, 9]).cached_tokens == 0
    assert (cache.queries, cache.hits) == (28, 8)


def test_bounded_least_recently_used_first() -> None:
    cache = PrefixCache(block=2, capacity=4)
    cache.prefill([1, 2, 3, 4])  # 2 keys
    cache.prefill([5, 6, 7, 8])  # 2 more: full
    cache.prefill([1, 2, 3, 4])  # used again: the other prompt is now the oldest
    cache.prefill([9, 9])  # one key in: the oldest goes
    assert len(cache) == 4
    assert cache.prefill([1, 2, 3, 4]).cached_tokens == 4
    assert cache.prefill([5, 6, 7, 8]).cached_tokens < 4


def test_concurrent_prefills_count_every_lookup() -> None:
    cache = PrefixCache(block=4, capacity=64)
    prompts = [[k] * 12 for k in range(8)]

    def work() -> None:
        for p in prompts * 20:
            cache.prefill(p)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.queries == 4 * 20 * 8 * 12
    assert len(cache) == 8 * 3
    assert all(cache.prefill(p).cached_tokens == 12 for p in prompts)


@pytest.mark.parametrize(("block", "capacity"), [(0, 10), (4, 0)])
def test_bad_sizes_are_refused(block: int, capacity: int) -> None:
    with pytest.raises(ValueError, match=f"block {block} and capacity {capacity}"):
        PrefixCache(block=block, capacity=capacity)
