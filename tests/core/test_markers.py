"""--ddtree-role-marker extends and --ddtree-allow-marker narrows the leak checks."""

from __future__ import annotations

from invariants.factories import completion

from pytest_ddtree.checks.invariants import check
from pytest_ddtree.core.options import resolve
from pytest_ddtree.pytest_plugin.runtime import expectation_kwargs

TEXT = (
    "Rivers carry silt from the hills to the sea, and the towns along them grew "
    "around the fords where people crossed. ### Response: Bridges came later."
)


def codes(text: str, cli: dict[str, object]) -> set[str]:
    settings = resolve(cli, {}, {})
    kwargs = expectation_kwargs(settings, {}, None)
    return {v.code for v in check(completion(text), **kwargs)}


def test_extra_marker_is_flagged_only_when_configured() -> None:
    assert "role-leak" not in codes(TEXT, {})
    assert "role-leak" in codes(TEXT, {"ddtree_role_marker": ["### Response:"]})


def test_allowed_marker_is_not_flagged() -> None:
    leaky = TEXT.replace("### Response:", "<|endoftext|>")
    assert "special-token-leak" in codes(leaky, {})
    assert "special-token-leak" not in codes(leaky, {"ddtree_allow_marker": ["<|endoftext|>"]})
    chatml = TEXT.replace("### Response:", "<|im_start|>user")
    assert "role-leak" in codes(chatml, {})
    assert "role-leak" not in codes(chatml, {"ddtree_allow_marker": ["<|im_start|>"]})
