"""Record real vLLM answers to tool-call and JSON-schema requests for the replay tests
(``tests/invariants/test_vllm_tools_recorded.py``).

Start vLLM yourself with tool calls on (SmolLM2-135M-Instruct served as ``smollm2``)::

    python -m pytest_ddtree.engines --engine vllm --speculation ngram --tool-call-parser hermes
    python tests/recorded/record_vllm_tools.py --url http://127.0.0.1:8000 --label ngram

and again with ``--speculation none`` and ``--label target`` (the target-only twin). It
sends a fixed set of temperature-0 requests, plain and streamed: ``get_weather`` (its
parameters an object with ``city`` and ``unit``) under a named and a ``required``
``tool_choice``, and a JSON-schema ``response_format``; and writes each request body and the
response's status, content type and body byte for byte (as text) to
``tests/recorded/vllm/tools/LABEL/NAME.json``. Nothing is edited: the tests replay what
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
USAGE = {"include_usage": True}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
        },
    },
}
NAMED = {"type": "function", "function": {"name": "get_weather"}}
PERSON = {
    "type": "json_schema",
    "json_schema": {
        "name": "person",
        "schema": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["name", "age"],
        },
    },
}


def _chat(content: str, **fields: Any) -> dict[str, Any]:
    return {
        "model": "smollm2",
        "messages": [{"role": "user", "content": content}],
        "temperature": 0,
        "max_tokens": 96,
        **fields,
    }


def requests() -> dict[str, dict[str, Any]]:
    weather = "What is the weather in Paris?"
    person = "Describe a person called Ada who is 36, as JSON."
    out: dict[str, dict[str, Any]] = {}
    for mode, extra in (("plain", {}), ("stream", {"stream": True, "stream_options": USAGE})):
        out[f"tool_named_{mode}"] = _chat(weather, tools=[WEATHER], tool_choice=NAMED, **extra)
        out[f"tool_required_{mode}"] = _chat(
            weather, tools=[WEATHER], tool_choice="required", **extra
        )
        out[f"json_schema_{mode}"] = _chat(person, response_format=PERSON, **extra)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--url", required=True, help="the server's root, e.g. http://127.0.0.1:8000"
    )
    parser.add_argument("--label", required=True, help="ngram or target")
    parser.add_argument(
        "--out", type=Path, default=HERE / "vllm" / "tools", help="where LABEL/ goes"
    )
    args = parser.parse_args(argv)
    out: Path = args.out / args.label
    out.mkdir(parents=True, exist_ok=True)
    path = "/v1/chat/completions"
    with httpx.Client(base_url=args.url.rstrip("/"), timeout=600.0) as client:
        version = client.get("/version")
        (out / "server.json").write_text(json.dumps({"version": version.json()}, indent=1) + "\n")
        for name, body in requests().items():
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
