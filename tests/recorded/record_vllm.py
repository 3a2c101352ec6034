"""Record real vLLM answers for the replay tests (``tests/core/test_vllm_recorded.py``).

Start vLLM yourself (SmolLM2-135M-Instruct served as ``smollm2``; n-gram speculation with
``--per-request-spec-decode-metrics detailed`` or ``summary``, or no speculation at all),
then::

    python tests/recorded/record_vllm.py --url http://127.0.0.1:PORT --level detailed

It sends a fixed set of requests at temperature 0 (plain and streamed, a stop string, a
stop token id, the model's own end, the length limit, a stream without usage, the text
completions endpoint) and writes, for each, the request body and the response's status,
content type and body byte for byte (as text) to ``tests/recorded/vllm/LEVEL/NAME.json``,
with the server's ``/version`` in ``server.json``. Nothing is edited: the tests replay what
vLLM sent.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).parent
LEVELS = ("detailed", "summary", "none")
FOX = "Repeat this sentence three times: the quick brown fox jumps over the lazy dog."
USAGE = {"include_usage": True}


def _chat(content: str, **fields: Any) -> dict[str, Any]:
    return {
        "model": "smollm2",
        "messages": [{"role": "user", "content": content}],
        "temperature": 0,
        **fields,
    }


def requests(stop_token: int) -> dict[str, tuple[str, dict[str, Any]]]:
    """name -> (path, body) of every recorded request."""
    chat = "/v1/chat/completions"
    essay = _chat("Write a short essay about rivers.", max_tokens=96)
    return {
        "chat_plain_stop_string": (chat, _chat(FOX, max_tokens=48, stop=["dog."])),
        "chat_stream_stop_string": (
            chat,
            _chat(FOX, max_tokens=48, stop=["dog."], stream=True, stream_options=USAGE),
        ),
        "chat_plain_stop_token": (chat, _chat(FOX, max_tokens=48, stop_token_ids=[stop_token])),
        "chat_stream_stop_token": (
            chat,
            _chat(
                FOX, max_tokens=48, stop_token_ids=[stop_token], stream=True, stream_options=USAGE
            ),
        ),
        "chat_plain_eos": (chat, _chat("What is 2+2?", max_tokens=128)),
        "chat_stream_eos": (
            chat,
            _chat("What is 2+2?", max_tokens=128, stream=True, stream_options=USAGE),
        ),
        "chat_plain_length": (chat, essay),
        "chat_stream_length": (chat, {**essay, "stream": True, "stream_options": USAGE}),
        "chat_stream_length_nousage": (chat, {**essay, "stream": True}),
        "completion_stream": (
            "/v1/completions",
            {
                "model": "smollm2",
                "prompt": "The river flows",
                "max_tokens": 32,
                "temperature": 0,
                "stream": True,
                "stream_options": USAGE,
            },
        ),
    }


def _stop_token(client: httpx.Client) -> int:
    """The id of " brown", a stop token the fox answer reaches early."""
    r = client.post("/tokenize", json={"model": "smollm2", "prompt": " brown"})
    r.raise_for_status()
    tokens = r.json()["tokens"]
    return int(tokens[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--url", required=True, help="the server's root, e.g. http://127.0.0.1:8000"
    )
    parser.add_argument("--level", required=True, choices=LEVELS, help="the server's statistics")
    parser.add_argument("--out", type=Path, default=HERE / "vllm", help="where LEVEL/ goes")
    args = parser.parse_args(argv)
    out: Path = args.out / args.level
    out.mkdir(parents=True, exist_ok=True)
    with httpx.Client(base_url=args.url.rstrip("/"), timeout=600.0) as client:
        version = client.get("/version")
        (out / "server.json").write_text(json.dumps({"version": version.json()}, indent=1) + "\n")
        for name, (path, body) in requests(_stop_token(client)).items():
            r = client.post(path, json=body)
            record = {
                "path": path,
                "request": body,
                "status": r.status_code,
                "content_type": r.headers.get("content-type", ""),
                "body": r.text,
            }
            (out / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
            print(f"{out / name}.json: HTTP {r.status_code}, {len(r.content)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
