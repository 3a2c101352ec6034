"""The settings' values: ``Settings`` (with ``Timeout`` and ``Lossless``), their parsers and
labels.

Each parser turns one raw value (a flag, an ini key, an environment variable or a
marker argument) into a value, or raises ``SettingsError`` with one line naming the
value and where it came from. The table that defines every option once, and the
resolution into one validated ``Settings``, are ``pytest_ddtree.core.options``.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Literal
from urllib.parse import urlsplit

from pytest_ddtree.core.budget import SERVER_DEFAULT as SERVER_DEFAULT
from pytest_ddtree.core.budget import Budget
from pytest_ddtree.core.dialects import CHOICES

#: Sampling temperatures the OpenAI API accepts; the sweep and load points run at each given.
MAX_TEMPERATURE = 2.0
# Sane bounds: past them a value is a typo, not a setting. No speculative tree verifies a
# million nodes a round, and no served model writes a million tokens in one answer.
MAX_BUDGET = 1_048_576
#: the deepest prompt --ddtree-context takes, in tokens
MAX_CONTEXT = 16_777_216
MAX_MAX_TOKENS = 1_048_576
MAX_RETRY_429 = 10
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
#: the ``--ddtree-dialect`` choices, read from the dialect registry
DIALECTS = CHOICES
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


#: A setting's parser: (the raw value, where it came from, the option's name) -> its value,
#: or ``SettingsError`` naming the three in one line.
Parser = Callable[[Any, str, str], Any]


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

    def spec(self) -> str:
        """As ``--ddtree-timeout`` takes it: ``connect=10,read=60,total=300``."""
        return f"connect={self.connect:g},read={self.read:g},total={self.total:g}"


#: Requests an arm of a race gets before any claim about it (and the least n behind a "faster").
DEFAULT_MIN_N = 6

#: the near-tie margin (nats) of ``--ddtree-lossless near-tie`` without one
DEFAULT_NEAR_TIE = 0.5
#: the largest margin the option takes: beyond it a "near-tie" would excuse real bugs
MAX_NEAR_TIE = 3.0

#: decimals a difference of log-probabilities keeps before it is compared with a margin:
#: values written a margin apart land a hair off it in binary floating point (-0.7 - -1.2
#: is 0.5000000000000001), and a hair is no evidence
NATS_DECIMALS = 6


def nats(gap: float) -> float:
    """A difference of log-probabilities (nats) as it is compared with a margin: rounded to
    ``NATS_DECIMALS``, so a gap written at the margin is at it, not beyond."""
    return round(gap, NATS_DECIMALS) if math.isfinite(gap) else gap


def nats_text(gap: float, margin: float, digits: int = 3) -> str:
    """``gap`` with ``digits`` significant digits, or as many more as it takes to read on the
    same side of ``margin`` as it is ("0.500001 nats, margin 0.5", never "0.5 nats")."""
    side = (gap > margin) - (gap < margin)
    text = f"{gap:.{digits}g}"
    while digits < 17 and (float(text) > margin) - (float(text) < margin) != side:
        digits += 1
        text = f"{gap:.{digits}g}"
    return text


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


# --------------------------------------------------------------------------
# parsers: each takes the raw string (or list) and the source description


def fail(name: str, raw: object, source: str, why: str) -> SettingsError:
    if isinstance(raw, str) and len(raw) > 80:  # the value named, not a screenful of it
        raw = f"{raw[:40]}…{raw[-20:]} ({len(raw)} characters)"
    return SettingsError(f"invalid {name} {raw!r} (from {source}): {why}")


def parse_url(raw: str, source: str, name: str) -> str:
    """An http(s) URL, trailing slash removed."""
    value = raw.strip().rstrip("/")
    try:
        parts = urlsplit(value)
        port = parts.port  # range-checked by urllib
        host = parts.hostname
    except ValueError as exc:
        shown = "<redacted URL>" if "@" in value else raw
        raise fail(name, shown, source, f"not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.netloc or not host:
        raise fail(
            name, raw, source, "expected an http:// or https:// URL, e.g. http://host:8000/v1"
        )
    if parts.username or parts.password:
        raise fail(
            name, "<redacted URL>", source, "put credentials in --ddtree-api-key, not the URL"
        )
    if port == 0:
        raise fail(name, raw, source, "port 0 is not a port a server listens on (1-65535)")
    if parts.query or parts.fragment:
        shown = f"{parts.scheme}://{parts.netloc}{parts.path}?<redacted>"
        raise fail(
            name,
            shown,
            source,
            "query strings are not supported (they often carry keys); "
            "give the base URL and put credentials in --ddtree-api-key",
        )
    return value


def parse_budgets(raw: str, source: str, name: str) -> tuple[int, ...]:
    """Comma-separated positive integers, kept in the given order, no repeats."""
    return _positive_ints(
        raw,
        source,
        name,
        "16,64,256",
        MAX_BUDGET,
        f"beyond any sane tree budget (at most {MAX_BUDGET})",
    )


def _positive_ints(
    raw: str, source: str, name: str, example: str, maximum: int, beyond: str
) -> tuple[int, ...]:
    """Comma-separated integers from 1 to ``maximum`` (past it: ``beyond``), kept in the
    given order, no repeats; ``example`` shows a good value."""
    items = [p.strip() for p in raw.split(",")]
    if not any(items):
        raise fail(name, raw, source, f"expected a comma-separated list like {example}")
    if "" in items:  # 16,,64 or 16,64, is a typo, not a shorter list
        where = items.index("") + 1
        raise fail(name, raw, source, f"item {where} is empty (expected e.g. {example})")
    out: list[int] = []
    for item in items:
        if not re.fullmatch(r"\d+", item) or int(item) < 1:
            raise fail(name, raw, source, f"{item!r} is not a positive integer")
        if int(item) > maximum:
            raise fail(name, raw, source, f"{item} is {beyond}")
        if int(item) in out:
            raise fail(name, raw, source, f"{item} is listed twice")
        out.append(int(item))
    return tuple(out)


def parse_context(raw: str, source: str, name: str) -> tuple[int, ...] | Literal["auto"]:
    """``auto`` (doubling depths up to the server's context length), or comma-separated
    prompt depths in tokens (``512,2048,8192``), kept in the given order, no repeats."""
    if str(raw).strip().lower() == "auto":
        return "auto"
    return _positive_ints(
        str(raw),
        source,
        name,
        "512,2048,8192 or auto",
        MAX_CONTEXT,
        f"deeper than any model's context (at most {MAX_CONTEXT} tokens)",
    )


def parse_temperatures(raw: str, source: str, name: str) -> tuple[float, ...]:
    """Comma-separated temperatures in [0, 2], kept in the given order, no repeats."""
    items = [p.strip() for p in str(raw).split(",")]
    if not any(items):
        raise fail(name, raw, source, "expected a comma-separated list like 0,0.7,1")
    if "" in items:
        where = items.index("") + 1
        raise fail(name, raw, source, f"item {where} is empty (expected e.g. 0,0.7,1)")
    out: list[float] = []
    for item in items:
        try:
            value = float(item)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or not re.fullmatch(r"[0-9.eE+-]+", item):
            raise fail(name, raw, source, f"{item!r} is not a number")
        if not 0.0 <= value <= MAX_TEMPERATURE:
            raise fail(name, raw, source, f"{item} is outside [0, {MAX_TEMPERATURE:g}]")
        value += 0.0  # -0.0 is 0
        same = [t for t in out if temperature_label(t) == temperature_label(value)]
        if same:  # ids, groups and tables name a temperature by its label: one each
            twice = "listed twice" if same[0] == value else f"named {temperature_label(value)} too"
            raise fail(name, raw, source, f"{item} is {twice}")
        out.append(value)
    return tuple(out)


def parse_positive_int(
    raw: str, source: str, name: str, minimum: int = 1, maximum: int | None = None
) -> int:
    """An integer >= ``minimum`` (and <= ``maximum`` when given)."""
    text = str(raw).strip()
    if not re.fullmatch(r"-?\d{1,30}", text) or int(text) < minimum:
        raise fail(name, raw, source, f"expected an integer >= {minimum}")
    if maximum is not None and int(text) > maximum:
        raise fail(name, raw, source, f"expected an integer between {minimum} and {maximum}")
    return int(text)


def parse_size(raw: str, source: str, name: str) -> int:
    """A byte count: ``8388608``, ``512KiB``, ``8MiB``, ``1G`` (at least 1 KiB, at most 16 GiB)."""
    text = str(raw).strip().lower().replace(" ", "")
    m = re.fullmatch(r"(\d{1,15})([a-z]*)", text)
    if not m or m.group(2) not in _SIZE_UNITS:
        raise fail(name, raw, source, "expected a byte count such as 8388608, 512KiB or 8MiB")
    size = int(m.group(1)) * _SIZE_UNITS[m.group(2)]
    if not 1024 <= size <= 16 * 1024**3:
        raise fail(name, raw, source, "expected between 1KiB and 16GiB")
    return size


def parse_choice(raw: str, source: str, name: str, choices: Sequence[str]) -> str:
    """One of ``choices`` (case-insensitive)."""
    value = raw.strip().lower()
    if value not in choices:
        raise fail(name, raw, source, f"expected one of {', '.join(choices)}")
    return value


def parse_bool(raw: str, source: str, name: str, expected: str = "true or false") -> bool:
    """true/false, yes/no, on/off, 1/0."""
    value = str(raw).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise fail(name, raw, source, f"expected {expected}")


def parse_timeout(raw: str, source: str, name: str) -> Timeout:
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
                raise fail(name, raw, source, f"unknown or repeated key {key!r}")
            number = float(num)
            if not math.isfinite(number) or number <= 0:
                raise ValueError
            values[key] = number
    except SettingsError:
        raise
    except ValueError:
        raise fail(
            name, raw, source, "expected seconds > 0, e.g. 120 or connect=5,read=30,total=120"
        ) from None
    return replace(base, **values)


def parse_budget_endpoints(raw: Sequence[str], source: str, name: str) -> dict[int, str]:
    """Repeated ``BUDGET=URL`` pairs."""
    out: dict[int, str] = {}
    for item in raw:
        budget, sep, url = item.partition("=")
        if not sep or not re.fullmatch(r"\s*\d+\s*", budget) or int(budget) < 1:
            raise fail(name, item, source, "expected BUDGET=URL, e.g. 64=http://h:30064/v1")
        b = int(budget)
        if b > MAX_BUDGET:
            raise fail(name, item, source, f"budget {b} is beyond {MAX_BUDGET}")
        if b in out:
            raise fail(name, item, source, f"budget {b} given twice")
        out[b] = parse_url(url, source, name)
    return out


def parse_stats_map(raw: str, source: str, name: str) -> dict[str, str]:
    """``field=/json/pointer,...`` for the custom dialect."""
    out: dict[str, str] = {}
    for part in [p.strip() for p in raw.split(",") if p.strip()]:
        key, sep, pointer = part.partition("=")
        key = key.strip()
        pointer = pointer.strip()
        if not sep or key not in SPEC_FIELDS:
            raise fail(name, raw, source, f"keys must be among {', '.join(SPEC_FIELDS)}")
        if not pointer.startswith("/"):
            raise fail(name, raw, source, f"{pointer!r} is not a JSON pointer (starts with /)")
        out[key] = pointer
    if not out:
        raise fail(name, raw, source, "expected e.g. decode_rounds=/meta/rounds")
    return out


def parse_lossless(raw: str, source: str, name: str) -> Lossless:
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
    raise fail(
        name,
        raw,
        source,
        f"expected exact, near-tie, near-tie:MARGIN (nats, greater than 0, at most "
        f"{MAX_NEAR_TIE:g}), off or prefix:N (N >= 1)",
    )


def parse_report(raw: str, source: str, name: str) -> str:
    """A directory path (created when the report is written)."""
    if not raw.strip():
        raise fail(name, raw, source, "expected a directory path")
    return raw.strip()


def parse_tokenizer(raw: str, source: str, name: str) -> str:
    """``auto``, ``server``, ``none`` or a path to a tokenizer.json (checked later)."""
    text = raw.strip()
    if not text:
        raise fail(name, raw, source, "expected auto, server, none or a tokenizer.json path")
    return text if text.lower() not in ("auto", "server", "none") else text.lower()


def parse_codes(raw: Sequence[str], source: str, name: str) -> tuple[str, ...]:
    """Invariant codes to skip; validated against the known codes later."""
    out: list[str] = []
    for item in raw:
        for code in item.split(","):
            code = code.strip()
            if code and code not in out:
                if not re.fullmatch(r"[a-z][a-z0-9-]*", code):
                    raise fail(name, item, source, "codes look like early-stop, role-leak")
                out.append(code)
    return tuple(out)


def _items(raw: str) -> list[str]:
    return [p.strip() for p in raw.split(",") if p.strip()]


def parse_concurrencies(raw: str, source: str, name: str = "load-concurrency") -> tuple[int, ...]:
    """``1,4,16,64``: whole numbers >= 1, no repeats; ValueError naming value and source."""
    items = _items(raw)
    if not items:
        raise ValueError(f"invalid {name} {raw!r} (from {source}): expected e.g. 1,4,16")
    out: list[int] = []
    for item in items:
        if not re.fullmatch(r"\d+", item) or int(item) < 1:
            raise ValueError(
                f"invalid {name} {raw!r} (from {source}): {item!r} is not an integer >= 1"
            )
        if int(item) in out:
            raise ValueError(f"invalid {name} {raw!r} (from {source}): {item} is listed twice")
        out.append(int(item))
    return tuple(out)


def parse_rates(raw: str, source: str, name: str = "load-rate") -> tuple[float, ...]:
    """``0.5,2,8``: request rates per second > 0, no repeats."""
    items = _items(raw)
    if not items:
        raise ValueError(
            f"invalid {name} {raw!r} (from {source}): expected e.g. 0.5,2,8 (requests/s)"
        )
    out: list[float] = []
    for item in items:
        try:
            value = float(item)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            raise ValueError(
                f"invalid {name} {raw!r} (from {source}): {item!r} is not a rate > 0 (requests/s)"
            )
        if value in out:
            raise ValueError(f"invalid {name} {raw!r} (from {source}): {item} is listed twice")
        out.append(value)
    return tuple(out)


def _value_error_as_settings_error(fn: Callable[[str, str, str], Any]) -> Parser:
    """A parser raising ``ValueError`` (the load options') as one raising ``SettingsError``."""

    def parse(raw: Any, source: str, name: str) -> Any:
        try:
            return fn(str(raw), source, name)
        except ValueError as exc:
            raise SettingsError(str(exc)) from None

    return parse


def _slo(raw: str, source: str, name: str) -> Any:
    from pytest_ddtree.core import slo  # names the option itself ("slo")

    return slo.parse_slo(raw, source)


parse_load_concurrency = _value_error_as_settings_error(parse_concurrencies)
parse_load_rate = _value_error_as_settings_error(parse_rates)
parse_slo = _value_error_as_settings_error(_slo)


def parse_prompts(raw: Any, source: str, name: str = "prompts") -> Any:
    """A prompt set file (JSON or JSON Lines), read and validated now: a ``PromptSet``.

    An ini value arrives as a list of paths relative to the ini file (``type="paths"``).
    """
    from pytest_ddtree.core.prompts import PromptFileError, load_prompts

    if isinstance(raw, (list, tuple)):
        if len(raw) != 1:
            raise fail(name, " ".join(map(str, raw)), source, "expected one file path")
        raw = raw[0]
    path = str(raw).strip()
    if not path:
        raise fail(name, raw, source, "expected a JSON or JSON Lines file path")
    try:
        return load_prompts(path)
    except PromptFileError as exc:
        raise SettingsError(f"invalid {name} (from {source}): {exc}") from None


def _number(raw: object, *, percent: bool = False) -> float:
    """``raw`` as a float (``5%`` as 0.05 when ``percent``); NaN when it is not a number."""
    text = str(raw).strip()
    try:
        if percent and text.endswith("%"):
            return float(text[:-1]) / 100
        return float(text)
    except ValueError:
        return math.nan


def parse_slowdown(raw: str, source: str, name: str) -> float:
    """A factor between 0.1 and 10 on the embedded server's simulated time."""
    value = _number(raw)
    if not math.isfinite(value) or not 0.1 <= value <= 10:
        raise fail(
            name,
            raw,
            source,
            "expected a factor between 0.1 and 10 (1 is as built)",
        )
    return value


def parse_jitter(raw: str, source: str, name: str) -> float:
    """A coefficient of variation between 0 and 1 (``0.05`` or ``5%``)."""
    value = _number(raw, percent=True)
    if not math.isfinite(value) or not 0 <= value <= 1:
        raise fail(
            name,
            raw,
            source,
            "expected a coefficient of variation between 0 and 1, e.g. 0.05 or 5%",
        )
    return value


def parse_equivalence(raw: str, source: str, name: str) -> float:
    """The race's practical margin: ``2%`` or ``0.02``, within (0, 50%)."""
    value = _number(raw, percent=True)
    if not math.isfinite(value) or not 0 < value < 0.5:
        raise fail(name, raw, source, "expected a margin above 0% and below 50%, e.g. 2%")
    return value


def parse_sweep_requests(raw: str, source: str, name: str) -> int | None:
    """``auto`` or an integer >= 1 (checked against the budgets by ``sweep_requests_can_judge``)."""
    if str(raw).strip().lower() == "auto":
        return None
    return parse_positive_int(raw, source, name)


#: Random splits of the pooled answers in the distribution test
#: (``pytest_ddtree.checks.distribution``).
DISTRIBUTION_PERMUTATIONS = 999


def least_alpha(permutations: int = DISTRIBUTION_PERMUTATIONS) -> float:
    """The smallest level a permutation test can reject at: its smallest p-value, 1 / (B + 1).

    A level below it could never be reached, so the test could never fail.
    """
    return 1.0 / (permutations + 1)


def parse_alpha(raw: str, source: str, name: str) -> float:
    """A significance level (``0.05`` or ``5%``) the permutation test can reach, up to 0.5."""
    value = _number(raw, percent=True)
    low = least_alpha()
    if not math.isfinite(value) or not low <= value <= 0.5:
        raise fail(
            name,
            raw,
            source,
            f"expected a level from {low:g} (the smallest p-value the test's permutations can "
            "show) to 0.5, e.g. 0.05 or 5%",
        )
    return value


def parse_metrics_url(raw: str, source: str, name: str) -> str:
    """``off`` or an http(s) URL of a Prometheus ``/metrics`` page."""
    if str(raw).strip().lower() == "off":
        return "off"
    return parse_url(str(raw), source, name)


def parse_burstiness(raw: str, source: str, name: str) -> float:
    """A number > 0 (1 = Poisson arrivals)."""
    value = _number(raw)
    if not math.isfinite(value) or value <= 0:
        raise fail(name, raw, source, "expected a number > 0 (1 is Poisson)")
    return value


def parse_load_requests(raw: str, source: str, name: str) -> int | None:
    """``auto`` or an integer >= 1."""
    if str(raw).strip().lower() == "auto":
        return None
    return parse_positive_int(raw, source, name)


def parse_slowdown_after(raw: str, source: str, name: str) -> tuple[int, float]:
    """``N`` or ``N:F``: after N requests, costs times F (F > 0, default 3)."""
    text = str(raw).strip()
    m = re.fullmatch(r"(\d{1,9})(?::([0-9]*\.?[0-9]+))?", text)
    factor = float(m.group(2)) if m and m.group(2) else 3.0
    if not m or not math.isfinite(factor) or factor <= 0:
        raise fail(name, raw, source, "expected N or N:F, e.g. 40 or 40:2.5")
    return int(m.group(1)), factor


def parse_probe(raw: str, source: str, name: str) -> str:
    """A command line, split like a shell would (checked here so a bad quote fails early)."""
    import shlex

    try:
        words = shlex.split(str(raw))
    except ValueError as exc:
        raise fail(name, raw, source, f"cannot split it into words ({exc})") from None
    if not words:
        raise fail(name, raw, source, "expected a command, e.g. nvidia-smi")
    return str(raw).strip()


def parse_text(raw: Any, source: str, name: str) -> str:
    """Any text, stripped."""
    return str(raw).strip()


def parse_features(raw: str, source: str, name: str) -> tuple[str, ...]:
    """``tools,logprobs``: features a deployment must serve (``core.features``), no repeats;
    an alias (``json``) stands for its feature (``response_format``)."""
    from pytest_ddtree.core.features import feature_names

    known = feature_names()
    out: list[str] = []
    for item in _items(raw):
        feature = known.get(item.lower())
        if feature is None:
            raise fail(name, item, source, f"known features are {', '.join(sorted(known))}")
        if feature not in out:
            out.append(feature)
    return tuple(out)


def parse_markers(raw: Sequence[str], source: str, name: str) -> tuple[str, ...]:
    """Marker texts (repeatable), each non-empty, no repeats."""
    out: list[str] = []
    for item in raw:
        if not item.strip():
            raise fail(name, item, source, "expected a non-empty marker text")
        if item not in out:
            out.append(item)
    return tuple(out)


_FIELD_NAME = r"[A-Za-z_][A-Za-z0-9_]*"


def parse_field_path(raw: Any, source: str, name: str) -> str:
    """A request body field: a name, a dotted path, or a JSON Pointer whose dots are literal."""
    text = str(raw).strip()
    if text.startswith("/"):
        # JSON Pointer: each /token is one key, dots literal (/speculative.n_max)
        tokens = text[1:].split("/")
        for token in tokens:
            if not token.strip() or re.search(r"~(?![01])", token) or token != token.strip():
                raise fail(
                    name,
                    raw,
                    source,
                    "expected a JSON Pointer of non-empty keys (/speculative.n_max, "
                    "/extra/ddtree/budget; ~1 for '/', ~0 for '~')",
                )
        return text
    if not re.fullmatch(rf"{_FIELD_NAME}(\.{_FIELD_NAME})*", text):
        raise fail(
            name,
            raw,
            source,
            "expected a field name, a dotted path (extra.ddtree.budget) or a JSON Pointer "
            "for keys with dots (/speculative.n_max)",
        )
    return text


def least_requests(budgets: int, prompts: int = 1, min_n: int = DEFAULT_MIN_N) -> int:
    """The fewest requests that give every budget the race's minimum (two rounds at least).

    With one prompt (the default) it is the least any prompt set needs: ``min_n`` a budget.
    """
    rounds = max(2, -(-min_n // prompts))
    return rounds * budgets * prompts


def too_few_sweep_requests(
    requests: int, budgets: int, prompts: int | None, source: str
) -> str | None:
    """Why an adaptive sweep's request budget could judge no budget, in one line; else None.

    ``prompts`` None: the option alone, before the prompts are known (the least any
    prompt set needs); a number: the sweep's own prompts, known when it runs.
    """
    least = least_requests(budgets, prompts or 1)
    if requests >= least:
        return None
    if prompts is None:
        return (
            f"invalid sweep-requests {requests} (from {source}): below the minimum n "
            f"({DEFAULT_MIN_N}) x {budgets} budget(s) = {least}, so no budget could be judged"
        )
    return (
        f"invalid sweep-requests {requests} (from {source}): below the minimum n x {budgets} "
        f"budget(s) x {prompts} prompt(s) = {least} (two rounds at least, so every prompt has "
        "a spread)"
    )


def setting(default: str | None, parse: Parser, *, unset: Any = None, repr: bool = True) -> Any:
    """A ``Settings`` field: its option's ``default`` as a user writes it, and its parser.

    The field's typed default is ``default`` parsed, or ``unset`` for an option
    without one (the value when it is not given). The option table reads both
    back (``OptionDef.default``, ``OptionDef.parse``), so each is stated here only.
    """
    meta = {"default": default, "parse": parse}
    value = unset if default is None else parse(default, "default", "default")
    if value.__hash__ is None:  # a mutable default: a fresh copy each time
        return field(default_factory=lambda: copy.copy(value), metadata=meta, repr=repr)
    return field(default=value, metadata=meta, repr=repr)


@dataclass(frozen=True)
class Settings:
    """Every pytest-ddtree setting, resolved once and validated.

    This is what the user configured: ``endpoint`` is None when the embedded
    reference server is used (its URL is found on the ``Runtime``).
    ``api_key`` is never shown by ``repr`` or in any report. Each attribute
    is named after its option (``--ddtree-role-marker`` is ``role_markers``:
    a repeatable option's attribute is plural), see :attr:`OptionDef.attr`.

    Each field is declared once, with its option's default as a user writes it (what
    ``--help`` and the docs show) and its parser: the typed default is that text parsed
    (:func:`setting`). ``pytest_ddtree.core.options.OPTIONS`` adds each option's flag,
    ini key, environment variables and help.
    """

    endpoint: str | None = setting(None, parse_url)
    model: str | None = setting(None, parse_text)
    api_key: str | None = setting(None, parse_text, repr=False)
    budgets: tuple[int, ...] = setting("16,32,64,128,256,512,1024", parse_budgets)
    temperatures: tuple[float, ...] = setting("0", parse_temperatures)
    #: no option default: ``endpoints`` when budget endpoints are given, else this (``_cross``)
    budget_mode: Literal["field", "endpoints", "none"] = setting(
        None, partial(parse_choice, choices=("field", "endpoints", "none")), unset="field"
    )
    budget_field: str = setting("tree_budget", parse_field_path)
    budget_endpoints: Mapping[int, str] = setting(None, parse_budget_endpoints, unset={})
    dialect: str = setting("auto", partial(parse_choice, choices=DIALECTS))
    stats_map: Mapping[str, str] = setting(None, parse_stats_map, unset={})
    tokenizer: str = setting("auto", parse_tokenizer)
    timeout: Timeout = setting(Timeout().spec(), parse_timeout)
    max_tokens: int = setting("128", partial(parse_positive_int, maximum=MAX_MAX_TOKENS))
    min_tokens: int | None = setting(
        None, partial(parse_positive_int, minimum=0, maximum=MAX_MAX_TOKENS)
    )
    api: Literal["chat", "completions"] = setting(
        "chat", partial(parse_choice, choices=("chat", "completions"))
    )
    enable_thinking: bool = setting("false", parse_bool)
    skip_checks: tuple[str, ...] = setting(None, parse_codes, unset=())
    require: tuple[str, ...] = setting(None, parse_features, unset=())
    role_markers: tuple[str, ...] = setting(None, parse_markers, unset=())
    allow_markers: tuple[str, ...] = setting(None, parse_markers, unset=())
    baseline_endpoint: str | None = setting(None, parse_url)
    lossless: Lossless = setting(Lossless.mode, parse_lossless)
    distribution_samples: int = setting(
        "40", partial(parse_positive_int, minimum=5, maximum=10_000)
    )
    distribution_alpha: float = setting("0.05", parse_alpha)
    report: str | None = setting(None, parse_report)
    rounds: int = setting("3", parse_positive_int)
    warmup_rounds: int = setting("1", partial(parse_positive_int, minimum=0))
    sweep_seed: int = setting("0", partial(parse_positive_int, minimum=0))
    sweep_order: Literal["shuffled", "fixed"] = setting(
        "shuffled", partial(parse_choice, choices=("shuffled", "fixed"))
    )
    sweep: Literal["exhaustive", "adaptive"] = setting(
        "adaptive", partial(parse_choice, choices=("exhaustive", "adaptive"))
    )
    equivalence: float = setting("2%", parse_equivalence)
    #: None: auto (an exhaustive sweep's requests at SWEEP_AUTO_ROUNDS rounds)
    sweep_requests: int | None = setting("auto", parse_sweep_requests)
    #: passes over the sweep prompts collected for a benchmark race (1: no pass=K ids)
    sweep_passes: int = setting("1", partial(parse_positive_int, maximum=100))
    reference_faults: tuple[str, ...] = setting(None, parse_codes, unset=())
    reference_latency: bool = setting("on", partial(parse_bool, expected="on or off"))
    reference_slowdown: float = setting("1", parse_slowdown)
    reference_slowdown_after: tuple[int, float] | None = setting(None, parse_slowdown_after)
    reference_jitter: float = setting("0", parse_jitter)
    probe: str | None = setting(None, parse_probe)
    slo: Any = setting(None, parse_slo)  # pytest_ddtree.core.slo.SLO
    load_concurrency: tuple[int, ...] = setting("1,4,16", parse_load_concurrency)
    load_rate: tuple[float, ...] = setting(None, parse_load_rate, unset=())
    load_burstiness: float = setting("1", parse_burstiness)
    load_requests: int | None = setting("auto", parse_load_requests)
    #: prompt depths in tokens, "auto" (doubling up to the server's context), or () (off)
    context: tuple[int, ...] | Literal["auto"] = setting(None, parse_context, unset=())
    max_response_bytes: int = setting("8MiB", parse_size)
    retry_429: int = setting("0", partial(parse_positive_int, minimum=0, maximum=MAX_RETRY_429))
    prompts: Any = setting(None, parse_prompts)  # pytest_ddtree.core.prompts.PromptSet
    #: None: the endpoint root's /metrics, probed once; "off": never scraped
    metrics_url: str | None = setting(None, parse_metrics_url)
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

    @property
    def requested_budgets(self) -> tuple[int | None, ...]:
        """The budgets a run requests, in order: ``(None,)`` (the server's default) with
        budget-mode none; with budget-mode endpoints, those given an endpoint."""
        if self.budget_mode == "none":
            return (None,)
        if self.budget_mode == "endpoints":
            return tuple(b for b in self.budgets if b in self.budget_endpoints)
        return self.budgets

    @property
    def smallest_budget(self) -> int | None:
        """The smallest budget requested (None: the server's default): the cheapest probe."""
        return min((b for b in self.requested_budgets if b is not None), default=None)

    @property
    def largest_budget(self) -> int | None:
        """The largest budget requested (None: the server's default): the deepest speculation."""
        return max((b for b in self.requested_budgets if b is not None), default=None)

    def source_of(self, name: str) -> str:
        """Where the value of option ``name`` came from (for messages)."""
        return self.sources.get(name, "default")

    def with_overrides(self, **changes: Any) -> Settings:
        """A copy with some values replaced (used for marker overrides)."""
        return replace(self, **changes)


#: Aliases kept for their importers: the defaults themselves are ``Settings``'.
DEFAULT_BUDGETS: tuple[int, ...] = Settings.budgets
DEFAULT_MAX_RESPONSE_BYTES: int = Settings.max_response_bytes


def budget_label(tree_budget: int | None) -> str:
    """How a budget is named in tables and messages: ``64`` or ``server-default``."""
    return Budget(tree_budget).label


def budget_id(budget: int | None) -> str:
    """The test id (and benchmark group) of one budget: ``tree_budget=64``."""
    return Budget(budget).test_id


def temperature_label(temperature: float) -> str:
    """How a temperature is named in ids, groups and tables: ``0.7``, ``1``."""
    return f"{temperature:g}"


def temperature_id(temperature: float) -> str:
    """The test id part of one temperature: ``temperature=0.7``."""
    return f"temperature={temperature_label(temperature)}"
