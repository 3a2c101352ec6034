"""The option table and its resolution into one validated ``Settings``.

Every option is defined once in ``OPTIONS``; the plugin registers the command
line flags and ini keys from that table and the docs generate the option
reference from it, so the three cannot drift. Resolution order is
command line > ini (``[tool.pytest.ini_options]``) > environment > default,
and a bad value raises ``SettingsError`` with one line naming the value and
where it came from. The values themselves, their parsers and ``Settings`` are
``pytest_ddtree.core.settings``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_ddtree.core.dialects import lookup, stats_map_dialect
from pytest_ddtree.core.settings import (
    DEFAULT_BUDGETS,
    DEFAULT_MIN_N,
    DIALECTS,
    MAX_MAX_TOKENS,
    MAX_RETRY_429,
    SPEC_FIELDS,
    Settings,
    SettingsError,
    fail,
    load_parser,
    parse_alpha,
    parse_bool,
    parse_budget_endpoints,
    parse_budgets,
    parse_burstiness,
    parse_choice,
    parse_codes,
    parse_equivalence,
    parse_jitter,
    parse_load_requests,
    parse_lossless,
    parse_metrics_url,
    parse_positive_int,
    parse_probe,
    parse_prompts,
    parse_report,
    parse_size,
    parse_slowdown,
    parse_slowdown_after,
    parse_stats_map,
    parse_sweep_requests,
    parse_temperatures,
    parse_timeout,
    parse_tokenizer,
    parse_url,
)

# --------------------------------------------------------------------------
# the option table


@dataclass(frozen=True)
class OptionDef:
    """One option: flag ``--ddtree-<name>``, ini key ``ddtree_<name_with_underscores>``.

    The ``Settings`` attribute is the name with underscores, plural for a
    repeatable option (``--ddtree-skip-check`` sets ``skip_checks``).
    """

    name: str
    help: str
    metavar: str = "VALUE"
    default: str | None = None
    env: tuple[str, ...] = ()
    repeatable: bool = False
    flag: bool = False
    secret: bool = False
    path: bool = False  # its ini value is a path relative to the ini file, as pytest's are
    parse: Callable[[Any, str], Any] | None = None

    @property
    def cli(self) -> str:
        """The command-line flag."""
        return f"--ddtree-{self.name}"

    @property
    def ini(self) -> str:
        """The ini key."""
        return "ddtree_" + self.name.replace("-", "_")

    @property
    def attr(self) -> str:
        """The ``Settings`` attribute this option sets."""
        return self.name.replace("-", "_") + ("s" if self.repeatable else "")

    @property
    def dest(self) -> str:
        """The argparse destination."""
        return "ddtree_" + self.name.replace("-", "_")


OPTIONS: tuple[OptionDef, ...] = (
    OptionDef(
        "endpoint",
        "Base URL of the OpenAI-compatible server, ending in /v1. "
        "Default: start the embedded reference DDTree server.",
        metavar="URL",
        env=("DDTREE_ENDPOINT", "OPENAI_BASE_URL"),
        parse=parse_url,
    ),
    OptionDef(
        "model",
        "Model id to request. Default: the first id listed by GET /models.",
        metavar="ID",
        env=("DDTREE_MODEL",),
        parse=lambda raw, src: str(raw).strip(),
    ),
    OptionDef(
        "api-key",
        "API key sent as a Bearer token; never printed or stored in any report.",
        metavar="KEY",
        env=("DDTREE_API_KEY", "OPENAI_API_KEY"),
        secret=True,
        parse=lambda raw, src: str(raw).strip(),
    ),
    OptionDef(
        "budgets",
        "Tree budgets to sweep; every test using the tree_budget fixture runs once per budget.",
        metavar="B,B,...",
        default="16,32,64,128,256,512,1024",
        env=("DDTREE_BUDGETS",),
        parse=parse_budgets,
    ),
    OptionDef(
        "temperatures",
        "Sampling temperatures of the timed tests (ddtree_benchmark, ddtree_sweep, "
        "ddtree_load): each runs once per temperature, with its own table and "
        "recommendation. Above 0 every request carries a seed (the same at every budget). "
        "Losslessness and determinism stay at 0.",
        metavar="T,T,...",
        default="0",
        env=("DDTREE_TEMPERATURES",),
        parse=parse_temperatures,
    ),
    OptionDef(
        "budget-mode",
        "How a request chooses its tree budget: field (a JSON body field), endpoints "
        "(one server per budget, see --ddtree-budget-endpoint) or none (the server's own "
        "fixed budget). Default: endpoints when --ddtree-budget-endpoint is given, else field.",
        metavar="MODE",
        env=("DDTREE_BUDGET_MODE",),
        parse=lambda raw, src: parse_choice(
            raw, src, "budget-mode", ("field", "endpoints", "none")
        ),
    ),
    OptionDef(
        "budget-field",
        "Request body field carrying the budget in field mode: a name (tree_budget), a "
        "dotted path that nests (extra.ddtree.budget), or a JSON Pointer whose dots are "
        "literal (/speculative.n_max for llama.cpp).",
        metavar="NAME",
        default="tree_budget",
        parse=lambda raw, src: _parse_field_path(raw, src),
    ),
    OptionDef(
        "budget-endpoint",
        "BUDGET=URL: a server launched with that fixed budget (repeatable; endpoints mode).",
        metavar="B=URL",
        repeatable=True,
        parse=parse_budget_endpoints,
    ),
    OptionDef(
        "dialect",
        "Where the server reports speculation statistics: " + ", ".join(DIALECTS) + ".",
        metavar="NAME",
        default="auto",
        env=("DDTREE_DIALECT",),
        parse=lambda raw, src: parse_choice(raw, src, "dialect", DIALECTS),
    ),
    OptionDef(
        "stats-map",
        "For --ddtree-dialect=custom: FIELD=/json/pointer,... with FIELD among "
        + ", ".join(SPEC_FIELDS)
        + ".",
        metavar="MAP",
        parse=parse_stats_map,
    ),
    OptionDef(
        "tokenizer",
        "Token counting: a path to a tokenizer.json, server (the endpoint's /tokenize), "
        "none (an approximation) or auto (server when the endpoint has /tokenize, else none).",
        metavar="SPEC",
        default="auto",
        env=("DDTREE_TOKENIZER",),
        parse=parse_tokenizer,
    ),
    OptionDef(
        "timeout",
        "Per-request limits in seconds: TOTAL, or connect=S,read=S,total=S.",
        metavar="SPEC",
        default="connect=10,read=60,total=300",
        env=("DDTREE_TIMEOUT",),
        parse=parse_timeout,
    ),
    OptionDef(
        "max-response-bytes",
        "Largest response the client reads, streamed or not (bytes, or with KiB/MiB/GiB); "
        "past it the request fails as too-large and the rest is not read.",
        metavar="SIZE",
        default="8MiB",
        env=("DDTREE_MAX_RESPONSE_BYTES",),
        parse=lambda raw, src: parse_size(raw, src, "max-response-bytes"),
    ),
    OptionDef(
        "retry-429",
        "Send a request answered HTTP 429 again up to N times, after its Retry-After (at most "
        f"60 s a wait; N at most {MAX_RETRY_429}). Every 429 and retry is counted in the summary "
        "and the report.",
        metavar="N",
        default="0",
        parse=lambda raw, src: parse_positive_int(raw, src, "retry-429", 0, MAX_RETRY_429),
    ),
    OptionDef(
        "prompts",
        "A prompt set that replaces the suite's prompts.json in the per-prompt tests, the "
        "sweep and load: JSON shaped like prompts.json, or JSON Lines with one prompt object "
        "a line. A bad file stops the run naming the entry and the field.",
        metavar="FILE",
        env=("DDTREE_PROMPTS",),
        path=True,
        parse=parse_prompts,
    ),
    OptionDef(
        "max-tokens",
        "Default max_tokens of a request.",
        metavar="N",
        default="128",
        parse=lambda raw, src: parse_positive_int(raw, src, "max-tokens", 1, MAX_MAX_TOKENS),
    ),
    OptionDef(
        "min-tokens",
        "Default minimum completion length; shorter answers that stop are an early-stop "
        "violation. Default: the invariants' own threshold.",
        metavar="N",
        parse=lambda raw, src: parse_positive_int(raw, src, "min-tokens", 0, MAX_MAX_TOKENS),
    ),
    OptionDef(
        "api",
        "Which API to call: chat (/chat/completions) or completions (/completions).",
        metavar="API",
        default="chat",
        parse=lambda raw, src: parse_choice(raw, src, "api", ("chat", "completions")),
    ),
    OptionDef(
        "enable-thinking",
        "Send chat_template_kwargs.enable_thinking=true (reasoning allowed, kept apart).",
        flag=True,
        default="false",
        parse=lambda raw, src: parse_bool(raw, src, "enable-thinking"),
    ),
    OptionDef(
        "skip-check",
        "Invariant code not to check (repeatable), for a server known to differ; the run is "
        "reported as weakened.",
        metavar="CODE",
        repeatable=True,
        parse=parse_codes,
    ),
    OptionDef(
        "role-marker",
        "Extra chat-template marker that must not appear in content (repeatable), added to "
        "the built-in role markers, e.g. '<|assistant|>' or 'Human:'.",
        metavar="TEXT",
        repeatable=True,
        parse=lambda raw, src: _parse_markers(raw, src, "role-marker"),
    ),
    OptionDef(
        "allow-marker",
        "Role marker or special token that may appear in content (repeatable), for a model "
        "whose legitimate output contains it.",
        metavar="TEXT",
        repeatable=True,
        parse=lambda raw, src: _parse_markers(raw, src, "allow-marker"),
    ),
    OptionDef(
        "baseline-endpoint",
        "A target-only server for the same model, used for losslessness and diagnosis. "
        "Default: the embedded target-only twin when the embedded server is used.",
        metavar="URL",
        env=("DDTREE_BASELINE_ENDPOINT",),
        parse=lambda raw, src: parse_url(raw, src, "baseline-endpoint"),
    ),
    OptionDef(
        "lossless",
        "Losslessness at temperature 0: near-tie[:MARGIN] (a divergence where the target "
        "preferred its own token to the speculative path's by at most MARGIN nats, 0.5 by "
        "default, read from its log-probabilities, is a warning and the budget stays timed; "
        "any other fails), exact (every divergence fails), prefix:N (only the first N tokens "
        "must match) or off.",
        metavar="MODE",
        default="near-tie",
        env=("DDTREE_LOSSLESS",),
        parse=parse_lossless,
    ),
    OptionDef(
        "distribution-samples",
        "Losslessness above temperature 0 (ddtree_distribution): answers per side, each with "
        "its own seed, from the server and from the target-only baseline.",
        metavar="N",
        default="40",
        parse=lambda raw, src: parse_positive_int(raw, src, "distribution-samples", 5, 10_000),
    ),
    OptionDef(
        "distribution-alpha",
        "Losslessness above temperature 0: the false-alarm rate of its two-sample test "
        "(greater than 0, at most 0.5).",
        metavar="A",
        default="0.05",
        parse=parse_alpha,
    ),
    OptionDef(
        "report",
        "Write sweep.json and sweep.html into this directory.",
        metavar="DIR",
        env=("DDTREE_REPORT",),
        parse=parse_report,
    ),
    OptionDef(
        "rounds",
        "Timed rounds per budget and prompt in gated benchmarks.",
        metavar="N",
        default="3",
        parse=lambda raw, src: parse_positive_int(raw, src, "rounds"),
    ),
    OptionDef(
        "warmup-rounds",
        "Untimed warm-up rounds before the timed ones.",
        metavar="N",
        default="1",
        parse=lambda raw, src: parse_positive_int(raw, src, "warmup-rounds", 0),
    ),
    OptionDef(
        "sweep-seed",
        "Seed of the shuffled, interleaved budget order.",
        metavar="N",
        default="0",
        parse=lambda raw, src: parse_positive_int(raw, src, "sweep-seed", 0),
    ),
    OptionDef(
        "sweep-order",
        "shuffled (seeded, interleaved across budgets) or fixed (budgets in the given order).",
        metavar="ORDER",
        default="shuffled",
        parse=lambda raw, src: parse_choice(raw, src, "sweep-order", ("shuffled", "fixed")),
    ),
    OptionDef(
        "sweep",
        "adaptive (the default: the budgets race, a clearly slower budget leaves, the rest get "
        "more requests until one is best, or the contenders are as fast within the margin and "
        "the smallest is recommended, or --ddtree-sweep-requests is spent) or exhaustive "
        "(every budget gets every round, judged once). Under pytest-xdist the default is "
        "exhaustive: one race cannot span workers. Load points race only when adaptive is "
        "given by name.",
        metavar="MODE",
        default="adaptive",
        env=("DDTREE_SWEEP",),
        parse=lambda raw, src: parse_choice(raw, src, "sweep", ("exhaustive", "adaptive")),
    ),
    OptionDef(
        "equivalence",
        "The sweep's practical margin: budgets within it of the best are as fast, and the "
        "smallest of them is recommended (2% or 0.02; above 0, below 50%).",
        metavar="MARGIN",
        default="2%",
        env=("DDTREE_EQUIVALENCE",),
        parse=parse_equivalence,
    ),
    OptionDef(
        "sweep-requests",
        "The adaptive sweep's request budget (warm-up and smoke requests not counted); spent "
        "before the best is known, the sweep is undecided. auto: what an exhaustive sweep of "
        "30 rounds would send (a cap: a decided race stops sooner).",
        metavar="N",
        default="auto",
        env=("DDTREE_SWEEP_REQUESTS",),
        parse=parse_sweep_requests,
    ),
    OptionDef(
        "sweep-passes",
        "Adaptive sweep, benchmark tests (ddtree_benchmark with tree_budget): the passes over "
        "the sweep prompts collected for the race (ids gain pass=K); a later pass runs only "
        "for the budgets still racing, and none runs once the race is decided. 1 (the "
        "default; the bundled suite sets 4): one test per prompt and budget, each prompt a "
        "round of the race, ids without pass=K.",
        metavar="N",
        default="1",
        env=("DDTREE_SWEEP_PASSES",),
        parse=lambda raw, src: parse_positive_int(raw, src, "sweep-passes", maximum=100),
    ),
    OptionDef(
        "reference-fault",
        "Embedded server only: inject this fault (repeatable), to see how a broken server fails.",
        metavar="FAULT",
        repeatable=True,
        parse=parse_codes,
    ),
    OptionDef(
        "reference-latency",
        "Embedded server only: simulate accelerator time (on) or answer as fast as possible (off).",
        metavar="on|off",
        default="on",
        parse=lambda raw, src: parse_bool(raw, src, "reference-latency", "on or off"),
    ),
    OptionDef(
        "reference-slowdown",
        "Embedded server only: multiply its simulated accelerator time by this factor (0.5 is "
        "a twice as fast accelerator; budget trade-offs keep their shape).",
        metavar="F",
        default="1",
        parse=parse_slowdown,
    ),
    OptionDef(
        "reference-slowdown-after",
        "Embedded server only: after N generation requests, every simulated cost is "
        "multiplied by F (default 3), a server that degrades mid-run (to see drift).",
        metavar="N[:F]",
        parse=parse_slowdown_after,
    ),
    OptionDef(
        "reference-jitter",
        "Embedded server only: seeded multiplicative noise on each request's simulated costs, "
        "with this coefficient of variation (0.05 or 5%; 0 is none), as a real accelerator "
        "has.",
        metavar="CV",
        default="0",
        parse=parse_jitter,
    ),
    OptionDef(
        "probe",
        "A command run before and after the session (e.g. nvidia-smi --query-gpu=clocks.sm,"
        "temperature.gpu --format=csv); its output goes into the reports and pytest-benchmark's "
        "machine_info. Split like a shell command line but run without a shell; bounded to "
        "10 s and 64 KiB.",
        metavar="CMD",
        env=("DDTREE_PROBE",),
        parse=parse_probe,
    ),
    OptionDef(
        "slo",
        "Service-level objective of ddtree_load tests: per-request limits ttft, itl, tpot, "
        "e2e (units us, ms, s) and the share of requests that must meet them all, e.g. "
        "ttft=500ms,tpot=50ms,e2e=2s,goodput=95% (default share 100%).",
        metavar="SPEC",
        env=("DDTREE_SLO",),
        parse=load_parser("slo"),
    ),
    OptionDef(
        "load-concurrency",
        "Concurrencies ddtree_load runs at (requests in flight, closed loop).",
        metavar="C,C,...",
        default="1,4,16",
        env=("DDTREE_LOAD_CONCURRENCY",),
        parse=load_parser("concurrency"),
    ),
    OptionDef(
        "load-rate",
        "Arrival rates (requests/s, open loop) ddtree_load runs at, besides the concurrencies.",
        metavar="R,R,...",
        env=("DDTREE_LOAD_RATE",),
        parse=load_parser("rate"),
    ),
    OptionDef(
        "load-burstiness",
        "Burstiness of the arrivals at a rate: gamma-distributed gaps of this shape; 1 is "
        "Poisson, below 1 burstier, above 1 more regular.",
        metavar="B",
        default="1",
        parse=parse_burstiness,
    ),
    OptionDef(
        "load-requests",
        "Requests per tree budget and load point in ddtree_load; auto is 8 x C (at least 16) "
        "at a concurrency and 32 at a rate. Under xdist the workers share them.",
        metavar="N",
        default="auto",
        parse=parse_load_requests,
    ),
    OptionDef(
        "metrics-url",
        "The server's Prometheus page, scraped before and after each budget group and load "
        "point (counter deltas, shared-server warnings), or off. Default: the endpoint "
        "root's /metrics, probed once; off when absent.",
        metavar="URL|off",
        env=("DDTREE_METRICS_URL",),
        parse=parse_metrics_url,
    ),
)

OPTIONS_BY_ATTR: dict[str, OptionDef] = {o.attr: o for o in OPTIONS}


def _parse_markers(raw: Sequence[str], source: str, name: str) -> tuple[str, ...]:
    out: list[str] = []
    for item in raw:
        if not item.strip():
            raise fail(name, item, source, "expected a non-empty marker text")
        if item not in out:
            out.append(item)
    return tuple(out)


_FIELD_NAME = r"[A-Za-z_][A-Za-z0-9_]*"


def _parse_field_path(raw: Any, source: str) -> str:
    text = str(raw).strip()
    if text.startswith("/"):
        # JSON Pointer: each /token is one key, dots literal (/speculative.n_max)
        tokens = text[1:].split("/")
        for token in tokens:
            if not token.strip() or re.search(r"~(?![01])", token) or token != token.strip():
                raise fail(
                    "budget-field",
                    raw,
                    source,
                    "expected a JSON Pointer of non-empty keys (/speculative.n_max, "
                    "/extra/ddtree/budget; ~1 for '/', ~0 for '~')",
                )
        return text
    if not re.fullmatch(rf"{_FIELD_NAME}(\.{_FIELD_NAME})*", text):
        raise fail(
            "budget-field",
            raw,
            source,
            "expected a field name, a dotted path (extra.ddtree.budget) or a JSON Pointer "
            "for keys with dots (/speculative.n_max)",
        )
    return text


# --------------------------------------------------------------------------
# resolution


def resolve(
    cli: Mapping[str, Any],
    ini: Mapping[str, Any],
    env: Mapping[str, str],
    suite: Mapping[str, str] | None = None,
) -> Settings:
    """Resolve every option: CLI > ini > the bundled suite's ini > environment > default.

    ``cli`` maps an option's ``dest`` to the parsed command-line value (None
    or [] when not given), ``ini`` maps its ini key to the configured value
    (absent, "" or [] when not set), ``env`` is the process environment.
    ``suite`` holds the ``ddtree_*`` keys of the bundled suite's ``pytest.ini`` when the
    run is the bundled suite under another ini file (``pytest --pyargs
    pytest_ddtree.suite``): they apply as that ini file would, under the user's own.
    """
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for opt in OPTIONS:
        raw, source = _pick(opt, cli, ini, env, suite or {})
        if raw is None:
            continue
        assert opt.parse is not None
        if opt.repeatable and isinstance(raw, str):
            raw = [line for line in re.split(r"[\n]+", raw) if line.strip()]
        if opt.flag and isinstance(raw, bool):
            raw = "true" if raw else "false"
        values[opt.attr] = opt.parse(raw, source)
        sources[opt.attr] = source
    return _cross_validate(values, sources)


def _pick(
    opt: OptionDef,
    cli: Mapping[str, Any],
    ini: Mapping[str, Any],
    env: Mapping[str, str],
    suite: Mapping[str, str],
) -> tuple[Any, str]:
    value = cli.get(opt.dest)
    if value not in (None, [], ()):
        return value, f"option {opt.cli}"
    value = ini.get(opt.ini)
    if value not in (None, "", [], ()):
        return value, f"ini key {opt.ini}"
    value = suite.get(opt.ini)
    if value not in (None, ""):
        return value, f"ini key {opt.ini} of the bundled suite's pytest.ini"
    for var in opt.env:
        if env.get(var, "").strip():
            return env[var], f"environment variable {var}"
    if opt.default is not None:
        return opt.default, "default"
    return None, "default"


def _cross_validate(values: dict[str, Any], sources: dict[str, str]) -> Settings:
    endpoints: dict[int, str] = values.get("budget_endpoints", {})
    mode = values.get("budget_mode")
    if mode is None:
        mode = "endpoints" if endpoints else "field"
        sources["budget_mode"] = "default"
    if mode == "endpoints":
        if not endpoints:
            raise SettingsError(
                f"invalid budget-mode 'endpoints' (from {sources['budget_mode']}): "
                "give at least one --ddtree-budget-endpoint BUDGET=URL"
            )
        if sources.get("budgets", "default") == "default":
            values["budgets"] = tuple(sorted(endpoints))
        else:
            missing = [b for b in values["budgets"] if b not in endpoints]
            if missing:
                raise SettingsError(
                    f"invalid budgets {','.join(map(str, values['budgets']))!s} "
                    f"(from {sources['budgets']}): no --ddtree-budget-endpoint for "
                    f"{', '.join(map(str, missing))}"
                )
    elif endpoints:
        raise SettingsError(
            f"invalid budget-endpoint (from {sources['budget_endpoints']}): only used with "
            f"budget-mode endpoints, but budget-mode is {mode!r} (from {sources['budget_mode']})"
        )
    if mode == "none":
        values["budgets"] = ()
    values["budget_mode"] = mode
    mapped = stats_map_dialect()
    chosen = lookup(values.get("dialect"))
    if chosen is not None and chosen.needs_stats_map and not values.get("stats_map"):
        raise SettingsError(
            f"invalid dialect {chosen.name!r} (from {sources['dialect']}): "
            "also give --ddtree-stats-map FIELD=/pointer,..."
        )
    if values.get("stats_map") and values.get("dialect") is not None and chosen is not mapped:
        if sources.get("dialect") == "default":
            values["dialect"] = mapped.name
        else:
            raise SettingsError(
                f"invalid stats-map (from {sources['stats_map']}): only used with "
                f"--ddtree-dialect={mapped.name}, but dialect is {values['dialect']!r} "
                f"(from {sources['dialect']})"
            )
    if values.get("endpoint") is not None and values.get("reference_faults"):
        raise SettingsError(
            f"invalid reference-fault (from {sources['reference_faults']}): faults can only be "
            "injected into the embedded server, but an endpoint is set "
            f"(from {sources['endpoint']})"
        )
    if values.get("endpoint") is not None and values.get("reference_slowdown_after"):
        raise SettingsError(
            "invalid reference-slowdown-after (from "
            f"{sources['reference_slowdown_after']}): only the embedded server can be slowed "
            f"down, but an endpoint is set (from {sources['endpoint']})"
        )
    if values.get("sweep_requests") is not None:
        arms = max(len(values.get("budgets", DEFAULT_BUDGETS)), 1)
        if values["sweep_requests"] < DEFAULT_MIN_N * arms:
            raise SettingsError(
                f"invalid sweep-requests {values['sweep_requests']} (from "
                f"{sources['sweep_requests']}): below the minimum n ({DEFAULT_MIN_N}) x "
                f"{arms} budget(s) = {DEFAULT_MIN_N * arms}, so no budget could be judged"
            )
    if values.get("endpoint") is not None and values.get("reference_jitter"):
        raise SettingsError(
            f"invalid reference-jitter (from {sources['reference_jitter']}): only the embedded "
            f"server has simulated costs to jitter, but an endpoint is set "
            f"(from {sources['endpoint']})"
        )
    return Settings(**values, sources=sources)


def check_reference_faults(settings: Settings, known: Collection[str]) -> Settings:
    """``settings`` unchanged when every ``--ddtree-reference-fault`` is in ``known``.

    The fault catalogue belongs to the reference server; the caller passes it
    in, so resolving options never loads the server.
    """
    for fault in settings.reference_faults:
        if fault not in known:
            raise SettingsError(
                f"invalid reference-fault {fault!r} (from {settings.source_of('reference_faults')}"
                f"): known faults are {', '.join(known)}"
            )
    return settings


#: How an unset budget (the server's own) is named everywhere: ids, groups, tables, reports.


#: Keywords allowed in ``@pytest.mark.ddtree(...)``: each overrides the setting of that name.
MARKER_KEYS: tuple[str, ...] = (
    "budgets",
    "max_tokens",
    "min_tokens",
    "api",
    "enable_thinking",
    "skip_checks",
    "rounds",
    "warmup_rounds",
    "lossless",
)


def apply_marker(settings: Settings, kwargs: Mapping[str, Any], where: str) -> Settings:
    """Settings with ``@pytest.mark.ddtree(**kwargs)`` applied; bad keys or values raise."""
    changes: dict[str, Any] = {}
    src = f"@pytest.mark.ddtree on {where}"
    for key, value in kwargs.items():
        if key not in MARKER_KEYS:
            raise SettingsError(
                f"invalid marker argument {key!r} ({src}): allowed are {', '.join(MARKER_KEYS)}"
            )
        if key == "budgets":
            if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
                raise fail("budgets", value, src, "expected a list of positive integers")
            changes["budgets"] = parse_budgets(",".join(str(v) for v in value), src)
        elif key in ("max_tokens", "rounds"):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise fail(key, value, src, "expected an integer >= 1")
            if key == "max_tokens" and value > MAX_MAX_TOKENS:
                raise fail(key, value, src, f"expected an integer between 1 and {MAX_MAX_TOKENS}")
            changes[key] = value
        elif key in ("min_tokens", "warmup_rounds"):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise fail(key, value, src, "expected an integer >= 0")
            changes[key] = value
        elif key == "api":
            changes["api"] = parse_choice(str(value), src, "api", ("chat", "completions"))
        elif key == "enable_thinking":
            if not isinstance(value, bool):
                raise fail(key, value, src, "expected True or False")
            changes[key] = value
        elif key == "skip_checks":
            if isinstance(value, str):
                value = [value]
            changes[key] = tuple(dict.fromkeys((*settings.skip_checks, *parse_codes(value, src))))
        elif key == "lossless":
            changes[key] = parse_lossless(str(value), src)
    return settings.with_overrides(**changes)
