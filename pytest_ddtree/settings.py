"""Option definitions and their resolution into one validated ``Settings``.

Every option is defined once in ``OPTIONS``; the plugin registers the command
line flags and ini keys from that table and the docs generate the option
reference from it, so the three cannot drift. Resolution order is
command line > ini (``[tool.pytest.ini_options]``) > environment > default,
and a bad value raises ``SettingsError`` with one line naming the value and
where it came from.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import urlsplit

DEFAULT_BUDGETS: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024)
#: Sampling temperatures the OpenAI API accepts; the sweep and load points run at each given.
MAX_TEMPERATURE = 2.0
# Sane bounds: past them a value is a typo, not a setting. No speculative tree verifies a
# million nodes a round, and no served model writes a million tokens in one answer.
MAX_BUDGET = 1_048_576
MAX_MAX_TOKENS = 1_048_576
MAX_RETRY_429 = 10
DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024
_SIZE_UNITS = {
    "": 1,
    "k": 1024,
    "kb": 1024,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1024**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1024**3,
    "gib": 1024**3,
}
DIALECTS = ("auto", "ddtree", "vllm", "sglang", "omlx", "llamacpp", "custom", "none")
SPEC_FIELDS = (
    "tree_budget",
    "decode_rounds",
    "mean_acceptance_length",
    "server_tokens_per_second",
    "block_size",
    "num_draft_tokens",
    "num_accepted_draft_tokens",
)


class SettingsError(ValueError):
    """A bad option value; the message is one line naming value and source."""


@dataclass(frozen=True)
class Timeout:
    """Per-request time limits in seconds.

    ``total`` is a deadline for the whole request, which httpx does not have
    on its own: the client bounds every socket read by the time left (see
    ``_net``), so it holds however the bytes arrive; a server that sends
    nothing at all is also bounded by ``read``.
    """

    connect: float = 10.0
    read: float = 60.0
    total: float = 300.0


#: the near-tie margin (nats) of ``--ddtree-lossless near-tie`` without one
DEFAULT_NEAR_TIE = 0.5
#: the largest margin the option takes: beyond it a "near-tie" would excuse real bugs
MAX_NEAR_TIE = 3.0


@dataclass(frozen=True)
class Lossless:
    """How strictly outputs must match the baseline at temperature 0.

    ``near_tie`` is the margin (nats) below which a divergence counts as a numerical
    near-tie: in ``near-tie`` mode such a divergence is a warning, not a failure; in
    every mode it names the divergence in the evidence.
    """

    mode: Literal["exact", "near-tie", "prefix", "off"] = "near-tie"
    prefix_tokens: int = 0
    near_tie: float = DEFAULT_NEAR_TIE

    def __str__(self) -> str:
        if self.mode == "prefix":
            return f"prefix:{self.prefix_tokens}"
        if self.mode == "near-tie":
            return f"near-tie:{self.near_tie:g}"
        return self.mode


@dataclass(frozen=True)
class Settings:
    """Every pytest-ddtree setting, resolved once and validated.

    This is what the user configured: ``endpoint`` is None when the embedded
    reference server is used (its URL is found on the ``Runtime``).
    ``api_key`` is never shown by ``repr`` or in any report. Each attribute
    is named after its option (``--ddtree-role-marker`` is ``role_markers``:
    a repeatable option's attribute is plural), see :attr:`OptionDef.attr`.
    """

    endpoint: str | None = None
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    budgets: tuple[int, ...] = DEFAULT_BUDGETS
    temperatures: tuple[float, ...] = (0.0,)
    budget_mode: Literal["field", "endpoints", "none"] = "field"
    budget_field: str = "tree_budget"
    budget_endpoints: Mapping[int, str] = field(default_factory=dict)
    dialect: str = "auto"
    stats_map: Mapping[str, str] = field(default_factory=dict)
    tokenizer: str = "auto"
    timeout: Timeout = field(default_factory=Timeout)
    max_tokens: int = 128
    min_tokens: int | None = None
    api: Literal["chat", "completions"] = "chat"
    enable_thinking: bool = False
    skip_checks: tuple[str, ...] = ()
    role_markers: tuple[str, ...] = ()
    allow_markers: tuple[str, ...] = ()
    baseline_endpoint: str | None = None
    lossless: Lossless = field(default_factory=Lossless)
    distribution_samples: int = 40
    distribution_alpha: float = 0.05
    report: str | None = None
    rounds: int = 3
    warmup_rounds: int = 1
    sweep_seed: int = 0
    sweep_order: Literal["shuffled", "fixed"] = "shuffled"
    sweep: Literal["exhaustive", "adaptive"] = "adaptive"
    equivalence: float = 0.02
    #: None: auto (an exhaustive sweep's requests at SWEEP_AUTO_ROUNDS rounds)
    sweep_requests: int | None = None
    reference_faults: tuple[str, ...] = ()
    reference_latency: bool = True
    reference_slowdown: float = 1.0
    reference_slowdown_after: tuple[int, float] | None = None
    reference_jitter: float = 0.0
    probe: str | None = None
    slo: Any = None  # pytest_ddtree.load.slo.SLO
    load_concurrency: tuple[int, ...] = (1, 4, 16)
    load_rate: tuple[float, ...] = ()
    load_burstiness: float = 1.0
    load_requests: int | None = None
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    retry_429: int = 0
    prompts: Any = None  # pytest_ddtree.prompts.PromptSet
    #: None: the endpoint root's /metrics, probed once; "off": never scraped
    metrics_url: str | None = None
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __repr__(self) -> str:
        """Short, so a failure's report does not bury its cause under every setting (and
        never shows a secret): the endpoint, model, budgets and what was not the default."""
        changed = sorted(k for k, v in self.sources.items() if v != "default")
        where = "embedded reference server"
        if self.endpoint:
            from urllib.parse import urlsplit

            try:  # scheme, host, port and path: never user info or a query's key
                u = urlsplit(self.endpoint)
                where = f"{u.scheme}://{u.hostname or ''}{f':{u.port}' if u.port else ''}{u.path}"
            except ValueError:
                where = "<unparseable endpoint>"
        return (
            f"Settings(endpoint={where!r}, model={self.model!r}, budgets={self.budgets!r}, "
            f"set={changed!r})"
        )

    def source_of(self, name: str) -> str:
        """Where the value of option ``name`` came from (for messages)."""
        return self.sources.get(name, "default")

    def with_overrides(self, **changes: Any) -> Settings:
        """A copy with some values replaced (used for marker overrides)."""
        return replace(self, **changes)


# --------------------------------------------------------------------------
# parsers: each takes the raw string (or list) and the source description


def _fail(name: str, raw: object, source: str, why: str) -> SettingsError:
    if isinstance(raw, str) and len(raw) > 80:  # the value named, not a screenful of it
        raw = f"{raw[:40]}…{raw[-20:]} ({len(raw)} characters)"
    return SettingsError(f"invalid {name} {raw!r} (from {source}): {why}")


def parse_url(raw: str, source: str, name: str = "endpoint") -> str:
    """An http(s) URL, trailing slash removed."""
    value = raw.strip().rstrip("/")
    try:
        parts = urlsplit(value)
        port = parts.port  # range-checked by urllib
        host = parts.hostname
    except ValueError as exc:
        shown = "<redacted URL>" if "@" in value else raw
        raise _fail(name, shown, source, f"not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.netloc or not host:
        raise _fail(
            name, raw, source, "expected an http:// or https:// URL, e.g. http://host:8000/v1"
        )
    if parts.username or parts.password:
        raise _fail(
            name, "<redacted URL>", source, "put credentials in --ddtree-api-key, not the URL"
        )
    if port == 0:
        raise _fail(name, raw, source, "port 0 is not a port a server listens on (1-65535)")
    if parts.query or parts.fragment:
        shown = f"{parts.scheme}://{parts.netloc}{parts.path}?<redacted>"
        raise _fail(
            name,
            shown,
            source,
            "query strings are not supported (they often carry keys); "
            "give the base URL and put credentials in --ddtree-api-key",
        )
    return value


def parse_budgets(raw: str, source: str) -> tuple[int, ...]:
    """Comma-separated positive integers, kept in the given order, no repeats."""
    items = [p.strip() for p in raw.split(",")]
    if not any(items):
        raise _fail("budgets", raw, source, "expected a comma-separated list like 16,64,256")
    if "" in items:  # 16,,64 or 16,64, is a typo, not a shorter list
        where = items.index("") + 1
        raise _fail("budgets", raw, source, f"item {where} is empty (expected e.g. 16,64,256)")
    out: list[int] = []
    for item in items:
        if not re.fullmatch(r"\d+", item) or int(item) < 1:
            raise _fail("budgets", raw, source, f"{item!r} is not a positive integer")
        if int(item) > MAX_BUDGET:
            raise _fail(
                "budgets",
                raw,
                source,
                f"{item} is beyond any sane tree budget (at most {MAX_BUDGET})",
            )
        if int(item) in out:
            raise _fail("budgets", raw, source, f"{item} is listed twice")
        out.append(int(item))
    return tuple(out)


def parse_temperatures(raw: str, source: str) -> tuple[float, ...]:
    """Comma-separated temperatures in [0, 2], kept in the given order, no repeats."""
    items = [p.strip() for p in str(raw).split(",")]
    if not any(items):
        raise _fail("temperatures", raw, source, "expected a comma-separated list like 0,0.7,1")
    if "" in items:
        where = items.index("") + 1
        raise _fail("temperatures", raw, source, f"item {where} is empty (expected e.g. 0,0.7,1)")
    out: list[float] = []
    for item in items:
        try:
            value = float(item)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or not re.fullmatch(r"[0-9.eE+-]+", item):
            raise _fail("temperatures", raw, source, f"{item!r} is not a number")
        if not 0.0 <= value <= MAX_TEMPERATURE:
            raise _fail("temperatures", raw, source, f"{item} is outside [0, {MAX_TEMPERATURE:g}]")
        value += 0.0  # -0.0 is 0
        same = [t for t in out if temperature_label(t) == temperature_label(value)]
        if same:  # ids, groups and tables name a temperature by its label: one each
            twice = "listed twice" if same[0] == value else f"named {temperature_label(value)} too"
            raise _fail("temperatures", raw, source, f"{item} is {twice}")
        out.append(value)
    return tuple(out)


def parse_positive_int(
    raw: str, source: str, name: str, minimum: int = 1, maximum: int | None = None
) -> int:
    """An integer >= ``minimum`` (and <= ``maximum`` when given)."""
    text = str(raw).strip()
    if not re.fullmatch(r"-?\d{1,30}", text) or int(text) < minimum:
        raise _fail(name, raw, source, f"expected an integer >= {minimum}")
    if maximum is not None and int(text) > maximum:
        raise _fail(name, raw, source, f"expected an integer between {minimum} and {maximum}")
    return int(text)


def parse_size(raw: str, source: str, name: str) -> int:
    """A byte count: ``8388608``, ``512KiB``, ``8MiB``, ``1G`` (at least 1 KiB, at most 16 GiB)."""
    text = str(raw).strip().lower().replace(" ", "")
    m = re.fullmatch(r"(\d{1,15})([a-z]*)", text)
    if not m or m.group(2) not in _SIZE_UNITS:
        raise _fail(name, raw, source, "expected a byte count such as 8388608, 512KiB or 8MiB")
    size = int(m.group(1)) * _SIZE_UNITS[m.group(2)]
    if not 1024 <= size <= 16 * 1024**3:
        raise _fail(name, raw, source, "expected between 1KiB and 16GiB")
    return size


def parse_choice(raw: str, source: str, name: str, choices: Sequence[str]) -> str:
    """One of ``choices`` (case-insensitive)."""
    value = raw.strip().lower()
    if value not in choices:
        raise _fail(name, raw, source, f"expected one of {', '.join(choices)}")
    return value


def parse_bool(raw: str, source: str, name: str, expected: str = "true or false") -> bool:
    """true/false, yes/no, on/off, 1/0."""
    value = str(raw).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise _fail(name, raw, source, f"expected {expected}")


def parse_timeout(raw: str, source: str) -> Timeout:
    """``120`` (total) or ``connect=5,read=30,total=120`` (any subset)."""
    text = raw.strip()
    base = Timeout()
    try:
        if "=" not in text:
            total = float(text)
            if not math.isfinite(total) or total <= 0:
                raise ValueError
            return Timeout(
                connect=min(base.connect, total), read=min(base.read, total), total=total
            )
        values: dict[str, float] = {}
        for part in text.split(","):
            key, _, num = part.partition("=")
            key = key.strip()
            if key not in ("connect", "read", "total") or key in values:
                raise _fail("timeout", raw, source, f"unknown or repeated key {key!r}")
            number = float(num)
            if not math.isfinite(number) or number <= 0:
                raise ValueError
            values[key] = number
    except SettingsError:
        raise
    except ValueError:
        raise _fail(
            "timeout", raw, source, "expected seconds > 0, e.g. 120 or connect=5,read=30,total=120"
        ) from None
    return replace(base, **values)


def parse_budget_endpoints(raw: Sequence[str], source: str) -> dict[int, str]:
    """Repeated ``BUDGET=URL`` pairs."""
    out: dict[int, str] = {}
    for item in raw:
        budget, sep, url = item.partition("=")
        if not sep or not re.fullmatch(r"\s*\d+\s*", budget) or int(budget) < 1:
            raise _fail(
                "budget-endpoint", item, source, "expected BUDGET=URL, e.g. 64=http://h:30064/v1"
            )
        b = int(budget)
        if b > MAX_BUDGET:
            raise _fail("budget-endpoint", item, source, f"budget {b} is beyond {MAX_BUDGET}")
        if b in out:
            raise _fail("budget-endpoint", item, source, f"budget {b} given twice")
        out[b] = parse_url(url, source, name="budget-endpoint")
    return out


def parse_stats_map(raw: str, source: str) -> dict[str, str]:
    """``field=/json/pointer,...`` for the custom dialect."""
    out: dict[str, str] = {}
    for part in [p.strip() for p in raw.split(",") if p.strip()]:
        key, sep, pointer = part.partition("=")
        key = key.strip()
        pointer = pointer.strip()
        if not sep or key not in SPEC_FIELDS:
            raise _fail("stats-map", raw, source, f"keys must be among {', '.join(SPEC_FIELDS)}")
        if not pointer.startswith("/"):
            raise _fail(
                "stats-map", raw, source, f"{pointer!r} is not a JSON pointer (starts with /)"
            )
        out[key] = pointer
    if not out:
        raise _fail("stats-map", raw, source, "expected e.g. decode_rounds=/meta/rounds")
    return out


def parse_lossless(raw: str, source: str) -> Lossless:
    """``exact``, ``near-tie[:MARGIN]``, ``off`` or ``prefix:N``."""
    text = raw.strip().lower()
    if text in ("exact", "off"):
        return Lossless(mode="exact" if text == "exact" else "off")
    if text == "near-tie":
        return Lossless(mode="near-tie")
    m = re.fullmatch(r"near-tie:(\d+(?:\.\d*)?|\.\d+)", text)
    if m and 0 < float(m.group(1)) <= MAX_NEAR_TIE:
        return Lossless(mode="near-tie", near_tie=float(m.group(1)))
    m = re.fullmatch(r"prefix:(\d+)", text)
    if m and int(m.group(1)) >= 1:
        return Lossless(mode="prefix", prefix_tokens=int(m.group(1)))
    raise _fail(
        "lossless",
        raw,
        source,
        f"expected exact, near-tie, near-tie:MARGIN (nats, greater than 0, at most "
        f"{MAX_NEAR_TIE:g}), off or prefix:N (N >= 1)",
    )


def parse_report(raw: str, source: str) -> str:
    """A directory path (created when the report is written)."""
    if not raw.strip():
        raise _fail("report", raw, source, "expected a directory path")
    return raw.strip()


def parse_tokenizer(raw: str, source: str) -> str:
    """``auto``, ``server``, ``none`` or a path to a tokenizer.json (checked later)."""
    text = raw.strip()
    if not text:
        raise _fail(
            "tokenizer", raw, source, "expected auto, server, none or a tokenizer.json path"
        )
    return text if text.lower() not in ("auto", "server", "none") else text.lower()


def parse_codes(raw: Sequence[str], source: str) -> tuple[str, ...]:
    """Invariant codes to skip; validated against the known codes later."""
    out: list[str] = []
    for item in raw:
        for code in item.split(","):
            code = code.strip()
            if code and code not in out:
                if not re.fullmatch(r"[a-z][a-z0-9-]*", code):
                    raise _fail("skip-check", item, source, "codes look like early-stop, role-leak")
                out.append(code)
    return tuple(out)


def _load_parser(name: str) -> Callable[[Any, str], Any]:
    """A parser of ``pytest_ddtree.load`` whose ValueError becomes a ``SettingsError``."""

    def parse(raw: Any, source: str) -> Any:
        from pytest_ddtree.load import arrivals, slo

        fn = {
            "slo": slo.parse_slo,
            "concurrency": arrivals.parse_concurrencies,
            "rate": arrivals.parse_rates,
        }[name]
        try:
            return fn(str(raw), source)
        except ValueError as exc:
            raise SettingsError(str(exc)) from None

    return parse


def parse_prompts(raw: Any, source: str) -> Any:
    """A prompt set file (JSON or JSON Lines), read and validated now: a ``PromptSet``.

    An ini value arrives as a list of paths relative to the ini file (``type="paths"``).
    """
    from pytest_ddtree.prompts import PromptFileError, load_prompts

    if isinstance(raw, (list, tuple)):
        if len(raw) != 1:
            raise _fail("prompts", " ".join(map(str, raw)), source, "expected one file path")
        raw = raw[0]
    path = str(raw).strip()
    if not path:
        raise _fail("prompts", raw, source, "expected a JSON or JSON Lines file path")
    try:
        return load_prompts(path)
    except PromptFileError as exc:
        raise SettingsError(f"invalid prompts (from {source}): {exc}") from None


def _number(raw: object, *, percent: bool = False) -> float:
    """``raw`` as a float (``5%`` as 0.05 when ``percent``); NaN when it is not a number."""
    text = str(raw).strip()
    try:
        if percent and text.endswith("%"):
            return float(text[:-1]) / 100
        return float(text)
    except ValueError:
        return math.nan


def parse_slowdown(raw: str, source: str) -> float:
    """A factor between 0.1 and 10 on the embedded server's simulated time."""
    value = _number(raw)
    if not math.isfinite(value) or not 0.1 <= value <= 10:
        raise _fail(
            "reference-slowdown",
            raw,
            source,
            "expected a factor between 0.1 and 10 (1 is as built)",
        )
    return value


def parse_jitter(raw: str, source: str) -> float:
    """A coefficient of variation between 0 and 1 (``0.05`` or ``5%``)."""
    value = _number(raw, percent=True)
    if not math.isfinite(value) or not 0 <= value <= 1:
        raise _fail(
            "reference-jitter",
            raw,
            source,
            "expected a coefficient of variation between 0 and 1, e.g. 0.05 or 5%",
        )
    return value


def parse_equivalence(raw: str, source: str) -> float:
    """The race's practical margin: ``2%`` or ``0.02``, within (0, 50%)."""
    value = _number(raw, percent=True)
    if not math.isfinite(value) or not 0 < value < 0.5:
        raise _fail("equivalence", raw, source, "expected a margin above 0% and below 50%, e.g. 2%")
    return value


def parse_sweep_requests(raw: str, source: str) -> int | None:
    """``auto`` or an integer >= 1 (checked against the budgets in ``_cross_validate``)."""
    if str(raw).strip().lower() == "auto":
        return None
    return parse_positive_int(raw, source, "sweep-requests")


#: Random splits of the pooled answers in the distribution test (``pytest_ddtree.distribution``).
DISTRIBUTION_PERMUTATIONS = 999


def least_alpha(permutations: int = DISTRIBUTION_PERMUTATIONS) -> float:
    """The smallest level a permutation test can reject at: its smallest p-value, 1 / (B + 1).

    A level below it could never be reached, so the test could never fail.
    """
    return 1.0 / (permutations + 1)


def parse_alpha(raw: str, source: str) -> float:
    """A significance level (``0.05`` or ``5%``) the permutation test can reach, up to 0.5."""
    value = _number(raw, percent=True)
    low = least_alpha()
    if not math.isfinite(value) or not low <= value <= 0.5:
        raise _fail(
            "distribution-alpha",
            raw,
            source,
            f"expected a level from {low:g} (the smallest p-value the test's permutations can "
            "show) to 0.5, e.g. 0.05 or 5%",
        )
    return value


def parse_metrics_url(raw: str, source: str) -> str:
    """``off`` or an http(s) URL of a Prometheus ``/metrics`` page."""
    if str(raw).strip().lower() == "off":
        return "off"
    return parse_url(str(raw), source, "metrics-url")


def parse_burstiness(raw: str, source: str) -> float:
    """A number > 0 (1 = Poisson arrivals)."""
    value = _number(raw)
    if not math.isfinite(value) or value <= 0:
        raise _fail("load-burstiness", raw, source, "expected a number > 0 (1 is Poisson)")
    return value


def parse_load_requests(raw: str, source: str) -> int | None:
    """``auto`` or an integer >= 1."""
    if str(raw).strip().lower() == "auto":
        return None
    return parse_positive_int(raw, source, "load-requests")


def parse_slowdown_after(raw: str, source: str) -> tuple[int, float]:
    """``N`` or ``N:F``: after N requests, costs times F (F > 0, default 3)."""
    text = str(raw).strip()
    m = re.fullmatch(r"(\d{1,9})(?::([0-9]*\.?[0-9]+))?", text)
    factor = float(m.group(2)) if m and m.group(2) else 3.0
    if not m or not math.isfinite(factor) or factor <= 0:
        raise _fail("reference-slowdown-after", raw, source, "expected N or N:F, e.g. 40 or 40:2.5")
    return int(m.group(1)), factor


def parse_probe(raw: str, source: str) -> str:
    """A command line, split like a shell would (checked here so a bad quote fails early)."""
    import shlex

    try:
        words = shlex.split(str(raw))
    except ValueError as exc:
        raise _fail("probe", raw, source, f"cannot split it into words ({exc})") from None
    if not words:
        raise _fail("probe", raw, source, "expected a command, e.g. nvidia-smi")
    return str(raw).strip()


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
        parse=_load_parser("slo"),
    ),
    OptionDef(
        "load-concurrency",
        "Concurrencies ddtree_load runs at (requests in flight, closed loop).",
        metavar="C,C,...",
        default="1,4,16",
        env=("DDTREE_LOAD_CONCURRENCY",),
        parse=_load_parser("concurrency"),
    ),
    OptionDef(
        "load-rate",
        "Arrival rates (requests/s, open loop) ddtree_load runs at, besides the concurrencies.",
        metavar="R,R,...",
        env=("DDTREE_LOAD_RATE",),
        parse=_load_parser("rate"),
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
            raise _fail(name, item, source, "expected a non-empty marker text")
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
                raise _fail(
                    "budget-field",
                    raw,
                    source,
                    "expected a JSON Pointer of non-empty keys (/speculative.n_max, "
                    "/extra/ddtree/budget; ~1 for '/', ~0 for '~')",
                )
        return text
    if not re.fullmatch(rf"{_FIELD_NAME}(\.{_FIELD_NAME})*", text):
        raise _fail(
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
    if values.get("dialect") == "custom" and not values.get("stats_map"):
        raise SettingsError(
            f"invalid dialect 'custom' (from {sources['dialect']}): "
            "also give --ddtree-stats-map FIELD=/pointer,..."
        )
    if values.get("stats_map") and values.get("dialect") not in ("custom", None):
        if sources.get("dialect") == "default":
            values["dialect"] = "custom"
        else:
            raise SettingsError(
                f"invalid stats-map (from {sources['stats_map']}): only used with "
                f"--ddtree-dialect=custom, but dialect is {values['dialect']!r} "
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
        from pytest_ddtree.sweep.race import DEFAULT_MIN_N  # late: sweep imports settings

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
SERVER_DEFAULT = "server-default"


def budget_label(tree_budget: int | None) -> str:
    """How a budget is named in tables and messages: ``64`` or ``server-default``."""
    return SERVER_DEFAULT if tree_budget is None else str(tree_budget)


def budget_id(budget: int | None) -> str:
    """The test id (and benchmark group) of one budget: ``tree_budget=64``."""
    return f"tree_budget={budget_label(budget)}"


def temperature_label(temperature: float) -> str:
    """How a temperature is named in ids, groups and tables: ``0.7``, ``1``."""
    return f"{temperature:g}"


def temperature_id(temperature: float) -> str:
    """The test id part of one temperature: ``temperature=0.7``."""
    return f"temperature={temperature_label(temperature)}"


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
                raise _fail("budgets", value, src, "expected a list of positive integers")
            changes["budgets"] = parse_budgets(",".join(str(v) for v in value), src)
        elif key in ("max_tokens", "rounds"):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise _fail(key, value, src, "expected an integer >= 1")
            if key == "max_tokens" and value > MAX_MAX_TOKENS:
                raise _fail(key, value, src, f"expected an integer between 1 and {MAX_MAX_TOKENS}")
            changes[key] = value
        elif key in ("min_tokens", "warmup_rounds"):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise _fail(key, value, src, "expected an integer >= 0")
            changes[key] = value
        elif key == "api":
            changes["api"] = parse_choice(str(value), src, "api", ("chat", "completions"))
        elif key == "enable_thinking":
            if not isinstance(value, bool):
                raise _fail(key, value, src, "expected True or False")
            changes[key] = value
        elif key == "skip_checks":
            if isinstance(value, str):
                value = [value]
            changes[key] = tuple(dict.fromkeys((*settings.skip_checks, *parse_codes(value, src))))
        elif key == "lossless":
            changes[key] = parse_lossless(str(value), src)
    return settings.with_overrides(**changes)
