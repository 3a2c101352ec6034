"""Record real SGLang answers whose speculative fields come from SGLang's own code.

SGLang's speculation cannot run on a CPU without its CPU-built kernels, so this
script starts SGLang's real HTTP server (no speculative algorithm) with
``inject/sitecustomize.py`` on its ``PYTHONPATH``: that file fills the per-request
speculative counters the scheduler hands to SGLang's ``TokenizerManager`` with
INVENTED values (see its docstring for how). From there on, every byte is
SGLang's: ``meta_info``, ``sglext.spec_tokens_details``, the stream chunk that
carries it, ``/metrics``. The numbers are not real speculative statistics; the
field names, nesting, types, chunk layout and the arithmetic SGLang does on the
counters (``spec_accept_length``, ``spec_accept_rate``,
``spec_num_proposed_drafts``) are.

Each exchange is written to ``<out>/<name>.json``: the request, the status, the
headers and the body exactly as received (a stream's body is its raw SSE text).

    python tests/recorded/sglang/record.py [--python SGLANG_PYTHON] [--model-path DIR] [--out DIR]

The server is started by ``pytest_ddtree.engines.start_sglang`` (CPU engine, the
stand-in ``libcuda.so.1``, SmolLM2-135M-Instruct), with the two variables that turn
the invented counters on.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import subprocess
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MODEL = "smollm2"
FRANCE = [{"role": "user", "content": "What is the capital of France?"}]
FOX = [
    {
        "role": "user",
        "content": "Repeat this sentence three times: the quick brown fox jumps over the lazy dog.",
    }
]


def chat(messages: list[dict[str, str]], **fields: Any) -> dict[str, Any]:
    """A chat body as the plugin sends it to a server it knows is SGLang."""
    body: dict[str, Any] = {
        "messages": messages,
        "chat_template_kwargs": {"enable_thinking": False},
        "model": MODEL,
        "max_tokens": 48,
        "temperature": 0.0,
        "stream": False,
        "return_spec_tokens_details": True,
    }
    body.update(fields)
    return body


#: name -> (method, path, body)
EXCHANGES: dict[str, tuple[str, str, dict[str, Any] | None]] = {
    "metrics_before": ("GET", "/metrics", None),
    # the model's own end of sequence: matched_stop is the token id (2 for SmolLM2)
    "chat_plain_eos": ("POST", "/v1/chat/completions", chat(FRANCE)),
    # a stop string: matched_stop is the string
    "chat_plain_stop": ("POST", "/v1/chat/completions", chat(FOX, stop=["dog."])),
    # a stop token id (" fox"): matched_stop is that id
    "chat_plain_stop_token": (
        "POST",
        "/v1/chat/completions",
        chat(FOX, stop_token_ids=[16438], max_tokens=24),
    ),
    "chat_plain_length": ("POST", "/v1/chat/completions", chat(FOX, max_tokens=6)),
    "chat_stream_usage": (
        "POST",
        "/v1/chat/completions",
        chat(FOX, stop=["dog."], stream=True, stream_options={"include_usage": True}),
    ),
    "chat_stream_nousage": (
        "POST",
        "/v1/chat/completions",
        chat(FOX, stop=["dog."], stream=True),
    ),
    "chat_stream_eos": (
        "POST",
        "/v1/chat/completions",
        chat(FRANCE, stream=True, stream_options={"include_usage": True}),
    ),
    "generate": (
        "POST",
        "/generate",
        {
            "text": "the quick brown fox jumps over the lazy dog. the quick brown fox",
            "sampling_params": {"max_new_tokens": 16, "temperature": 0},
        },
    ),
    "tokenize": (
        "POST",
        "/v1/tokenize",
        {"model": MODEL, "prompt": "Hello, world.", "add_special_tokens": False},
    ),
    "detokenize": ("POST", "/v1/detokenize", {"model": MODEL, "tokens": [19556, 28]}),
    "metrics_after": ("GET", "/metrics", None),
}


def exchange(port: int, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
    """One request; the answer's status, headers and body bytes as received."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    payload = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} if payload is not None else {}
    conn.request(method, path, body=payload, headers=headers)
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return {
        "method": method,
        "path": path,
        "request": body,
        "status": response.status,
        "headers": {k.lower(): v for k, v in response.getheaders()},
        "body": data.decode("utf-8"),
    }


def version(python: str | None) -> str:
    from pytest_ddtree.engines import engine_python

    interpreter, _ = engine_python("sglang", python)
    out = subprocess.run(
        [str(interpreter), "-c", "import importlib.metadata as m; print(m.version('sglang'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def main() -> None:
    from pytest_ddtree import engines

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=None, help="SGLang's interpreter (DDTREE_SGLANG_PYTHON)")
    ap.add_argument("--model-path", default=None, help="the model (default: engines.smollm2_hf)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args()
    why = engines.sglang_missing(args.python)
    if why is not None and args.model_path is None:
        raise SystemExit(why)
    sglang = version(args.python)
    out = Path(args.out) if args.out else HERE / f"sglang-{sglang}"
    out.mkdir(parents=True, exist_ok=True)
    server = engines.start_sglang(
        port=random.randint(20000, 29999),
        python=args.python,
        model_dir=args.model_path,
        timeout=args.timeout,
        env={"PYTHONPATH": str(HERE / "inject"), "DDTREE_INVENTED_SPEC_COUNTERS": "1"},
    )
    port = int(server.root_url.rsplit(":", 1)[1])
    try:
        for name, (method, path, body) in EXCHANGES.items():
            record = exchange(port, method, path, body)
            record = {
                "recorded": f"sglang {sglang}, real HTTP server on CPU, no speculative algorithm",
                "invented_counters": (
                    "the scheduler's per-request speculative counters were filled with invented "
                    "values (inject/sitecustomize.py); everything after them is SGLang's code"
                ),
                **record,
            }
            (out / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
            print(f"{name}: HTTP {record['status']}, {len(record['body'])} characters")
        details = json.loads((out / "chat_plain_eos.json").read_text())["body"]
        if "spec_tokens_details" not in details:
            raise SystemExit("the server sent no spec_tokens_details: the counters were not filled")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
