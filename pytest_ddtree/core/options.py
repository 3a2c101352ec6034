"""The option table and its resolution into one validated ``Settings``.

Every option is defined once in ``OPTIONS``; the plugin registers the command
line flags and ini keys from that table and the docs generate the option
reference from it, so the three cannot drift. Resolution order is
command line > ini (``[tool.pytest.ini_options]``) > environment > the bundled suite's own
``pytest.ini`` (its defaults, when the run is that suite) > default,
and a bad value raises ``SettingsError`` with one line naming the value and
where it came from. The values themselves, their parsers and ``Settings`` are
``pytest_ddtree.core.settings``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_ddtree.core.dialects import lookup, stats_map_dialect
from pytest_ddtree.core.settings import (
    DIALECTS,
    MAX_RETRY_429,
    SPEC_FIELDS,
    Settings,
    SettingsError,
    fail,
    too_few_sweep_requests,
)

_FIELDS: dict[str, dataclasses.Field[Any]] = {f.name: f for f in dataclasses.fields(Settings)}

# --------------------------------------------------------------------------
# the option table


@dataclass(frozen=True)
class OptionDef:
    """One option: flag ``--ddtree-<name>``, ini key ``ddtree_<name_with_underscores>``.

    The ``Settings`` attribute is the name with underscores, plural for a
    repeatable option (``--ddtree-skip-check`` sets ``skip_checks``); that field of
    ``Settings`` states the option's default and parser, once.
    """

    name: str
    help: str
    metavar: str = "VALUE"
    env: tuple[str, ...] = ()
    repeatable: bool = False
    flag: bool = False
    secret: bool = False
    path: bool = False  # its ini value is a path relative to the ini file, as pytest's are

    @property
    def field(self) -> dataclasses.Field[Any]:
        """The ``Settings`` field this option sets: it declares the default and the parser."""
        return _FIELDS[self.attr]

    @property
    def default(self) -> str | None:
        """The default as a user would write it (None: unset), from the ``Settings`` field."""
        default: str | None = self.field.metadata["default"]
        return default

    def parse(self, raw: Any, source: str, name: str | None = None) -> Any:
        """``raw`` (from ``source``) parsed by the field's parser; errors name ``name``
        (a marker's keyword), else the option."""
        return self.field.metadata["parse"](raw, source, name or self.name)

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
    ),
    OptionDef(
        "model",
        "Model id to request. Default: the first id listed by GET /models.",
        metavar="ID",
        env=("DDTREE_MODEL",),
    ),
    OptionDef(
        "api-key",
        "API key sent as a Bearer token; never printed or stored in any report. "
        "OPENAI_API_KEY is sent only to an endpoint from OPENAI_BASE_URL.",
        metavar="KEY",
        env=("DDTREE_API_KEY", "OPENAI_API_KEY"),
        secret=True,
    ),
    OptionDef(
        "budgets",
        "Tree budgets to sweep; every test using the tree_budget fixture runs once per budget.",
        metavar="B,B,...",
        env=("DDTREE_BUDGETS",),
    ),
    OptionDef(
        "temperatures",
        "Sampling temperatures of the timed tests (ddtree_benchmark, ddtree_sweep, "
        "ddtree_load): each runs once per temperature, with its own table and "
        "recommendation. Above 0 every request carries a seed (the same at every budget). "
        "Losslessness and determinism stay at 0.",
        metavar="T,T,...",
        env=("DDTREE_TEMPERATURES",),
    ),
    OptionDef(
        "budget-mode",
        "How a request chooses its tree budget: field (a JSON body field), endpoints "
        "(one server per budget, see --ddtree-budget-endpoint) or none (the server's own "
        "fixed budget). Default: endpoints when --ddtree-budget-endpoint is given, else field.",
        metavar="MODE",
        env=("DDTREE_BUDGET_MODE",),
    ),
    OptionDef(
        "budget-field",
        "Request body field carrying the budget in field mode: a name (tree_budget), a "
        "dotted path that nests (extra.ddtree.budget), or a JSON Pointer whose dots are "
        "literal (/speculative.n_max for llama.cpp).",
        metavar="NAME",
    ),
    OptionDef(
        "budget-endpoint",
        "BUDGET=URL: a server launched with that fixed budget (repeatable; endpoints mode).",
        metavar="B=URL",
        repeatable=True,
    ),
    OptionDef(
        "dialect",
        "Where the server reports speculation statistics: " + ", ".join(DIALECTS) + ".",
        metavar="NAME",
        env=("DDTREE_DIALECT",),
    ),
    OptionDef(
        "stats-map",
        "For --ddtree-dialect=custom: FIELD=/json/pointer,... with FIELD among "
        + ", ".join(SPEC_FIELDS)
        + ".",
        metavar="MAP",
    ),
    OptionDef(
        "tokenizer",
        "Token counting: a path to a tokenizer.json, server (the endpoint's /tokenize), "
        "none (an approximation) or auto (server when the endpoint has /tokenize, else none).",
        metavar="SPEC",
        env=("DDTREE_TOKENIZER",),
    ),
    OptionDef(
        "timeout",
        "Per-request limits in seconds: TOTAL, or connect=S,read=S,total=S.",
        metavar="SPEC",
        env=("DDTREE_TIMEOUT",),
    ),
    OptionDef(
        "max-response-bytes",
        "Largest response the client reads, streamed or not (bytes, or with KiB/MiB/GiB); "
        "past it the request fails as too-large and the rest is not read.",
        metavar="SIZE",
        env=("DDTREE_MAX_RESPONSE_BYTES",),
    ),
    OptionDef(
        "retry-429",
        "Send a request answered HTTP 429 again up to N times, after its Retry-After (at most "
        f"60 s a wait; N at most {MAX_RETRY_429}). Every 429 and retry is counted in the summary "
        "and the report.",
        metavar="N",
    ),
    OptionDef(
        "prompts",
        "A prompt set that replaces the suite's prompts.json in the per-prompt tests, the "
        "sweep and load: JSON shaped like prompts.json, or JSON Lines with one prompt object "
        "a line. A bad file stops the run naming the entry and the field.",
        metavar="FILE",
        env=("DDTREE_PROMPTS",),
        path=True,
    ),
    OptionDef(
        "max-tokens",
        "Default max_tokens of a request.",
        metavar="N",
    ),
    OptionDef(
        "min-tokens",
        "Default minimum completion length; shorter answers that stop are an early-stop "
        "violation. Default: the invariants' own threshold.",
        metavar="N",
    ),
    OptionDef(
        "api",
        "Which API to call: chat (/chat/completions) or completions (/completions).",
        metavar="API",
    ),
    OptionDef(
        "enable-thinking",
        "Send chat_template_kwargs.enable_thinking=true (reasoning allowed, kept apart).",
        flag=True,
    ),
    OptionDef(
        "skip-check",
        "Invariant code not to check (repeatable), for a server known to differ; the run is "
        "reported as weakened.",
        metavar="CODE",
        repeatable=True,
    ),
    OptionDef(
        "require",
        "Features the deployment must serve (comma list of tools, response_format or its "
        "alias json, logprobs): an HTTP 400 that refuses one of them by naming it fails its "
        "test. Default: such a refusal skips the feature's tests, and the summary says so in "
        "one line.",
        metavar="F,F,...",
        env=("DDTREE_REQUIRE",),
    ),
    OptionDef(
        "role-marker",
        "Extra chat-template marker that must not appear in content (repeatable), added to "
        "the built-in role markers, e.g. '<|assistant|>' or 'Human:'.",
        metavar="TEXT",
        repeatable=True,
    ),
    OptionDef(
        "allow-marker",
        "Role marker or special token that may appear in content (repeatable), for a model "
        "whose legitimate output contains it.",
        metavar="TEXT",
        repeatable=True,
    ),
    OptionDef(
        "baseline-endpoint",
        "A target-only server for the same model, used for losslessness and diagnosis. "
        "Default: the embedded target-only twin when the embedded server is used.",
        metavar="URL",
        env=("DDTREE_BASELINE_ENDPOINT",),
    ),
    OptionDef(
        "lossless",
        "Losslessness at temperature 0: near-tie[:MARGIN] (a divergence where the target "
        "preferred its own token to the speculative path's by at most MARGIN nats, 0.5 by "
        "default, read from its log-probabilities, is a warning and the budget stays timed; "
        "any other fails), exact (every divergence fails), prefix:N (only the first N tokens "
        "must match) or off.",
        metavar="MODE",
        env=("DDTREE_LOSSLESS",),
    ),
    OptionDef(
        "distribution-samples",
        "Losslessness above temperature 0 (ddtree_distribution): answers per side, each with "
        "its own seed, from the server and from the target-only baseline.",
        metavar="N",
    ),
    OptionDef(
        "distribution-alpha",
        "Losslessness above temperature 0: the false-alarm rate of its two-sample test "
        "(greater than 0, at most 0.5).",
        metavar="A",
    ),
    OptionDef(
        "report",
        "Write sweep.json and sweep.html into this directory.",
        metavar="DIR",
        env=("DDTREE_REPORT",),
    ),
    OptionDef(
        "rounds",
        "Timed rounds per budget and prompt in gated benchmarks.",
        metavar="N",
    ),
    OptionDef(
        "warmup-rounds",
        "Untimed warm-up rounds before the timed ones.",
        metavar="N",
    ),
    OptionDef(
        "sweep-seed",
        "Seed of the shuffled, interleaved budget order.",
        metavar="N",
    ),
    OptionDef(
        "sweep-order",
        "shuffled (seeded, interleaved across budgets) or fixed (budgets in the given order).",
        metavar="ORDER",
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
        env=("DDTREE_SWEEP",),
    ),
    OptionDef(
        "equivalence",
        "The sweep's practical margin: budgets within it of the best are as fast, and the "
        "smallest of them is recommended (2% or 0.02; above 0, below 50%).",
        metavar="MARGIN",
        env=("DDTREE_EQUIVALENCE",),
    ),
    OptionDef(
        "sweep-requests",
        "The adaptive sweep's request budget (warm-up and smoke requests not counted); spent "
        "before the best is known, the sweep is undecided. auto: what an exhaustive sweep of "
        "30 rounds would send (a cap: a decided race stops sooner).",
        metavar="N",
        env=("DDTREE_SWEEP_REQUESTS",),
    ),
    OptionDef(
        "sweep-passes",
        "Adaptive sweep, benchmark tests (ddtree_benchmark with tree_budget): the passes over "
        "the sweep prompts collected for the race (ids gain pass=K); a later pass runs only "
        "for the budgets still racing, and none runs once the race is decided. 1 (the "
        "default; the bundled suite sets 4): one test per prompt and budget, each prompt a "
        "round of the race, ids without pass=K.",
        metavar="N",
        env=("DDTREE_SWEEP_PASSES",),
    ),
    OptionDef(
        "reference-fault",
        "Embedded server only: inject this fault (repeatable), to see how a broken server fails.",
        metavar="FAULT",
        repeatable=True,
    ),
    OptionDef(
        "reference-latency",
        "Embedded server only: simulate accelerator time (on) or answer as fast as possible (off).",
        metavar="on|off",
    ),
    OptionDef(
        "reference-slowdown",
        "Embedded server only: multiply its simulated accelerator time by this factor (0.5 is "
        "a twice as fast accelerator; budget trade-offs keep their shape).",
        metavar="F",
    ),
    OptionDef(
        "reference-slowdown-after",
        "Embedded server only: after N generation requests, every simulated cost is "
        "multiplied by F (default 3), a server that degrades mid-run (to see drift).",
        metavar="N[:F]",
    ),
    OptionDef(
        "reference-jitter",
        "Embedded server only: seeded multiplicative noise on each request's simulated costs, "
        "with this coefficient of variation (0.05 or 5%; 0 is none), as a real accelerator "
        "has.",
        metavar="CV",
    ),
    OptionDef(
        "probe",
        "A command run before and after the session (e.g. nvidia-smi --query-gpu=clocks.sm,"
        "temperature.gpu --format=csv); its output goes into the reports and pytest-benchmark's "
        "machine_info. Split like a shell command line but run without a shell; bounded to "
        "10 s and 64 KiB.",
        metavar="CMD",
        env=("DDTREE_PROBE",),
    ),
    OptionDef(
        "slo",
        "Service-level objective of ddtree_load tests: per-request limits ttft, itl, tpot, "
        "e2e (units us, ms, s) and the share of requests that must meet them all, e.g. "
        "ttft=500ms,tpot=50ms,e2e=2s,goodput=95% (default share 100%).",
        metavar="SPEC",
        env=("DDTREE_SLO",),
    ),
    OptionDef(
        "load-concurrency",
        "Concurrencies ddtree_load runs at (requests in flight, closed loop).",
        metavar="C,C,...",
        env=("DDTREE_LOAD_CONCURRENCY",),
    ),
    OptionDef(
        "load-rate",
        "Arrival rates (requests/s, open loop) ddtree_load runs at, besides the concurrencies.",
        metavar="R,R,...",
        env=("DDTREE_LOAD_RATE",),
    ),
    OptionDef(
        "load-burstiness",
        "Burstiness of the arrivals at a rate: gamma-distributed gaps of this shape; 1 is "
        "Poisson, below 1 burstier, above 1 more regular.",
        metavar="B",
    ),
    OptionDef(
        "load-requests",
        "Requests per tree budget and load point in ddtree_load; auto is 8 x C (at least 16) "
        "at a concurrency and 32 at a rate. Under xdist the workers share them.",
        metavar="N",
    ),
    OptionDef(
        "context",
        "Prompt depths in tokens (e.g. 512,2048,8192), or auto: 512 and doubling up to the "
        "server's context length (from GET /models). Each depth gets its own prompts of "
        "exactly that many tokens by the run's tokenizer, chat template included: passages "
        "of a public-domain book shipped with the plugin, each behind a prefix of its own.",
        metavar="N,N,...|auto",
        env=("DDTREE_CONTEXT",),
    ),
    OptionDef(
        "metrics-url",
        "The server's Prometheus page, scraped before and after each budget group and load "
        "point (counter deltas, shared-server warnings), or off. Default: the endpoint "
        "root's /metrics, probed once; off when absent.",
        metavar="URL|off",
        env=("DDTREE_METRICS_URL",),
    ),
)

OPTIONS_BY_ATTR: dict[str, OptionDef] = {o.attr: o for o in OPTIONS}
if set(OPTIONS_BY_ATTR) != set(_FIELDS) - {"sources"}:  # each field is one option's, and back
    raise RuntimeError(f"options and Settings differ: {set(OPTIONS_BY_ATTR) ^ set(_FIELDS)}")


# --------------------------------------------------------------------------
# resolution


def resolve(
    cli: Mapping[str, Any],
    ini: Mapping[str, Any],
    env: Mapping[str, str],
    suite: Mapping[str, str] | None = None,
) -> Settings:
    """Resolve every option: CLI > ini > environment > the bundled suite's ini > default.

    ``cli`` maps an option's ``dest`` to the parsed command-line value (None
    or [] when not given), ``ini`` maps its ini key to the configured value
    (absent, "" or [] when not set), ``env`` is the process environment.
    ``suite`` holds the ``ddtree_*`` keys of the bundled suite's ``pytest.ini`` when the
    run is the bundled suite under another ini file (``pytest --pyargs
    pytest_ddtree.suite``, or ``pytest example_suite`` in a clone): they are the suite's
    defaults, under the user's own ini file and the environment.
    """
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for opt in OPTIONS:
        raw, source = _pick(opt, cli, ini, env, suite or {})
        if raw is None:
            continue
        raw = _toml_native(opt, raw)
        if opt.repeatable and isinstance(raw, str):
            raw = [line for line in re.split(r"[\n]+", raw) if line.strip()]
        if opt.flag and isinstance(raw, bool):
            raw = "true" if raw else "false"
        values[opt.attr] = opt.parse(raw, source)
        sources[opt.attr] = source
    for rule in CROSS_FIELD_RULES:
        rule(values, sources)
    return Settings(**values, sources=sources)


def _toml_native(opt: OptionDef, raw: Any) -> Any:
    """An ini value as the option's parser reads it: ``pyproject.toml`` hands over its own
    types (``ddtree_budgets = [16, 32]``, ``ddtree_rounds = 3``), which a user writes as
    naturally as the text ``"16,32"``; a list becomes its items joined by commas (one item a
    line for an option given several times), a number its text."""
    if isinstance(raw, (list, tuple)) and not opt.repeatable:
        return ",".join(str(item) for item in raw)
    if isinstance(raw, (list, tuple)):
        return [str(item) for item in raw]
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return str(raw)
    return raw


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
    for var in opt.env:
        if env.get(var, "").strip():
            return env[var], f"environment variable {var}"
    value = suite.get(opt.ini)
    if value not in (None, ""):
        return value, f"ini key {opt.ini} of the bundled suite's pytest.ini"
    if opt.default is not None:
        return opt.default, "default"
    return None, "default"


# --------------------------------------------------------------------------
# cross-field rules: each a small named function, checked once, in this order, by ``resolve``.
# Each takes the parsed values and their sources (by attribute), may settle a value that
# depends on another (an implied mode), and raises ``SettingsError`` in one line.

Rule = Callable[[dict[str, Any], dict[str, str]], None]


def budget_mode_follows_endpoints(values: dict[str, Any], sources: dict[str, str]) -> None:
    """Unset, the budget mode is endpoints when budget endpoints are given; it needs them."""
    endpoints: dict[int, str] = values.get("budget_endpoints", {})
    mode = values.get("budget_mode")
    if mode is None:
        mode = "endpoints" if endpoints else Settings.budget_mode
        sources["budget_mode"] = "default"
    if mode == "endpoints" and not endpoints:
        raise SettingsError(
            f"invalid budget-mode 'endpoints' (from {sources['budget_mode']}): "
            "give at least one --ddtree-budget-endpoint BUDGET=URL"
        )
    if mode != "endpoints" and endpoints:
        raise SettingsError(
            f"invalid budget-endpoint (from {sources['budget_endpoints']}): only used with "
            f"budget-mode endpoints, but budget-mode is {mode!r} (from {sources['budget_mode']})"
        )
    values["budget_mode"] = mode


def budgets_follow_budget_mode(values: dict[str, Any], sources: dict[str, str]) -> None:
    """In endpoints mode the budgets are the endpoints' (each given one needs one); in none
    mode there are none."""
    mode = values["budget_mode"]
    if mode == "endpoints":
        endpoints: dict[int, str] = values["budget_endpoints"]
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
    if mode == "none":
        values["budgets"] = ()


def custom_dialect_needs_stats_map(values: dict[str, Any], sources: dict[str, str]) -> None:
    """A dialect that reads its statistics where ``--ddtree-stats-map`` says needs the map."""
    chosen = lookup(values.get("dialect"))
    if chosen is not None and chosen.needs_stats_map and not values.get("stats_map"):
        raise SettingsError(
            f"invalid dialect {chosen.name!r} (from {sources['dialect']}): "
            "also give --ddtree-stats-map FIELD=/pointer,..."
        )


def stats_map_means_custom_dialect(values: dict[str, Any], sources: dict[str, str]) -> None:
    """A stats map implies the custom dialect, and contradicts any other dialect given."""
    mapped = stats_map_dialect()
    chosen = lookup(values.get("dialect"))
    if values.get("stats_map") and values.get("dialect") is not None and chosen is not mapped:
        if sources.get("dialect") == "default":
            values["dialect"] = mapped.name
        else:
            raise SettingsError(
                f"invalid stats-map (from {sources['stats_map']}): only used with "
                f"--ddtree-dialect={mapped.name}, but dialect is {values['dialect']!r} "
                f"(from {sources['dialect']})"
            )


#: the OpenAI client's own pair of variables: its key is meant for its URL's server only
OPENAI_KEY = "environment variable OPENAI_API_KEY"
OPENAI_URL = "environment variable OPENAI_BASE_URL"
#: the source of a key that was set but is not sent (``api_key`` None)
KEY_WITHHELD = f"{OPENAI_KEY}, not sent: it goes only to an endpoint from OPENAI_BASE_URL"


def openai_key_only_with_openai_url(values: dict[str, Any], sources: dict[str, str]) -> None:
    """``OPENAI_API_KEY`` is sent only to the endpoint ``OPENAI_BASE_URL`` names.

    A developer's real key is in ``OPENAI_API_KEY`` for the OpenAI client; it must not reach
    the embedded server, or a test server given by option, ini key or ``DDTREE_ENDPOINT``.
    Such a server's key is ``--ddtree-api-key`` or ``DDTREE_API_KEY``."""
    if sources.get("api_key") == OPENAI_KEY and sources.get("endpoint") != OPENAI_URL:
        values.pop("api_key", None)
        sources["api_key"] = KEY_WITHHELD


def key_note(settings: Settings) -> str:
    """Whether a key is sent, and where it came from (never the key), for the header."""
    source = settings.source_of("api_key")
    if settings.api_key:
        return f"api key sent (from {source})"
    if source == KEY_WITHHELD:
        return (
            "no api key (OPENAI_API_KEY is sent only to an endpoint from OPENAI_BASE_URL; "
            "give --ddtree-api-key or DDTREE_API_KEY)"
        )
    return "no api key"


def embedded_server_only(attr: str, why: str) -> Rule:
    """A rule: option ``attr`` applies to the embedded server only, so not with an endpoint."""

    def rule(values: dict[str, Any], sources: dict[str, str]) -> None:
        if values.get("endpoint") is not None and values.get(attr):
            raise SettingsError(
                f"invalid {OPTIONS_BY_ATTR[attr].name} (from {sources[attr]}): {why}, but an "
                f"endpoint is set (from {sources['endpoint']})"
            )

    rule.__name__ = rule.__qualname__ = f"{attr}_needs_embedded_server"
    return rule


def sweep_requests_can_judge(values: dict[str, Any], sources: dict[str, str]) -> None:
    """An adaptive sweep's request budget gives every budget the race's minimum: here
    before any prompt is known, again by the sweep with its prompts (one formula,
    ``core.settings.too_few_sweep_requests``)."""
    if values.get("sweep_requests") is not None:
        arms = max(len(values["budgets"]), 1)
        why = too_few_sweep_requests(
            values["sweep_requests"], arms, None, sources["sweep_requests"]
        )
        if why:
            raise SettingsError(why)


CROSS_FIELD_RULES: tuple[Rule, ...] = (
    openai_key_only_with_openai_url,
    budget_mode_follows_endpoints,
    budgets_follow_budget_mode,
    custom_dialect_needs_stats_map,
    stats_map_means_custom_dialect,
    embedded_server_only(
        "reference_faults", "faults can only be injected into the embedded server"
    ),
    embedded_server_only("reference_slowdown_after", "only the embedded server can be slowed down"),
    sweep_requests_can_judge,
    embedded_server_only(
        "reference_jitter", "only the embedded server has simulated costs to jitter"
    ),
)


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


def unread_budget_field(settings: Settings, dialect: str | None, how: str) -> str | None:
    """One line when the budgets would go in a field the endpoint's dialect never reads,
    else None.

    Only the defaults are judged: a budget mode or field the user chose is sent as chosen.
    A dialect whose servers read their budget from another field (llama.cpp: at most
    ``/speculative.n_max``, in the builds that read one) would time the server's own
    budget once per budget, so a sweep of two budgets or more stops here instead of at its
    end. ``how`` says where ``dialect`` came from (``detected from its first answer``).
    """
    found = lookup(dialect)
    if found is None or found.budget_field is None or found.budget_field == settings.budget_field:
        return None
    chosen = (settings.source_of(attr) != "default" for attr in ("budget_mode", "budget_field"))
    if any(chosen) or settings.budget_mode != "field" or len(settings.budgets) < 2:
        return None
    budgets = ",".join(map(str, settings.budgets))
    return (
        f"the endpoint speaks dialect {found.name!r} ({how}), whose servers read no "
        f"{settings.budget_field!r} field: the {len(settings.budgets)} tree budgets "
        f"({budgets}) would each time the server's own; give --ddtree-budget-mode none "
        "(one point: the server's own budget), one server per budget with "
        f"--ddtree-budget-endpoint B=URL, or --ddtree-budget-field {found.budget_field} for "
        "a build that reads it"
    )


def _marker_list(value: Any) -> str:
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise TypeError("expected a list of positive integers")
    return ",".join(str(v) for v in value)


def _marker_int(value: Any) -> Any:
    if isinstance(value, str):  # the parser takes text from a flag: a marker gives a number
        raise TypeError("expected an integer, not a string")
    return value


def _marker_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError("expected True or False")
    return value


def _marker_codes(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


#: Keywords allowed in ``@pytest.mark.ddtree(...)``: each overrides the setting of that name,
#: its Python value turned into what the option's own parser takes.
_MARKER_FORMS: dict[str, Callable[[Any], Any]] = {
    "budgets": _marker_list,
    "max_tokens": _marker_int,
    "min_tokens": _marker_int,
    "api": str,
    "enable_thinking": _marker_bool,
    "skip_checks": _marker_codes,
    "rounds": _marker_int,
    "warmup_rounds": _marker_int,
    "lossless": str,
}
MARKER_KEYS: tuple[str, ...] = tuple(_MARKER_FORMS)


def apply_marker(settings: Settings, kwargs: Mapping[str, Any], where: str) -> Settings:
    """Settings with ``@pytest.mark.ddtree(**kwargs)`` applied; bad keys or values raise.

    Each value goes through its option's parser, so a marker takes what the option
    takes; its errors name the keyword.
    """
    changes: dict[str, Any] = {}
    src = f"@pytest.mark.ddtree on {where}"
    for key, value in kwargs.items():
        form = _MARKER_FORMS.get(key)
        if form is None:
            raise SettingsError(
                f"invalid marker argument {key!r} ({src}): allowed are {', '.join(MARKER_KEYS)}"
            )
        try:
            raw = form(value)
        except TypeError as exc:
            raise fail(key, value, src, str(exc)) from None
        changes[key] = OPTIONS_BY_ATTR[key].parse(raw, src, key)
    if "skip_checks" in changes:  # added to the configured ones
        changes["skip_checks"] = tuple(
            dict.fromkeys((*settings.skip_checks, *changes["skip_checks"]))
        )
    return settings.with_overrides(**changes)
