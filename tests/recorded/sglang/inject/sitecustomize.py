"""Invented speculative counters for a real SGLang server that does not speculate.

Put this directory on ``PYTHONPATH`` of an SGLang server and set
``DDTREE_INVENTED_SPEC_COUNTERS=1``: when SGLang's ``TokenizerManager`` finishes a
request, the scheduler's per-request counters it receives (``spec_verify_ct``,
``spec_num_correct_drafts``, ``spec_correct_drafts_histogram`` of the batch output)
are filled with invented values just before SGLang's own
``_calculate_spec_decoding_metrics`` reads them. Everything after that point is
SGLang's code: ``meta_info``, ``sglext.spec_tokens_details``, the stream chunk
that carries it, the ``sglang:spec_verify_calls_total`` counter.

The values are invented (the server never drafted anything), but they follow how
SGLang's scheduler counts a real speculative request: the first token comes from
the prefill; each verify step then commits its accepted drafts plus one bonus
token, with accepted-draft counts cycling through ``PATTERN`` (at most
``DRAFT_TOKENS - 1`` per step); the last step may commit past the end of the answer
(SGLang counts a whole verify step even when a stop or the length limit cuts it).
Without the environment variable this file does nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from typing import Any

MODULE = "sglang.srt.managers.tokenizer_manager"
#: the pretended ``--speculative-num-draft-tokens`` (3 drafts per verify step, plus the bonus)
DRAFT_TOKENS = 4
#: accepted drafts of successive verify steps (invented)
PATTERN = (2, 0, 1, 3)


def invented_counters(completion_tokens: int) -> tuple[int, int, list[int]]:
    """(verify steps, accepted drafts, histogram) for an answer of ``completion_tokens``."""
    verify = correct = committed = 0
    hist = [0] * DRAFT_TOKENS
    while committed < completion_tokens - 1:  # the prefill made the first token
        accepted = PATTERN[verify % len(PATTERN)]
        verify += 1
        correct += accepted
        committed += accepted + 1
        hist[accepted] += 1
    while len(hist) > 1 and hist[-1] == 0:  # SGLang's histogram is as long as it grew
        hist.pop()
    return verify, correct, hist


def _fill(recv_obj: Any, i: int) -> None:
    size = len(recv_obj.completion_tokens)
    verify, correct, hist = invented_counters(int(recv_obj.completion_tokens[i]))
    for name, value in (("spec_verify_ct", verify), ("spec_num_correct_drafts", correct)):
        values = list(getattr(recv_obj, name, None) or [0] * size)
        values[i] = value
        setattr(recv_obj, name, values)
    hists = list(getattr(recv_obj, "spec_correct_drafts_histogram", None) or [[]] * size)
    hists[i] = hist
    recv_obj.spec_correct_drafts_histogram = hists


def _patch(module: Any) -> None:
    real_get_spec = module.get_spec

    class Pretended:
        """SGLang's speculative settings as if n-gram speculation were on."""

        speculative_algorithm = "NGRAM"
        speculative_num_draft_tokens = DRAFT_TOKENS

        def __getattr__(self, name: str) -> Any:
            return getattr(real_get_spec(), name)

    pretended = Pretended()
    calculate = module.TokenizerManager._calculate_spec_decoding_metrics

    def filled(self: Any, meta_info: Any, recv_obj: Any, i: int) -> Any:
        _fill(recv_obj, i)
        return calculate(self, meta_info, recv_obj, i)

    module.TokenizerManager._calculate_spec_decoding_metrics = filled
    module.get_spec = lambda: pretended
    print("invented speculative counters: on (values are not real)", file=sys.stderr)


class _Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            _patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if os.environ.get("DDTREE_INVENTED_SPEC_COUNTERS") == "1":
    sys.meta_path.insert(0, _Hook())
