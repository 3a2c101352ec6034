"""Token counters: tokenizer.json, the server's /tokenize, the approximation."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from pytest_ddtree.wire.tokens import (
    SHAPES_BY_NAME,
    ApproxCounter,
    ServerCounter,
    TokenCounter,
    TokenizerCounter,
    detect_tokenize_shape,
    load_counter,
    parse_tokenize_answer,
    server_supports_tokenize,
)

reference = pytest.importorskip("pytest_ddtree.reference")


@pytest.fixture(scope="module")
def tok_path():
    return str(reference.tokenizer_path())


def test_tokenizer_counter_counts_without_special_tokens(tok_path):
    c = load_counter(tok_path)
    assert isinstance(c, TokenizerCounter) and isinstance(c, TokenCounter)
    assert c.exact and tok_path in c.source
    ids = c.encode("Hello world, hello again.")
    assert c.count("Hello world, hello again.") == len(ids) > 0
    assert c.count("") == 0
    # a special token in the text is one token, and nothing is added around it
    assert c.count("<|im_end|>") == 1
    assert {"<|im_start|>", "<|im_end|>", "<|endoftext|>"} <= set(c.special_tokens)


def test_tokenizer_counter_accepts_a_directory(tok_path, tmp_path):
    (tmp_path / "tokenizer.json").write_bytes(Path(tok_path).read_bytes())
    assert load_counter(str(tmp_path)).count("one two three") > 0


def test_missing_tokenizer_file_names_the_value(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(ValueError, match=r"tokenizer file not found: .*nope\.json"):
        load_counter(str(missing))


def test_invalid_tokenizer_file_names_the_value(tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match=r"not a valid tokenizer\.json: .*tokenizer\.json") as info:
        load_counter(str(bad))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("spec", ["", "   "])
def test_empty_spec_is_rejected(spec):
    with pytest.raises(ValueError, match="tokenizer"):
        load_counter(spec)


def test_server_spec_needs_a_root_url():
    with pytest.raises(ValueError, match="root URL"):
        load_counter("server")


def test_approximation():
    c = load_counter("none")
    assert isinstance(c, ApproxCounter) and not c.exact
    assert "approximation" in c.source
    assert c.count("") == 0
    assert c.count("one two three") == 4  # 3 words * 4/3
    assert c.count("x" * 40) == 10  # 40 chars / 4
    assert c.encode("anything") is None


def tokenize_app(calls):
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/tokenize":
            return httpx.Response(404, json={"error": {"message": "no route"}})
        calls.append(json.loads(request.content))
        prompt = json.loads(request.content)["prompt"]
        ids = list(range(len(prompt.split())))
        return httpx.Response(200, json={"tokens": ids, "count": len(ids)})

    return httpx.Client(transport=httpx.MockTransport(handler))


def test_server_counter_posts_and_caches():
    calls: list[dict] = []
    counter = load_counter("server", root_url="http://srv", client=tokenize_app(calls))
    assert isinstance(counter, ServerCounter) and counter.exact
    assert counter.count("a b c") == 3
    assert counter.count("a b c") == 3
    assert counter.encode("a b c d") == [0, 1, 2, 3]
    assert calls == [
        {"prompt": "a b c", "add_special_tokens": False},
        {"prompt": "a b c d", "add_special_tokens": False},
    ]
    assert "http://srv/tokenize" in counter.source


def test_server_supports_tokenize():
    assert server_supports_tokenize("http://srv", tokenize_app([]))
    missing = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(404)))
    assert not server_supports_tokenize("http://srv", missing)

    def broken(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    assert not server_supports_tokenize(
        "http://srv", httpx.Client(transport=httpx.MockTransport(broken))
    )
    garbage = httpx.Client(
        transport=httpx.MockTransport(lambda r: httpx.Response(200, json={"hello": 1}))
    )
    assert not server_supports_tokenize("http://srv", garbage)


def test_reference_server_tokenize_agrees_with_tokenizer_json(tok_path):
    server = reference.start_reference_server(simulated_latency=False)
    try:
        with httpx.Client() as client:
            root = server.base_url.removesuffix("/v1")
            assert server_supports_tokenize(root, client)
            remote = load_counter("server", root_url=root, client=client)
            local = load_counter(tok_path)
            for text in [
                "Hello, world.",
                "The capital of Selqu is Dunlo.\n2. Next line",
                "<|im_end|> after",
            ]:
                assert remote.count(text) == local.count(text)
    finally:
        server.stop()


def test_server_counter_error_names_the_url():
    failing = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(500)))
    counter = ServerCounter("http://srv/", failing)
    with pytest.raises(RuntimeError, match=r"http://srv/tokenize answered HTTP 500"):
        counter.count("text")


def test_encode_returns_a_fresh_list(tok_path):
    c = TokenizerCounter(tok_path)
    ids = c.encode("Hello world")
    ids.append(-1)
    assert c.encode("Hello world") != ids
    assert c.count("Hello world") == len(ids) - 1


def llamacpp_app(calls, answer=None):
    """llama.cpp's shape: ``content`` in, ``tokens`` out; a ``prompt`` body gets ``[]``."""

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        calls.append((request.url.path, body))
        if request.url.path != "/tokenize":
            return httpx.Response(404)
        if answer is not None:
            return httpx.Response(200, json=answer)
        text = body.get("content", "")
        return httpx.Response(200, json={"tokens": list(range(len(text.split())))})

    return httpx.Client(transport=httpx.MockTransport(handler))


def test_llamacpp_shape_is_detected_after_the_others():
    calls: list = []
    probe = detect_tokenize_shape("http://srv", llamacpp_app(calls), model="m")
    # llama.cpp answers the prompt shape with no tokens: not a fit, and no
    # warning either, because a later shape fits
    assert probe.shape == "llamacpp" and probe.warning is None
    assert probe.tried == ["reference", "vllm", "sglang", "llamacpp"]
    counter = load_counter(
        "server", root_url="http://srv", client=llamacpp_app(calls), shape="llamacpp"
    )
    assert counter.count("a b c") == 3
    assert calls[-1] == ("/tokenize", {"content": "a b c", "add_special": False})
    assert "llamacpp shape" in counter.source


def test_vllm_and_sglang_shapes_send_the_model():
    shape = SHAPES_BY_NAME["sglang"]
    assert shape.path == "/v1/tokenize"
    assert shape.body("hi", "m") == {"prompt": "hi", "add_special_tokens": False, "model": "m"}
    assert SHAPES_BY_NAME["reference"].body("hi", "m") == {
        "prompt": "hi",
        "add_special_tokens": False,
    }


@pytest.mark.parametrize(
    "answer",
    [{"tokens": ["a", "b"]}, {"count": "3"}, {"count": 2, "tokens": [1, 2, 3]}, [1, 2]],
)
def test_garbage_answers_fall_back_with_a_warning_naming_the_endpoint(answer):
    probe = detect_tokenize_shape("http://srv", llamacpp_app([], answer))
    assert probe.shape is None
    assert probe.warning is not None and "http://srv/tokenize" in probe.warning
    assert not server_supports_tokenize("http://srv", llamacpp_app([], answer))


def test_pieces_are_read_as_ids():
    assert parse_tokenize_answer({"tokens": [{"id": 7, "piece": "a"}]}, "u") == (1, [7])


def test_a_stale_connection_is_retried_once_and_counted():
    state = {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        state["n"] += 1
        if state["n"] == 1:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return httpx.Response(200, json={"tokens": [1, 2]})

    counter = ServerCounter("http://srv", httpx.Client(transport=httpx.MockTransport(handler)))
    assert counter.count("a b") == 2 and counter.retries == 1

    def always(request: httpx.Request) -> httpx.Response:
        raise httpx.RemoteProtocolError("gone")

    dead = ServerCounter("http://srv", httpx.Client(transport=httpx.MockTransport(always)))
    with pytest.raises(RuntimeError, match=r"http://srv/tokenize failed: RemoteProtocolError"):
        dead.count("a b")
    assert dead.retries == 1
