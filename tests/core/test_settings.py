"""Option resolution: precedence, parsing and one-line errors naming the source."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pytest_ddtree.core.options import OPTIONS, apply_marker, check_reference_faults, resolve
from pytest_ddtree.core.settings import DEFAULT_BUDGETS, Lossless, SettingsError, Timeout, budget_id
from pytest_ddtree.reference.faults import FAULTS


def run(
    cli: dict[str, object] | None = None,
    ini: dict[str, object] | None = None,
    env: dict[str, str] | None = None,
):
    return check_reference_faults(resolve(cli or {}, ini or {}, env or {}), FAULTS)


def test_defaults() -> None:
    s = run()
    assert s.endpoint is None
    assert s.budgets == DEFAULT_BUDGETS
    assert s.budget_mode == "field"
    assert s.budget_field == "tree_budget"
    assert s.dialect == "auto"
    assert s.tokenizer == "auto"
    assert s.timeout == Timeout(connect=10, read=60, total=300)
    assert s.lossless == Lossless("near-tie")
    assert s.source_of("budgets") == "default"


def test_precedence_cli_over_ini_over_env() -> None:
    env = {"DDTREE_ENDPOINT": "http://env:1/v1"}
    ini = {"ddtree_endpoint": "http://ini:1/v1"}
    cli = {"ddtree_endpoint": "http://cli:1/v1"}
    assert run(env=env).endpoint == "http://env:1/v1"
    assert run(ini=ini, env=env).endpoint == "http://ini:1/v1"
    s = run(cli=cli, ini=ini, env=env)
    assert s.endpoint == "http://cli:1/v1"
    assert s.source_of("endpoint") == "option --ddtree-endpoint"


def test_env_fallback_order_for_api_key_and_no_repr_leak() -> None:
    s = run(env={"OPENAI_API_KEY": "sk-secret-1", "DDTREE_API_KEY": "sk-secret-2"})
    assert s.api_key == "sk-secret-2"
    assert "sk-secret" not in repr(s)
    s = run(env={"OPENAI_API_KEY": "sk-secret-1", "OPENAI_BASE_URL": "http://h:1/v1"})
    assert s.api_key == "sk-secret-1"
    assert s.source_of("api_key") == "environment variable OPENAI_API_KEY"


@pytest.mark.parametrize(
    ("cli", "ini", "env", "needle"),
    [
        (
            {"ddtree_budgets": "16,abc"},
            {},
            {},
            "invalid budgets '16,abc' (from option --ddtree-budgets)",
        ),
        ({}, {"ddtree_budgets": "0"}, {}, "invalid budgets '0' (from ini key ddtree_budgets)"),
        (
            {"ddtree_budgets": "16,,64"},
            {},
            {},
            "invalid budgets '16,,64' (from option --ddtree-budgets): item 2 is empty",
        ),
        ({}, {}, {"DDTREE_BUDGETS": "16,64,"}, "(from environment variable DDTREE_BUDGETS): item"),
        (
            {},
            {},
            {"DDTREE_BUDGETS": "8,8"},
            "(from environment variable DDTREE_BUDGETS): 8 is listed twice",
        ),
        ({"ddtree_endpoint": "localhost:8000"}, {}, {}, "invalid endpoint 'localhost:8000'"),
        ({}, {}, {"OPENAI_BASE_URL": "ftp://x"}, "(from environment variable OPENAI_BASE_URL)"),
        ({"ddtree_timeout": "-3"}, {}, {}, "invalid timeout '-3'"),
        ({"ddtree_timeout": "connect=1,bogus=2"}, {}, {}, "unknown or repeated key 'bogus'"),
        ({"ddtree_dialect": "tgi"}, {}, {}, "expected one of auto, ddtree"),
        ({"ddtree_max_tokens": "0"}, {}, {}, "invalid max-tokens '0'"),
        ({"ddtree_api": "responses"}, {}, {}, "invalid api 'responses'"),
        ({"ddtree_lossless": "prefix:0"}, {}, {}, "invalid lossless 'prefix:0'"),
        ({"ddtree_budget_endpoint": ["64"]}, {}, {}, "expected BUDGET=URL"),
        ({"ddtree_stats_map": "rounds=/x"}, {}, {}, "keys must be among"),
        ({"ddtree_stats_map": "decode_rounds=x"}, {}, {}, "is not a JSON pointer"),
        ({"ddtree_budget_mode": "endpoints"}, {}, {}, "give at least one --ddtree-budget-endpoint"),
        ({"ddtree_dialect": "custom"}, {}, {}, "also give --ddtree-stats-map"),
        ({"ddtree_endpoint": "http://u:p@h/v1"}, {}, {}, "put credentials in --ddtree-api-key"),
        ({"ddtree_endpoint": "http://h/v1?api_key=s3cr3t"}, {}, {}, "query strings are not"),
        (
            {"ddtree_reference_fault": ["nope"]},
            {},
            {},
            "invalid reference-fault 'nope' (from option --ddtree-reference-fault): known faults",
        ),
        ({}, {"ddtree_reference_fault": ["nope"]}, {}, "(from ini key ddtree_reference_fault)"),
        ({"ddtree_reference_latency": "maybe"}, {}, {}, "expected on or off"),
        (
            {"ddtree_reference_fault": ["lossy"], "ddtree_endpoint": "http://h:1/v1"},
            {},
            {},
            "faults can only be injected into the embedded server",
        ),
    ],
)
def test_bad_values_name_value_and_source(cli, ini, env, needle) -> None:
    with pytest.raises(SettingsError) as info:
        run(cli=cli, ini=ini, env=env)
    message = str(info.value)
    assert needle in message
    assert "\n" not in message


def test_credentials_in_url_are_not_echoed() -> None:
    with pytest.raises(SettingsError) as info:
        run(cli={"ddtree_endpoint": "http://user:hunter2@h/v1"})
    assert "hunter2" not in str(info.value)
    with pytest.raises(SettingsError) as info:
        run(env={"OPENAI_BASE_URL": "http://h/v1?api_key=hunter2"})
    assert "hunter2" not in str(info.value)
    assert "http://h/v1?<redacted>" in str(info.value)


def test_budget_endpoints_mode() -> None:
    s = run(cli={"ddtree_budget_endpoint": ["64=http://h:2/v1", "16=http://h:1/v1/"]})
    assert s.budget_mode == "endpoints"
    assert s.budgets == (16, 64)
    assert s.budget_endpoints == {16: "http://h:1/v1", 64: "http://h:2/v1"}
    with pytest.raises(SettingsError, match="no --ddtree-budget-endpoint for 32"):
        run(cli={"ddtree_budget_endpoint": ["64=http://h:2/v1"], "ddtree_budgets": "32,64"})
    with pytest.raises(SettingsError, match="only used with budget-mode endpoints"):
        run(cli={"ddtree_budget_endpoint": ["64=http://h:2/v1"], "ddtree_budget_mode": "field"})


@pytest.mark.parametrize(
    ("cli", "requested", "smallest", "largest"),
    [
        ({"ddtree_budgets": "64,16,32"}, (64, 16, 32), 16, 64),
        ({"ddtree_budget_mode": "none"}, (None,), None, None),
        ({"ddtree_budget_endpoint": ["64=http://h:2/v1", "16=http://h:1/v1"]}, (16, 64), 16, 64),
    ],
    ids=["field", "none", "endpoints"],
)
def test_requested_budgets_follow_the_budget_mode(cli, requested, smallest, largest) -> None:
    s = run(cli=cli)
    assert (s.requested_budgets, s.smallest_budget, s.largest_budget) == (
        requested,
        smallest,
        largest,
    )


def test_budget_mode_none_requests_the_server_default_even_with_budgets_left_over() -> None:
    """A copy switched to none (the baseline client's) keeps its budgets but requests none."""
    s = replace(run(), budget_mode="none")
    assert s.budgets == DEFAULT_BUDGETS
    assert (s.requested_budgets, s.smallest_budget, s.largest_budget) == ((None,), None, None)


def test_none_mode_and_timeouts_and_ini_lists() -> None:
    assert run(cli={"ddtree_budget_mode": "none"}).budgets == ()
    assert run(cli={"ddtree_timeout": "5"}).timeout == Timeout(connect=5, read=5, total=5)
    t = run(cli={"ddtree_timeout": "read=2,total=9"}).timeout
    assert (t.connect, t.read, t.total) == (10, 2, 9)
    s = run(ini={"ddtree_skip_check": ["usage-mismatch", "degenerate"]})
    assert s.skip_checks == ("usage-mismatch", "degenerate")
    assert run(cli={"ddtree_enable_thinking": True}).enable_thinking is True
    assert run(ini={"ddtree_enable_thinking": "yes"}).enable_thinking is True


def test_custom_dialect_implied_by_stats_map() -> None:
    s = run(cli={"ddtree_stats_map": "decode_rounds=/meta/rounds,mean_acceptance_length=/meta/tau"})
    assert s.dialect == "custom"
    assert s.stats_map == {"decode_rounds": "/meta/rounds", "mean_acceptance_length": "/meta/tau"}


def test_marker_overrides_and_errors() -> None:
    base = run()
    s = apply_marker(
        base, {"budgets": [64, 16], "max_tokens": 32, "skip_checks": "degenerate"}, "t"
    )
    assert s.budgets == (64, 16)
    assert s.max_tokens == 32
    assert s.skip_checks == ("degenerate",)
    with pytest.raises(SettingsError, match="invalid marker argument 'budget'"):
        apply_marker(base, {"budget": [1]}, "t")
    with pytest.raises(
        SettingsError, match=r"invalid max_tokens 0 \(from @pytest.mark.ddtree on t\)"
    ):
        apply_marker(base, {"max_tokens": 0}, "t")
    with pytest.raises(SettingsError, match="expected a list"):
        apply_marker(base, {"budgets": "64"}, "t")


def test_option_table_is_consistent() -> None:
    names = [o.name for o in OPTIONS]
    assert len(names) == len(set(names))
    for opt in OPTIONS:
        assert opt.cli.startswith("--ddtree-")
        assert opt.ini.startswith("ddtree_")
        assert opt.help.strip().endswith(".")
        if opt.default is not None and opt.parse is not None:
            opt.parse(opt.default if not opt.repeatable else [opt.default], "default")


def test_budget_ids() -> None:
    assert budget_id(64) == "tree_budget=64"
    assert budget_id(None) == "tree_budget=server-default"


@pytest.mark.parametrize(
    "value", ["tree_budget", "extra.ddtree.budget", "/speculative.n_max", "/extra/ddtree/budget"]
)
def test_budget_field_syntaxes(value: str) -> None:
    assert run(ini={"ddtree_budget_field": value}).budget_field == value


@pytest.mark.parametrize("value", ["speculative..n_max", "/", "/a//b", "/a~2", "1x", "a b"])
def test_budget_field_rejected_in_one_line(value: str) -> None:
    with pytest.raises(SettingsError) as info:
        run(ini={"ddtree_budget_field": value})
    message = str(info.value)
    assert "\n" not in message
    assert repr(value) in message and "ini" in message


def test_temperatures_default_and_sources() -> None:
    assert run().temperatures == (0.0,)
    s = run(cli={"ddtree_temperatures": "0, 0.7,1.0"})
    assert s.temperatures == (0.0, 0.7, 1.0)
    assert run(env={"DDTREE_TEMPERATURES": "1"}).temperatures == (1.0,)
    assert run(ini={"ddtree_temperatures": "2,0"}).temperatures == (2.0, 0.0)


@pytest.mark.parametrize(
    ("cli", "ini", "env", "needle"),
    [
        (
            {"ddtree_temperatures": "0,2.5"},
            {},
            {},
            "invalid temperatures '0,2.5' (from option --ddtree-temperatures): "
            "2.5 is outside [0, 2]",
        ),
        (
            {},
            {"ddtree_temperatures": "-0.1"},
            {},
            "(from ini key ddtree_temperatures): -0.1 is outside [0, 2]",
        ),
        (
            {},
            {},
            {"DDTREE_TEMPERATURES": "0,warm"},
            "(from environment variable DDTREE_TEMPERATURES): 'warm' is not a number",
        ),
        ({"ddtree_temperatures": "0,nan"}, {}, {}, "'nan' is not a number"),
        ({"ddtree_temperatures": "0,inf"}, {}, {}, "'inf' is not a number"),
        ({"ddtree_temperatures": "0,,1"}, {}, {}, "item 2 is empty"),
        ({"ddtree_temperatures": "0.7,"}, {}, {}, "item 2 is empty"),
        ({"ddtree_temperatures": " , "}, {}, {}, "expected a comma-separated list"),
        ({"ddtree_temperatures": "0.7,0.70"}, {}, {}, "0.70 is listed twice"),
        ({"ddtree_temperatures": "0,-0"}, {}, {}, "-0 is listed twice"),
        ({"ddtree_temperatures": "0.7,0.7000001"}, {}, {}, "0.7000001 is named 0.7 too"),
    ],
)
def test_bad_temperatures_name_value_and_source(cli, ini, env, needle) -> None:
    with pytest.raises(SettingsError) as info:
        run(cli=cli, ini=ini, env=env)
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_settings_repr_is_short_and_names_what_was_set() -> None:
    from pytest_ddtree.core.options import resolve

    cli = {"ddtree_endpoint": "http://127.0.0.1:9/v1", "ddtree_api_key": "sk-secret"}
    s = resolve(cli, {}, {})
    text = repr(s)
    assert len(text) < 300, text
    assert "http://127.0.0.1:9/v1'" in text
    assert "sk-secret" not in text
    assert "'endpoint'" in text


def test_pyproject_toml_lists_and_numbers_are_read_as_their_text() -> None:
    # pyproject.toml hands its own types to the ini keys; a list was an AttributeError
    # traceback ('list' object has no attribute 'split')
    ini = {"ddtree_budgets": [16, 32], "ddtree_rounds": 4, "ddtree_skip_check": ["role-leak"]}
    settings = resolve({}, ini, {})
    assert settings.budgets == (16, 32)
    assert settings.rounds == 4
    assert settings.skip_checks == ("role-leak",)


def test_a_bad_item_of_a_pyproject_toml_list_is_one_line_naming_it() -> None:
    with pytest.raises(SettingsError) as info:
        resolve({}, {"ddtree_budgets": [16, "x"]}, {})
    assert str(info.value).startswith("invalid budgets '16,x' (from ini key ddtree_budgets)")
