"""The target's margin at a temperature-0 divergence: log-probabilities in every engine's shape,
the classification (near-tie, confident, unknown) and the ``--ddtree-lossless`` option."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from pytest_ddtree.checks.margin import Margin, classify, probe_fields
from pytest_ddtree.core.options import resolve
from pytest_ddtree.core.settings import DEFAULT_NEAR_TIE, Lossless, SettingsError
from pytest_ddtree.wire import dialects
from pytest_ddtree.wire.completion import Completion, RequestSpec, Timings, TokenLogprob
from pytest_ddtree.wire.protocol import Exchange, StreamDecoder, assemble


def _item(token: str, lp: float, **extra: Any) -> dict[str, Any]:
    return {"token": token, "logprob": lp, "bytes": list(token.encode()), **extra}


# llama.cpp's chat answer (as its server sends it: ``id`` beside OpenAI's fields)
LLAMACPP_CHAT = {
    "finish_reason": "length",
    "index": 0,
    "message": {"role": "assistant", "content": "L'"},
    "logprobs": {
        "content": [
            {
                **_item("L", -1.8529, id=60),
                "top_logprobs": [
                    _item("L", -1.8529, id=60),
                    _item("The", -2.0096, id=504),
                    _item("La", -2.4057, id=15319),
                ],
            },
            {**_item("'", -0.4177, id=23), "top_logprobs": [_item("'", -0.4177, id=23)]},
        ]
    },
}


def test_chat_shape_of_llamacpp_vllm_and_sglang() -> None:
    found = dialects.logprobs_of(LLAMACPP_CHAT)
    assert found is not None and [e.token for e in found] == ["L", "'"]
    first = found[0]
    assert first.data == b"L" and first.logprob == pytest.approx(-1.8529)
    assert [t for t, _, _ in first.top] == ["L", "The", "La"]
    # SGLang and vLLM: the same list, alternatives in any order, bytes of a split character
    sglang = {
        "logprobs": {
            "content": [
                {
                    "token": "\u00c9",
                    "bytes": [195, 137],
                    "logprob": -0.5,
                    "top_logprobs": [_item("Al", -1.8), _item("\u00c9", -0.5)],
                }
            ]
        }
    }
    (entry,) = dialects.logprobs_of(sglang) or []
    assert entry.data == "É".encode() and entry.top[0][0] == "É"


def test_text_completion_shape_and_vllm_minus_infinity() -> None:
    legacy = {
        "text": " Paris.",
        "logprobs": {
            "tokens": [" Paris", "."],
            "token_logprobs": [-0.25, -9999.0],
            "top_logprobs": [{" Paris": -0.25, " the": -2.7}, None],
            "text_offset": [0, 6],
        },
    }
    found = dialects.logprobs_of(legacy)
    assert found is not None and [e.token for e in found] == [" Paris", "."]
    assert found[1].logprob == -math.inf and found[1].top == ()
    assert [t for t, _, _ in found[0].top] == [" Paris", " the"]
    assert dialects.logprobs_of({"logprobs": None}) is None
    assert dialects.logprobs_of({"logprobs": {"content": [{"logprob": 1}]}}) is None


def _spec(stream: bool = False) -> RequestSpec:
    return RequestSpec("chat", "http://127.0.0.1:9/v1/chat/completions", {}, None, stream, 8, 0.0)


def test_the_protocol_core_reads_them_plain_and_streamed() -> None:
    plain = {"choices": [LLAMACPP_CHAT], "usage": {"completion_tokens": 2}}
    ex = Exchange(_spec())
    ex.status, ex.body = 200, json.dumps(plain).encode()
    completion, _ = assemble(ex)
    assert completion.logprobs is not None and len(completion.logprobs) == 2
    # a stream carries each token's entry in its own chunk
    content = LLAMACPP_CHAT["logprobs"]["content"]  # type: ignore[index]
    dec = StreamDecoder("chat")
    for item in content:
        chunk = {
            "choices": [
                {"index": 0, "delta": {"content": item["token"]}, "logprobs": {"content": [item]}}
            ]
        }
        dec.feed(f"data: {json.dumps(chunk)}\n\n".encode())
    dec.feed(
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\ndata: [DONE]\n\n'
    )
    dec.close()
    sex = Exchange(_spec(stream=True))
    sex.status, sex.content_type = 200, "text/event-stream"
    streamed, _ = assemble(sex, dec)
    assert streamed.text == "L'"
    assert streamed.logprobs == completion.logprobs


def _answer(text: str, entries: list[TokenLogprob] | None) -> Completion:
    return Completion(
        _spec(),
        200,
        text,
        "",
        "length",
        None,
        None,
        Timings(0, 0, 0, 1),
        {},
        logprobs=None if entries is None else tuple(entries),
    )


def _tok(token: str, lp: float, top: list[tuple[str, float]]) -> TokenLogprob:
    return TokenLogprob(token, lp, token.encode(), tuple((t, v, t.encode()) for t, v in top))


# the target wrote "woven from the threads" and the speculative path "woven with ..."
TARGET = [
    _tok("woven", -0.1, [("woven", -0.1)]),
    _tok(" from", -0.70, [(" from", -0.70), (" with", -0.72), (" of", -3.0)]),
    _tok(" the", -0.2, [(" the", -0.2)]),
]
REFERENCE, ACTUAL = "woven from the", "woven with countless"


def test_a_near_tie_is_named_with_its_margin() -> None:
    m = classify(_answer(REFERENCE, TARGET), REFERENCE, ACTUAL, 6, DEFAULT_NEAR_TIE)
    assert (m.kind, m.position, m.target_token, m.speculative_token) == (
        "near-tie",
        1,
        " from",
        " with",
    )
    assert m.gap == pytest.approx(0.02) and m.top_two == pytest.approx(0.02)
    assert "top two were 0.02 nats apart" in m.sentence()
    assert "batched verification can flip it" in m.sentence()
    assert m.to_json()["margin_nats"] == pytest.approx(0.02)


def test_a_confident_divergence_is_a_token_the_target_would_not_produce() -> None:
    actual = "woven of rivers"
    m = classify(_answer(REFERENCE, TARGET), REFERENCE, actual, 6, DEFAULT_NEAR_TIE)
    assert m.kind == "confident" and m.gap == pytest.approx(2.3) and not m.bound
    assert "the target was sure (margin 2.3 nats" in m.sentence()
    # a threshold wider than the margin makes it a near-tie: the threshold decides
    assert classify(_answer(REFERENCE, TARGET), REFERENCE, actual, 6, 2.5).kind == "near-tie"


def test_a_margin_written_exactly_at_the_threshold_is_a_near_tie() -> None:
    # -0.6 - -1.1 is 0.5000000000000001 in binary floating point: at the threshold, a tie
    assert DEFAULT_NEAR_TIE < -0.6 - -1.1
    at = [
        _tok("woven", -0.1, [("woven", -0.1)]),
        _tok(" from", -0.6, [(" from", -0.6), (" with", -1.1), (" of", -3.0)]),
    ]
    m = classify(_answer(REFERENCE, at), REFERENCE, ACTUAL, 6, DEFAULT_NEAR_TIE)
    assert m.kind == "near-tie" and m.gap == 0.5
    past = [at[0], _tok(" from", -0.6, [(" from", -0.6), (" with", -1.100001)])]
    m = classify(_answer(REFERENCE, past), REFERENCE, ACTUAL, 6, DEFAULT_NEAR_TIE)
    assert m.kind == "confident" and "margin 0.500001 nats" in m.sentence()


def test_an_unlisted_token_is_bounded_by_what_the_list_leaves() -> None:
    # the listed alternatives hold nearly all the mass: an unlisted token has almost none
    sure = [
        _tok("woven", -0.1, [("woven", -0.1)]),
        _tok(" from", -0.01, [(" from", -0.01), (" of", -5.0)]),
    ]
    m = classify(_answer(REFERENCE, sure), REFERENCE, "woven into cloth", 6, DEFAULT_NEAR_TIE)
    assert m.kind == "confident" and m.bound and m.gap is not None and m.gap > 4.9
    assert "margin at least" in m.sentence()
    # a short list that leaves room: the margin cannot be told
    loose = [
        _tok("woven", -0.1, [("woven", -0.1)]),
        _tok(" from", -1.2, [(" from", -1.2), (" of", -1.4)]),
    ]
    u = classify(_answer(REFERENCE, loose), REFERENCE, "woven into cloth", 6, DEFAULT_NEAR_TIE)
    assert u.kind == "unknown" and "leave room" in (u.reason or "")


def test_the_speculative_sides_own_view_names_its_token() -> None:
    spec = [
        _tok("woven", -0.1, [("woven", -0.1)]),
        _tok(" with", -0.69, [(" with", -0.69), (" from", -0.71)]),
    ]
    m = classify(
        _answer(REFERENCE, TARGET), REFERENCE, ACTUAL, 6, DEFAULT_NEAR_TIE, _answer(ACTUAL, spec)
    )
    assert m.kind == "near-tie" and m.speculative_token == " with"
    assert m.speculative_view is not None and "' with'" in m.speculative_view
    assert "speculative side" in m.evidence()


@pytest.mark.parametrize(
    ("text", "entries", "why"),
    [
        (REFERENCE, None, "returned no log-probabilities"),
        ("woven into the", TARGET, "not the answer compared"),
        (REFERENCE, [_tok("woven ", -0.1, [])], "end before the divergence"),
        (REFERENCE, [_tok("spun", -0.1, [])], "do not spell its answer"),
    ],
)
def test_unknown_margins_say_why(text: str, entries: list[TokenLogprob] | None, why: str) -> None:
    m = classify(_answer(text, entries), REFERENCE, ACTUAL, 6, DEFAULT_NEAR_TIE)
    assert m.kind == "unknown" and why in (m.reason or "") and why in m.sentence()


def test_an_infinite_margin_is_null_in_json() -> None:
    m = Margin("confident", 0.5, position=3, gap=math.inf, bound=True, target_token="a")
    assert m.to_json()["margin_nats"] is None
    assert "no probability" in m.sentence()


def test_probe_fields_per_api() -> None:
    assert probe_fields("chat") == {"logprobs": True, "top_logprobs": 20}
    assert probe_fields("completions") == {"logprobs": 20}


# ------------------------------------------------------------------ the option


def test_lossless_option_default_and_values() -> None:
    assert resolve({}, {}, {}).lossless == Lossless("near-tie", near_tie=DEFAULT_NEAR_TIE)
    assert str(resolve({}, {}, {}).lossless) == "near-tie:0.5"
    s = resolve({"ddtree_lossless": "near-tie:0.25"}, {}, {})
    assert s.lossless.mode == "near-tie" and s.lossless.near_tie == 0.25
    assert resolve({}, {"ddtree_lossless": "exact"}, {}).lossless.mode == "exact"
    env = resolve({}, {}, {"DDTREE_LOSSLESS": "near-tie:1"})
    assert env.lossless.near_tie == 1.0 and env.source_of("lossless").startswith("environment")


@pytest.mark.parametrize(
    ("where", "value", "source"),
    [
        ("cli", "near-tie:0", "--ddtree-lossless"),
        ("cli", "near-tie:9", "--ddtree-lossless"),
        ("ini", "near-tie:x", "ini key ddtree_lossless"),
        ("env", "neartie", "environment variable DDTREE_LOSSLESS"),
    ],
)
def test_bad_lossless_values_are_one_line_naming_the_source(
    where: str, value: str, source: str
) -> None:
    cli = {"ddtree_lossless": value} if where == "cli" else {}
    ini = {"ddtree_lossless": value} if where == "ini" else {}
    env = {"DDTREE_LOSSLESS": value} if where == "env" else {}
    with pytest.raises(SettingsError) as info:
        resolve(cli, ini, env)
    message = str(info.value)
    assert "\n" not in message and repr(value) in message and source in message
    assert "near-tie:MARGIN" in message
