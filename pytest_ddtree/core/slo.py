"""Service-level objectives and goodput.

``ttft=500ms,tpot=50ms,e2e=2s`` sets per-request limits (``itl`` too, judged on
the request's worst gap); a request is *good* when it is valid and within every
limit. ``goodput=95%`` (optional, default 100%) is the share of requests that
must be good for the SLO to hold; a bare number is a percentage too, but one of
1 or less (``0.95``) is refused as an ambiguous fraction. Units: ``us``, ``ms``,
``s`` (bare numbers are milliseconds).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["SLO", "SLO_KEYS", "parse_slo"]

SLO_KEYS = ("ttft", "itl", "tpot", "e2e")
_UNITS = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "": 1e-3}


@dataclass(frozen=True)
class SLO:
    """Per-request limits in seconds (None: no limit) and the required good share."""

    ttft: float | None = None
    itl: float | None = None
    tpot: float | None = None
    e2e: float | None = None
    goodput: float = 1.0

    @property
    def limits(self) -> dict[str, float]:
        """The limits that are set."""
        return {k: v for k in SLO_KEYS if (v := getattr(self, k)) is not None}

    def misses(self, metrics: dict[str, float | None]) -> list[str]:
        """Names of the limits a request's ``metrics`` (seconds) break; a missing value breaks."""
        out = []
        for key, limit in self.limits.items():
            value = metrics.get(key)
            if value is None or value > limit:
                out.append(key)
        return out

    def __str__(self) -> str:
        parts = [f"{k}={v * 1000:g}ms" for k, v in self.limits.items()]
        if self.goodput < 1.0:
            parts.append(f"goodput={self.goodput * 100:g}%")
        return ",".join(parts)

    def to_json(self) -> dict[str, Any]:
        """Limits in milliseconds, the good share as a fraction."""
        return {**{f"{k}_ms": v * 1000 for k, v in self.limits.items()}, "goodput": self.goodput}


def parse_slo(raw: str, source: str) -> SLO:
    """Parse ``ttft=500ms,tpot=50ms,e2e=2s[,goodput=95%]``; ValueError in one line otherwise."""

    def bad(why: str) -> ValueError:
        return ValueError(f"invalid slo {raw!r} (from {source}): {why}")

    text = str(raw).strip()
    if not text:
        raise bad("expected e.g. ttft=500ms,tpot=50ms,e2e=2s")
    values: dict[str, float] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key, value = key.strip().lower(), value.strip().lower()
        if not sep or not key:
            raise bad(f"{part.strip()!r} is not KEY=VALUE (keys: {', '.join(SLO_KEYS)}, goodput)")
        if key in values:
            raise bad(f"{key} is given twice")
        if key == "goodput":
            m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(%?)", value)
            if m and not m.group(2) and float(m.group(1)) <= 1:
                # 0.95 is a fraction, read as 0.95% it would almost never fail
                shown = f"{float(m.group(1)) * 100:g}%"
                raise bad(f"goodput {value!r} has no %: write the share as a percentage, {shown}")
            share = float(m.group(1)) / 100 if m else math.nan
            if not (0 < share <= 1):
                raise bad(f"goodput {value!r} is not a percentage in (0, 100], e.g. 95%")
            values[key] = share
            continue
        if key not in SLO_KEYS:
            raise bad(f"unknown key {key!r} (keys: {', '.join(SLO_KEYS)}, goodput)")
        m = re.fullmatch(r"(\d+(?:\.\d+)?(?:e[+-]?\d+)?)\s*(us|µs|ms|s|)", value)
        seconds = float(m.group(1)) * _UNITS[m.group(2)] if m else math.nan
        if not (math.isfinite(seconds) and seconds > 0):
            raise bad(f"{key} {value!r} is not a duration > 0 like 500ms or 2s")
        values[key] = seconds
    if not any(k in values for k in SLO_KEYS):
        raise bad(f"set at least one limit among {', '.join(SLO_KEYS)}")
    return SLO(**values)
