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

    python tests/recorded/sglang/record.py --python /path/to/sglang-venv/bin/python \\
        --model-path /path/to/smollm2-hf [--lib-dir DIR] [--out DIR]

``--lib-dir`` goes on ``LD_LIBRARY_PATH`` (a CPU machine needs a stand-in
``libcuda.so.1`` for SGLang's CUDA build of torch).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import time
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


def wait_ready(port: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"SGLang exited with code {proc.returncode} before it was ready")
        try:
            if exchange(port, "GET", "/v1/models", None)["status"] == 200:
                return
        except OSError:
            pass
        time.sleep(2)
    raise SystemExit(f"SGLang was not ready within {timeout:g}s")


def version(python: str) -> str:
    out = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('sglang'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=os.environ.get("DDTREE_SGLANG_PYTHON"), required=False)
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--lib-dir", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args()
    if not args.python:
        raise SystemExit("--python (or DDTREE_SGLANG_PYTHON): the interpreter that has sglang")
    sglang = version(args.python)
    out = Path(args.out) if args.out else HERE / f"sglang-{sglang}"
    out.mkdir(parents=True, exist_ok=True)
    port = random.randint(20000, 29999)
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(HERE / "inject"),
        DDTREE_INVENTED_SPEC_COUNTERS="1",
        HF_HUB_OFFLINE="1",
        SGLANG_USE_CPU_ENGINE="1",
        OMP_NUM_THREADS="1",
    )
    if args.lib_dir:
        env["LD_LIBRARY_PATH"] = args.lib_dir
    cmd = [
        args.python, "-m", "sglang.launch_server", "--model-path", args.model_path,
        "--served-model-name", MODEL, "--host", "127.0.0.1", "--port", str(port),
        "--device", "cpu", "--attention-backend", "torch_native",
        "--sampling-backend", "pytorch", "--cuda-graph-backend-decode", "disabled",
        "--cuda-graph-backend-prefill", "disabled", "--disable-overlap-schedule",
        "--max-total-tokens", "4096", "--context-length", "2048", "--enable-metrics",
        "--skip-server-warmup", "--dtype", "bfloat16",
    ]  # fmt: skip
    log = open(out / "server.log.txt", "wb")  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen(
        cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        wait_ready(port, proc, args.timeout)
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
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        # the log names this machine's paths: keep only whether the counters were injected
        text = (out / "server.log.txt").read_text(errors="replace")
        (out / "server.log.txt").unlink()
        if "invented speculative counters: on" not in text:
            print("WARNING: the server did not report the invented counters", file=sys.stderr)


if __name__ == "__main__":
    main()
