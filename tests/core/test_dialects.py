"""Each statistics dialect parsed from real-shaped responses, and budget placement."""

from __future__ import annotations

import pytest

from pytest_ddtree.core.dialects.llamacpp import bad_fields
from pytest_ddtree.wire import dialects

DDTREE_RESPONSE = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 9, "completion_tokens": 120, "total_tokens": 129},
    "ddtree_stats": {
        "tree_budget": 64,
        "cycles": 30,
        "avg_acceptance": 4.0,
        "tok_per_sec": 812.5,
        "block_size": 16,
        "draft_ms": 1.5,
        "verify_ms": 3.0,
    },
}
VLLM_RESPONSE = {
    "object": "chat.completion",
    "choices": [],
    "metrics": {
        "speculative_decoding": {
            "num_spec_steps": 25,
            "num_draft_tokens": 375,
            "num_accepted_draft_tokens": 75,
            "draft_acceptance_rate": 0.2,
        }
    },
}
SGLANG_RESPONSE = {
    "text": "hello",
    "meta_info": {
        "prompt_tokens": 7,
        "completion_tokens": 64,
        "spec_verify_ct": 16,
        "spec_accept_length": 4.0,
        "e2e_latency": 0.5,
    },
}
OMLX_RESPONSE = {
    "object": "chat.completion",
    "usage": {
        "prompt_tokens": 5,
        "completion_tokens": 100,
        "total_tokens": 105,
        "dflash_ddtree_tree_budget": 128,
        "dflash_ddtree_cycles_completed": 20,
        "dflash_ddtree_avg_acceptance": 5.0,
        "dflash_ddtree_tokens_per_second": 250.0,
    },
}


def test_detect_each_dialect() -> None:
    assert dialects.detect([DDTREE_RESPONSE]) == "ddtree"
    assert dialects.detect([VLLM_RESPONSE]) == "vllm"
    assert dialects.detect([SGLANG_RESPONSE]) == "sglang"
    assert dialects.detect([OMLX_RESPONSE]) == "omlx"
    assert dialects.detect([{"choices": []}, "garbage", None]) == "none"


def test_ddtree() -> None:
    s = dialects.extract_stats("auto", [DDTREE_RESPONSE])
    assert s is not None
    assert (s.dialect, s.tree_budget, s.decode_rounds, s.block_size) == ("ddtree", 64, 30, 16)
    assert s.mean_acceptance_length == 4.0
    assert s.server_tokens_per_second == 812.5
    assert s.raw["draft_ms"] == 1.5


def test_vllm_derives_tau_from_accepted_drafts() -> None:
    s = dialects.extract_stats("vllm", [VLLM_RESPONSE])
    assert s is not None
    assert s.decode_rounds == 25
    assert s.num_draft_tokens == 375
    assert s.mean_acceptance_length == pytest.approx(1 + 75 / 25)
    assert s.tree_budget is None


def test_sglang_and_omlx() -> None:
    s = dialects.extract_stats("sglang", [SGLANG_RESPONSE])
    assert s is not None and (s.decode_rounds, s.mean_acceptance_length) == (16, 4.0)
    o = dialects.extract_stats("omlx", [OMLX_RESPONSE])
    assert o is not None
    assert (o.tree_budget, o.decode_rounds, o.mean_acceptance_length) == (128, 20, 5.0)
    assert o.server_tokens_per_second == 250.0
    assert "prompt_tokens" not in o.raw


def test_stream_takes_the_last_carrier() -> None:
    chunks = [
        {"object": "chat.completion.chunk", "choices": [{"delta": {"role": "assistant"}}]},
        {"object": "chat.completion.chunk", "choices": [{"delta": {"content": "a"}}]},
        {
            "object": "chat.completion.chunk",
            "choices": [],
            "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
        },
        {"object": "chat.completion.chunk", "choices": [], **{"ddtree_stats": {"cycles": 2}}},
    ]
    s = dialects.extract_stats("auto", chunks)
    assert s is not None and s.decode_rounds == 2
    u = dialects.extract_usage(chunks)
    assert u is not None and u.completion_tokens == 2


def test_custom_pointers() -> None:
    doc = {"meta": {"rounds": 12, "mean/accept": 3.5, "list": [{"b": 64}]}}
    s = dialects.extract_stats(
        "custom",
        [doc],
        {
            "decode_rounds": "/meta/rounds",
            "mean_acceptance_length": "/meta/mean~1accept",
            "tree_budget": "/meta/list/0/b",
        },
    )
    assert s is not None
    assert (s.decode_rounds, s.mean_acceptance_length, s.tree_budget) == (12, 3.5, 64)
    assert dialects.extract_stats("custom", [doc], {"decode_rounds": "/nope"}) is None


def test_garbage_values_become_unknown() -> None:
    bad = {
        "ddtree_stats": {
            "tree_budget": "64",
            "cycles": True,
            "avg_acceptance": float("nan"),
            "tok_per_sec": None,
        }
    }
    s = dialects.extract_stats("ddtree", [bad])
    assert s is not None
    assert s.tree_budget is None and s.decode_rounds is None
    assert s.mean_acceptance_length is None and s.server_tokens_per_second is None
    assert dialects.extract_stats("none", [DDTREE_RESPONSE]) is None


def test_usage_with_reasoning_details() -> None:
    u = dialects.extract_usage(
        [
            {
                "usage": {
                    "prompt_tokens": 3,
                    "completion_tokens": 10,
                    "total_tokens": 13,
                    "completion_tokens_details": {"reasoning_tokens": 4},
                }
            }
        ]
    )
    assert u is not None and u.reasoning_tokens == 4


def test_put_budget_dotted_path_does_not_mutate() -> None:
    body = {"model": "m", "extra": {"x": 1}}
    out = dialects.put_budget(body, "extra.ddtree.budget", 64)
    assert out == {"model": "m", "extra": {"x": 1, "ddtree": {"budget": 64}}}
    assert body == {"model": "m", "extra": {"x": 1}}
    assert dialects.put_budget({}, "tree_budget", 16) == {"tree_budget": 16}


# llama.cpp: the final usage chunk of a stream, as its server sends it
LLAMACPP_CHUNK = {
    "choices": [],
    "object": "chat.completion.chunk",
    "usage": {"completion_tokens": 64, "prompt_tokens": 37, "total_tokens": 101},
    "timings": {
        "cache_n": 36,
        "prompt_n": 1,
        "prompt_ms": 25.6,
        "prompt_per_token_ms": 25.6,
        "prompt_per_second": 39.0,
        "predicted_n": 64,
        "predicted_ms": 1756.5,
        "predicted_per_token_ms": 27.9,
        "predicted_per_second": 35.87,
        "draft_n": 47,
        "draft_n_accepted": 40,
    },
}


def test_llamacpp_detected_from_the_final_chunk() -> None:
    chunks = [{"choices": [{"delta": {"content": "a"}}]}, LLAMACPP_CHUNK]
    assert dialects.detect(chunks) == "llamacpp"
    s = dialects.extract_stats("auto", chunks)
    assert s is not None and s.dialect == "llamacpp"
    assert (s.num_draft_tokens, s.num_accepted_draft_tokens) == (47, 40)
    assert s.acceptance_rate == pytest.approx(40 / 47)
    assert s.server_tokens_per_second == 35.87
    # rounds are not reported per response: the length stays unknown
    assert s.mean_acceptance_length is None and s.decode_rounds is None


def test_llamacpp_without_a_draft_is_zero_drafted_rate_unknown() -> None:
    timings = {k: v for k, v in LLAMACPP_CHUNK["timings"].items() if not k.startswith("draft")}
    s = dialects.extract_stats("llamacpp", [{"timings": timings}])
    assert s is not None
    assert (s.num_draft_tokens, s.num_accepted_draft_tokens) == (0, 0)
    assert s.acceptance_rate is None


def test_explicit_statistics_win_over_timings() -> None:
    both = {**DDTREE_RESPONSE, "timings": LLAMACPP_CHUNK["timings"]}
    assert dialects.detect([both]) == "ddtree"


def test_llamacpp_bad_types_are_named() -> None:
    timings = {**LLAMACPP_CHUNK["timings"], "draft_n": "47", "predicted_per_second": -1}
    s = dialects.extract_stats("llamacpp", [{"timings": timings}])
    assert s is not None and s.num_draft_tokens is None and s.server_tokens_per_second is None
    assert bad_fields(s.raw) == [
        ("predicted_per_second", -1),
        ("draft_n", "47"),
    ]


def test_json_pointer_budget_keeps_dots_literal() -> None:
    body = {"model": "m"}
    out = dialects.put_budget(body, "/speculative.n_max", 8)
    assert out == {"model": "m", "speculative.n_max": 8}
    assert dialects.drop_path(out, "/speculative.n_max") == {"model": "m"}
    nested = dialects.put_budget({}, "/extra/ddtree/budget", 4)
    assert nested == {"extra": {"ddtree": {"budget": 4}}}
    assert dialects.drop_path(nested, "/extra/ddtree/budget") == {"extra": {"ddtree": {}}}
    assert dialects.put_budget({}, "/a~1b~0c", 2) == {"a/b~c": 2}
    # the dotted form still nests
    assert dialects.put_budget({}, "speculative.n_max", 8) == {"speculative": {"n_max": 8}}
