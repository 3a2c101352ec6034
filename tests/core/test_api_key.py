"""Which key reaches which server: ``OPENAI_API_KEY`` only an endpoint from ``OPENAI_BASE_URL``.

A loopback server records the ``Authorization`` header of every request (the model list,
``/tokenize``, ``/metrics``); the header line says whether a key is sent, and from where.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

REAL_KEY = "sk-real-developer-key"
TEST_KEY = "sk-test-server-key"


class _Recorder(BaseHTTPRequestHandler):
    """Lists one model, answers nothing else (404), and records each request's key."""

    seen: ClassVar[list[tuple[str, str | None]]] = []

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization")))
        if self.command == "POST":
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
        found = self.path.rstrip("/").endswith("/models")
        body = json.dumps({"object": "list", "data": [{"id": "m"}]}).encode() if found else b"{}"
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer


@pytest.fixture
def recorder(
    loopback: Callable[[ThreadingHTTPServer], str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, list[tuple[str, str | None]]]]:
    seen: ClassVar[list[tuple[str, str | None]]] = []
    handler = type("Recorder", (_Recorder,), {"seen": seen})
    for name in ("DDTREE_ENDPOINT", "DDTREE_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    yield loopback(ThreadingHTTPServer(("127.0.0.1", 0), handler)) + "/v1", seen


def _start(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makepyfile("def test_up(ddtree_runtime):\n    pass\n")
    result = pytester.runpytest("-p", "no:randomly", *args)
    result.assert_outcomes(passed=1)
    return result


def test_the_openai_key_is_not_sent_to_an_endpoint_given_by_option(
    pytester: pytest.Pytester,
    recorder: tuple[str, list[tuple[str, str | None]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, seen = recorder
    monkeypatch.setenv("OPENAI_API_KEY", REAL_KEY)
    result = _start(pytester, f"--ddtree-endpoint={url}")
    paths = {path for path, _ in seen}
    assert {"/v1/models", "/metrics"} <= paths and any("tokenize" in p for p in paths), seen
    assert [key for _, key in seen if key is not None] == [], seen
    result.stdout.fnmatch_lines(
        [
            f"ddtree: endpoint {url} (from option --ddtree-endpoint); no api key "
            "(OPENAI_API_KEY is sent only to an endpoint from OPENAI_BASE_URL; give "
            "--ddtree-api-key or DDTREE_API_KEY); model first listed;*"
        ]
    )
    assert REAL_KEY not in result.stdout.str() + result.stderr.str()


def test_the_openai_key_goes_with_the_openai_url(
    pytester: pytest.Pytester,
    recorder: tuple[str, list[tuple[str, str | None]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, seen = recorder
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("OPENAI_API_KEY", REAL_KEY)
    result = _start(pytester)
    assert seen and {key for _, key in seen} == {f"Bearer {REAL_KEY}"}, seen
    result.stdout.fnmatch_lines(
        [
            f"ddtree: endpoint {url} (from environment variable OPENAI_BASE_URL); api key sent "
            "(from environment variable OPENAI_API_KEY); model*"
        ]
    )
    assert REAL_KEY not in result.stdout.str() + result.stderr.str()


def test_the_plugins_own_key_goes_to_any_endpoint(
    pytester: pytest.Pytester,
    recorder: tuple[str, list[tuple[str, str | None]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, seen = recorder
    monkeypatch.setenv("OPENAI_API_KEY", REAL_KEY)
    monkeypatch.setenv("DDTREE_API_KEY", TEST_KEY)
    monkeypatch.setenv("DDTREE_ENDPOINT", url)
    result = _start(pytester)
    assert seen and {key for _, key in seen} == {f"Bearer {TEST_KEY}"}, seen
    result.stdout.fnmatch_lines(
        [
            f"ddtree: endpoint {url} (from environment variable DDTREE_ENDPOINT); api key sent "
            "(from environment variable DDTREE_API_KEY); model*"
        ]
    )


def test_the_openai_key_never_reaches_the_embedded_server() -> None:
    from pytest_ddtree.core.options import key_note, resolve

    settings = resolve({}, {}, {"OPENAI_API_KEY": REAL_KEY})
    assert settings.endpoint is None and settings.api_key is None
    assert key_note(settings).startswith("no api key (OPENAI_API_KEY is sent only to")
    # the plugin's own key is the user's choice, wherever it goes
    settings = resolve({"ddtree_api_key": TEST_KEY}, {}, {"OPENAI_API_KEY": REAL_KEY})
    assert settings.api_key == TEST_KEY
    assert key_note(settings) == "api key sent (from option --ddtree-api-key)"
