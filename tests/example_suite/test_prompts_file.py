"""``--ddtree-prompts FILE``: the user's own prompt set, validated before anything runs.

A bad file (missing, empty, not JSON, a repeated id, an unknown expectation key, ...) stops
the run with one line naming the file, the entry and the field, from the option, the ini
key or the environment variable alike; a good one replaces the suite's prompts in the
per-prompt tests, the sweep and load.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from pytest_ddtree.checks.invariants import Expectation
from pytest_ddtree.core.prompts import REQUEST_FIELDS, PromptFileError, load_prompts
from pytest_ddtree.core.settings import SettingsError, parse_prompts

SUITE_PROMPTS = Path(__file__).resolve().parents[2] / "pytest_ddtree" / "suite" / "prompts.json"

# file name, content, what the one line must say (besides the file name)
BAD = {
    "missing": ("absent.json", None, ["no such file"]),
    "empty": ("empty.json", "  \n", ["the file is empty"]),
    "not-json": ("broken.json", '{"prompts": [', ["not JSON"]),
    "not-jsonl": ("broken.jsonl", '{"id": "a", "prompt": "x"}\n{"id": \n', ["line 2", "not JSON"]),
    "duplicate-id": (
        "dup.jsonl",
        '{"id": "a", "prompt": "x"}\n\n{"id": "a", "prompt": "y"}\n',
        ["line 3", "field 'id'", "'a' is repeated", "line 1"],
    ),
    "unknown-expectation": (
        "unknown.json",
        '{"prompts": [{"id": "a", "prompt": "x"}, '
        '{"id": "b", "prompt": "y", "expect": {"min_token": 3}}]}',
        ["entry 2", "(id 'b')", "field 'expect.min_token'", "did you mean 'min_tokens'"],
    ),
    "bad-expectation-value": (
        "value.json",
        '{"prompts": [{"id": "a", "prompt": "x", "expect": {"min_tokens": "many"}}]}',
        ["entry 1", "field 'expect.min_tokens'", "'many'"],
    ),
    "unknown-field": (
        "field.jsonl",
        '{"id": "a", "prompt": "x", "sweeep": true}\n',
        ["line 1", "field 'sweeep'", "did you mean 'sweep'"],
    ),
    "no-prompt": (
        "none.json",
        '{"prompts": [{"id": "a"}]}',
        ["entry 1", "give either 'prompt'", "'messages'"],
    ),
    "conversation-ends-with-assistant": (
        "turns.json",
        '{"prompts": [{"id": "a", "messages": [{"role": "user", "content": "hi"}, '
        '{"role": "assistant", "content": "hello"}]}]}',
        ["field 'messages.1.role'", "end with the user's turn"],
    ),
    "top-logprobs-alone": (
        "top.jsonl",
        '{"id": "a", "prompt": "x", "top_logprobs": 2}\n',
        ["line 1", "field 'top_logprobs'", '"logprobs": true'],
    ),
    "tool-choice-without-tools": (
        "choice.jsonl",
        '{"id": "a", "prompt": "x", "tool_choice": "required"}\n',
        ["line 1", "field 'tool_choice'", "'tools'"],
    ),
    "bad-stop": (
        "stop.jsonl",
        '{"id": "a", "prompt": "x", "stop": 3}\n',
        ["line 1", "field 'stop'"],
    ),
    "no-prompts-list": ("top.json", '{"prompts": []}', ["field 'prompts'", "non-empty list"]),
    "a-list": ("list.json", '[{"id": "a", "prompt": "x"}]', ["expected an object"]),
}


def _write(tmp_path: Path, case: str) -> Path:
    name, content, _ = BAD[case]
    path = tmp_path / name
    if content is not None:
        path.write_text(content, encoding="utf-8")
    return path


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_file_is_one_line_naming_file_entry_and_field(tmp_path: Path, case: str) -> None:
    path = _write(tmp_path, case)
    with pytest.raises(SettingsError) as info:
        parse_prompts(str(path), "option --ddtree-prompts")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("invalid prompts (from option --ddtree-prompts): ")
    assert repr(str(path)) in message
    for part in BAD[case][2]:
        assert part in message, (part, message)


def _env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DDTREE_", "OPENAI_", "PYTEST_ADDOPTS", "PYTEST_XDIST"))
    }


def _collect(cwd: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "pytest_ddtree.suite", "--co", "-q", *args],
        cwd=cwd,
        env={**_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result.returncode, result.stdout + result.stderr


@pytest.mark.parametrize("source", ["option", "ini", "env"])
def test_a_bad_file_stops_the_run_before_anything_runs(tmp_path: Path, source: str) -> None:
    path = _write(tmp_path, "duplicate-id")
    if source == "option":
        code, output = _collect(tmp_path, f"--ddtree-prompts={path.name}")
        origin = "option --ddtree-prompts"
    elif source == "ini":
        (tmp_path / "pytest.ini").write_text(f"[pytest]\nddtree_prompts = {path.name}\n")
        sub = tmp_path / "sub"
        sub.mkdir()
        code, output = _collect(sub)  # the path is relative to the ini file, not the cwd
        origin = "ini key ddtree_prompts"
    else:
        code, output = _collect(tmp_path, env={"DDTREE_PROMPTS": str(path)})
        origin = "environment variable DDTREE_PROMPTS"
    assert code == pytest.ExitCode.USAGE_ERROR, output
    errors = [line for line in output.splitlines() if line.strip()]
    assert len(errors) == 1, output
    assert errors[0].startswith(f"ERROR: invalid prompts (from {origin}): prompt file ")
    assert "dup.jsonl" in errors[0] and "line 3" in errors[0] and "field 'id'" in errors[0]


def test_a_good_file_replaces_the_prompts_of_every_test(tmp_path: Path) -> None:
    lines = [
        {"id": "sea", "prompt": "Write a long essay about the sea.", "sweep": True},
        {
            "id": "chat",
            "messages": [
                {"role": "user", "content": "Hello."},
                {"role": "assistant", "content": "Hello! How can I help?"},
                {"role": "user", "content": "Describe a forest."},
            ],
            "expect": {"min_tokens": 8},
        },
    ]
    path = tmp_path / "traffic.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    code, output = _collect(tmp_path, f"--ddtree-prompts={path}", "--ddtree-budgets=16,64")
    assert code == 0, output
    assert "test_smoke.py::test_smoke[sea]" in output
    assert "test_invariants.py::test_invariants[chat-tree_budget=64]" in output
    # the suite's benchmark tests race in passes over the sweep prompts (its pytest.ini)
    assert "test_sweep.py::test_sweep[sea-tree_budget=16-pass=1]" in output
    assert "test_sweep.py::test_sweep[sea-tree_budget=64-pass=4]" in output
    assert "test_sweep.py::test_sweep[chat" not in output  # not marked for the sweep
    assert "test_load.py::test_load" in output
    assert "essay-rivers" not in output


def test_a_conversation_is_skipped_on_the_completions_api(tmp_path: Path) -> None:
    code, output = _collect(tmp_path, "--ddtree-api=completions", "-rs")
    assert code == 0, output
    assert "test_smoke[hike-followup]" in output  # collected, and skipped when run
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--pyargs",
            "pytest_ddtree.suite.test_smoke",
            "-q",
            "-rs",
            "--ddtree-api=completions",
            "--ddtree-reference-latency=off",
            "-k",
            "hike",
        ],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "1 skipped" in result.stdout, result.stdout + result.stderr
    assert "a conversation needs --ddtree-api chat" in result.stdout


def test_the_suite_prompt_set_covers_every_kind() -> None:
    prompts = load_prompts(SUITE_PROMPTS).prompts
    kinds = " ".join(p.kind for p in prompts)
    for kind in ("prose", "code", "list", "arithmetic", "short factual", "multi-turn"):
        assert kind in kinds, kind
    conversation = next(p for p in prompts if p.conversation)
    roles = [m["role"] for m in conversation.payload]
    assert {"system", "assistant"} <= set(roles) and roles[-1] == "user"
    assert sum(p.sweep for p in prompts) >= 2


def test_the_schema_knows_every_expectation_and_nothing_else() -> None:
    text = resources.files("pytest_ddtree").joinpath("schemas/prompts.json").read_text("utf-8")
    expect = json.loads(text)["$defs"]["expect"]
    assert expect["additionalProperties"] is False
    assert set(expect["properties"]) == {f.name for f in dataclasses.fields(Expectation)}


def test_request_fields_go_into_the_prompt_params(tmp_path: Path) -> None:
    path = tmp_path / "asks.jsonl"
    fields = {
        "stop": ["\n\n"],
        "logprobs": True,
        "top_logprobs": 2,
        "response_format": {"type": "json_object"},
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "tool_choice": "auto",
    }
    assert set(fields) == set(REQUEST_FIELDS)
    path.write_text(json.dumps({"id": "a", "prompt": "x", **fields}) + "\n", encoding="utf-8")
    (prompt,) = load_prompts(path).prompts
    assert dict(prompt.params) == fields
    assert prompt.expect == {}


def test_a_good_json_file_loads_in_order() -> None:
    loaded = load_prompts(SUITE_PROMPTS)
    assert loaded.prompts[0].id == "essay-rivers"
    assert [p.id for p in loaded.sweep_prompts()] == [p.id for p in loaded.prompts if p.sweep]


def test_a_path_that_is_a_directory_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(PromptFileError, match="cannot read it") as info:
        load_prompts(tmp_path)
    assert "\n" not in str(info.value)
