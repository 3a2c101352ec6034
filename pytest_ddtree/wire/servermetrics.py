"""The server's own counters: Prometheus ``/metrics`` snapshots and their deltas.

A :class:`MetricsReader` scrapes ``/metrics`` bounded in time and bytes and
parses it with ``prometheus-client``'s text parser. Two snapshots give a
:class:`CounterDelta`: the speculative counters (vLLM's ``vllm:`` names and
llama.cpp's ``llamacpp:`` ones), the requests the server finished, and the
running/waiting gauges before and after. From a delta:

- the server-side acceptance length and per-position acceptance rates;
- **other traffic**: more requests counted than the suite sent, or requests
  already running or waiting before a serial timing (:func:`other_traffic`);
- whether the per-request statistics of the same requests add up to the
  counters (:func:`stats_disagreement`).

Server-wide counters mix every client's traffic: they complement the
per-request statistics, never replace them. Nothing here imports pytest.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from pytest_ddtree.core.dialects import MetricNames, metric_names
from pytest_ddtree.core.dialects.sglang import SGLang

#: a ``/metrics`` page larger than this is not read (vLLM's is ~100 KiB with many models)
MAX_METRICS_BYTES = 4 * 1024 * 1024
#: a scrape slower than this (seconds, whole page) is abandoned
METRICS_TIMEOUT = 5.0
#: how long (seconds) the counters may take to count a group's last request
SETTLE_SECONDS = 1.0
#: per-request sums and counter deltas may differ by this share of the counter (rounding
#: of a server that reports rates, not counts), and by at least one token
STATS_TOLERANCE = 0.01

#: engine prefix -> its Prometheus names, each declared by its dialect (``core.dialects``)
_NAMES: dict[str, MetricNames] = {m.prefix: m for m in metric_names()}
#: engine prefix -> (drafts, draft tokens, accepted tokens, accepted per position); None: the
#: engine has no such counter (SGLang keeps its acceptance in gauges, which cannot be differenced)
_SPEC: dict[str, tuple[str | None, ...]] = {p: m.spec for p, m in _NAMES.items()}
#: engine prefix -> (finished-requests counter or None, running gauge, waiting gauge)
_LOAD: dict[str, tuple[str | None, str, str]] = {p: m.load for p, m in _NAMES.items()}
_SGLANG = SGLang.metrics
assert _SGLANG is not None and _SGLANG.token_counters is not None
#: SGLang's token counters (counted per finished request): prompt and generated tokens
SGLANG_TOKENS = _SGLANG.token_counters
#: SGLang's speculative figures are gauges (the value its scheduler last logged, over
#: its own recent window): read as they stand after a group, never differenced
SGLANG_GAUGES = _SGLANG.spec_gauges
GAUGES_NOTE = (
    "SGLang's speculative figures are gauges (the value the server last logged): "
    "read as they stand, never differenced as counters"
)


class ScrapeError(Exception):
    """``/metrics`` could not be read or is not Prometheus text (one line)."""


@dataclass(frozen=True)
class Snapshot:
    """One scrape: every sample's value by metric name and label set.

    Counters are stored under their family name (``..._total`` stripped by
    the parser, as the exposition format defines it).
    """

    values: Mapping[str, Mapping[tuple[tuple[str, str], ...], float]]

    def total(self, name: str) -> float | None:
        """The sum over every label set of ``name``, or None when the server has none."""
        series = self.values.get(name)
        return None if series is None else math.fsum(series.values())

    def by_label(self, name: str, label: str) -> dict[str, float]:
        """``name``'s values keyed by one label (summed over the other labels)."""
        out: dict[str, float] = {}
        for labels, value in self.values.get(name, {}).items():
            key = dict(labels).get(label)
            if key is not None:
                out[key] = out.get(key, 0.0) + value
        return out

    @property
    def prefix(self) -> str | None:
        """Which engine's names the page uses (``vllm``, ``llamacpp``, ``sglang``), if any."""
        for prefix, (_, running, _) in ((p, _LOAD[p]) for p in _LOAD):
            if running in self.values or _SPEC[prefix][0] in self.values:
                return prefix
        return None


def parse(text: str) -> Snapshot:
    """Parse Prometheus text; ``ScrapeError`` when it is not Prometheus or holds no sample."""
    # loaded on the first page read: a run whose server has no /metrics never needs it
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name = sample.name
                if family.type == "counter" and name == f"{family.name}_total":
                    name = family.name
                elif name != family.name:
                    continue  # _created, _bucket, _sum, _count: not needed here
                series = values.setdefault(name, {})
                series[tuple(sorted(sample.labels.items()))] = float(sample.value)
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise ScrapeError(f"not Prometheus text ({str(exc)[:80] or type(exc).__name__})") from None
    if not values:
        raise ScrapeError("not Prometheus text (no metric sample)")
    return Snapshot(values)


def _read_bounded(response: httpx.Response, deadline: float, max_bytes: int) -> bytes:
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > max_bytes:
            raise ScrapeError(f"larger than {max_bytes // 1024} KiB: not read")
        if time.monotonic() > deadline:
            raise ScrapeError("slower than the time allowed: abandoned")
    return bytes(body)


@dataclass
class MetricsReader:
    """Scrapes one ``/metrics`` URL; after the first failure it stops, with one warning.

    ``url`` None means off. :meth:`probe` is the start-up check: a missing
    page (404, 501) turns the reader off with :attr:`status` saying so; any
    other failure (not Prometheus, huge, slow) is a :attr:`warning` naming the
    URL, and the run goes on without the counters.
    """

    url: str | None
    #: False for the default URL: a page there that is not Prometheus text means "no metrics"
    explicit: bool = True
    timeout: float = METRICS_TIMEOUT
    max_bytes: int = MAX_METRICS_BYTES
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    status: str = ""
    warning: str | None = None
    _client: httpx.Client | None = field(default=None, init=False, repr=False)

    @property
    def active(self) -> bool:
        """True while snapshots are taken."""
        return self.url is not None and self.warning is None

    def probe(self) -> Snapshot | None:
        """The start-up scrape: off (with :attr:`status`) when the server has no ``/metrics``."""
        if self.url is None:
            self.status = self.status or "off"
            return None
        try:
            snapshot = self._fetch()
        except _Absent as exc:
            self.status = f"off: {self.url} {exc}"
            self.url = None
            return None
        except ScrapeError as exc:
            if not self.explicit and str(exc).startswith("not Prometheus"):
                self.status = f"off: {self.url} is {exc}"
                self.url = None
                self.close()
                return None
            self._fail(exc)
            return None
        prefix = snapshot.prefix or "no speculative counters"
        if snapshot.prefix is not None and _NAMES[snapshot.prefix].spec_gauges:
            prefix += "; speculative figures are gauges, read as gauges, never differenced"
        self.status = f"{self.url} ({prefix})"
        return snapshot

    def scrape(self) -> Snapshot | None:
        """A snapshot now, or None when off or after a failure (warned once)."""
        if not self.active:
            return None
        try:
            return self._fetch()
        except ScrapeError as exc:
            self._fail(exc)
            return None

    def _fail(self, exc: Exception) -> None:
        self.close()
        self.warning = f"server metrics {self.url}: {exc}; the run goes on without them"
        self.status = f"off: {self.url}: {exc} (see the warning at the end)"

    def close(self) -> None:
        """Close the pooled connection (the reader reopens one if used again)."""
        client, self._client = self._client, None
        if client is not None:
            client.close()

    def _pooled(self) -> httpx.Client:
        # one pooled client: building one costs ~50 ms (TLS context), a pooled GET ~0.5 ms;
        # idle connections expire before a server's own keep-alive timeout (~5 s) closes them
        if self._client is None:
            self._client = httpx.Client(
                timeout=httpx.Timeout(self.timeout),
                headers=dict(self.headers),
                limits=httpx.Limits(max_connections=1, keepalive_expiry=2.0),
            )
        return self._client

    def _fetch(self) -> Snapshot:
        try:
            body = self._get()
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
            # a reused connection the server closed without saying so: once more, fresh
            self.close()
            try:
                body = self._get()
            except httpx.HTTPError as exc:
                raise ScrapeError(f"unreachable ({type(exc).__name__})") from None
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise ScrapeError("not Prometheus text (not UTF-8)") from None
        try:
            return parse(text)
        except ScrapeError as exc:
            if "no metric sample" in str(exc):
                raise _Absent("serves no Prometheus metrics") from None
            raise

    def _get(self) -> bytes:
        """The page's bytes; transport errors other than a dropped connection are one line."""
        assert self.url is not None
        deadline = time.monotonic() + self.timeout
        try:
            with self._pooled().stream("GET", self.url) as response:
                if response.status_code in (404, 501):
                    raise _Absent(f"answered HTTP {response.status_code}")
                if response.status_code != 200:
                    raise ScrapeError(f"answered HTTP {response.status_code}")
                return _read_bounded(response, deadline, self.max_bytes)
        except ScrapeError:
            self.close()  # a page abandoned half-read leaves no connection to reuse
            raise
        except httpx.TimeoutException:
            self.close()
            raise ScrapeError("slower than the time allowed: abandoned") from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
            raise
        except httpx.HTTPError as exc:
            raise ScrapeError(f"unreachable ({type(exc).__name__})") from None


class _Absent(ScrapeError):
    """The server has no ``/metrics`` (not an error: the feature is off)."""


def default_metrics_url(base_url: str) -> str:
    """The endpoint root's ``/metrics``: ``http://h:8000/v1`` -> ``http://h:8000/metrics``."""
    root = base_url.rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    return f"{root}/metrics"


# ------------------------------------------------------------------ deltas


def _diff(before: Snapshot, after: Snapshot, name: str | None) -> float | None:
    if name is None:
        return None
    a, b = after.total(name), before.total(name)
    if a is None:
        return None
    # llama.cpp has no speculative counter until the first speculative request: absent is 0
    return a - (b or 0.0)


@dataclass(frozen=True)
class CounterDelta:
    """What the server counted between two snapshots (None: the server has no such counter).

    ``running_before``/``waiting_before`` are the gauges at the first
    snapshot (requests the suite had not sent yet are not in them).
    """

    prefix: str | None
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    accepted_per_position: Mapping[int, float] = field(default_factory=dict)
    requests: float | None = None
    running_before: float | None = None
    waiting_before: float | None = None
    running_after: float | None = None
    waiting_after: float | None = None
    #: SGLang: the prompt and generated tokens its counters grew by
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    #: SGLang's speculative gauges at the second snapshot (``SGLANG_GAUGES``), not deltas
    gauges: Mapping[str, float] = field(default_factory=dict)

    @property
    def acceptance_length(self) -> float | None:
        """Tokens committed per verification step, bonus token included (as vLLM logs it)."""
        if not self.drafts or self.accepted_tokens is None:
            return None
        return 1.0 + self.accepted_tokens / self.drafts

    @property
    def position_rates(self) -> dict[int, float]:
        """Share of verification steps whose draft token at each position was accepted."""
        if not self.drafts:
            return {}
        return {p: n / self.drafts for p, n in sorted(self.accepted_per_position.items())}

    def plus(self, other: CounterDelta) -> CounterDelta:
        """Two deltas added (a budget's groups); gauges keep the busiest before-state."""

        def add(a: float | None, b: float | None) -> float | None:
            return None if a is None and b is None else (a or 0.0) + (b or 0.0)

        def peak(a: float | None, b: float | None) -> float | None:
            return None if a is None and b is None else max(a or 0.0, b or 0.0)

        positions = dict(self.accepted_per_position)
        for p, n in other.accepted_per_position.items():
            positions[p] = positions.get(p, 0.0) + n
        return CounterDelta(
            prefix=self.prefix or other.prefix,
            drafts=add(self.drafts, other.drafts),
            draft_tokens=add(self.draft_tokens, other.draft_tokens),
            accepted_tokens=add(self.accepted_tokens, other.accepted_tokens),
            accepted_per_position=positions,
            requests=add(self.requests, other.requests),
            running_before=peak(self.running_before, other.running_before),
            waiting_before=peak(self.waiting_before, other.waiting_before),
            running_after=peak(self.running_after, other.running_after),
            waiting_after=peak(self.waiting_after, other.waiting_after),
            prompt_tokens=add(self.prompt_tokens, other.prompt_tokens),
            generation_tokens=add(self.generation_tokens, other.generation_tokens),
            # a gauge is not added up: the later group's reading stands
            gauges={**self.gauges, **other.gauges},
        )

    def to_json(self) -> dict[str, Any]:
        """Plain JSON: the counts, then the figures derived from them."""
        out: dict[str, Any] = {
            "prefix": self.prefix,
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens,
            "accepted_per_position": {str(p): n for p, n in self.accepted_per_position.items()},
            "requests": self.requests,
            "running_before": self.running_before,
            "waiting_before": self.waiting_before,
            "running_after": self.running_after,
            "waiting_after": self.waiting_after,
            "acceptance_length": self.acceptance_length,
            "position_rates": {str(p): r for p, r in self.position_rates.items()},
            "prompt_tokens": self.prompt_tokens,
            "generation_tokens": self.generation_tokens,
            "gauges": dict(self.gauges),
        }
        if self.gauges:
            out["gauges_note"] = GAUGES_NOTE
        return {k: v for k, v in out.items() if v not in (None, {})}


def _gauge(snapshot: Snapshot, name: str) -> float | None:
    """A gauge's reading: the mean over its label sets (one per scheduler rank), never a sum."""
    series = snapshot.values.get(name)
    if not series:
        return None
    return math.fsum(series.values()) / len(series)


def delta(before: Snapshot, after: Snapshot) -> CounterDelta:
    """The counters' growth and the load gauges between two snapshots."""
    prefix = after.prefix or before.prefix
    if prefix is None:
        return CounterDelta(prefix=None)
    drafts, drafted, accepted, per_pos = _SPEC[prefix]
    finished, running, waiting = _LOAD[prefix]
    positions: dict[int, float] = {}
    old = before.by_label(per_pos, "position") if per_pos else {}
    for pos, value in (after.by_label(per_pos, "position") if per_pos else {}).items():
        if pos.isdigit():
            positions[int(pos)] = value - old.get(pos, 0.0)
    sglang: dict[str, Any] = {}
    names = _NAMES[prefix]
    if names.token_counters is not None:
        prompt, generated = names.token_counters
        readings = {name.partition(":")[2]: _gauge(after, name) for name in names.spec_gauges}
        sglang = {
            "prompt_tokens": _diff(before, after, prompt),
            "generation_tokens": _diff(before, after, generated),
            "gauges": {k: v for k, v in readings.items() if v is not None},
        }
    return CounterDelta(
        prefix=prefix,
        drafts=_diff(before, after, drafts),
        draft_tokens=_diff(before, after, drafted),
        accepted_tokens=_diff(before, after, accepted),
        accepted_per_position=positions,
        requests=None if finished is None else _diff(before, after, finished),
        running_before=before.total(running),
        waiting_before=before.total(waiting),
        running_after=after.total(running),
        waiting_after=after.total(waiting),
        **sglang,
    )


# ------------------------------------------------------------------ verdicts


def _uncounted(change: CounterDelta, sent: int) -> bool:
    """True when the server has not counted every request the suite sent."""
    return change.requests is not None and change.requests < sent


def _lagging(change: CounterDelta, sent: int, *, serial: bool) -> bool:
    """True while the counters do not yet show the group's requests as finished."""
    if _uncounted(change, sent):
        return True
    busy = (change.running_after or 0.0) + (change.waiting_after or 0.0)
    return serial and busy > 0


def other_traffic(change: CounterDelta, sent: int, *, serial: bool) -> str | None:
    """Why the server was shared during these requests, or None when nothing shows it.

    ``sent`` is how many requests the suite sent between the snapshots;
    ``serial`` says the suite itself had nothing in flight at the first one.
    """
    reasons: list[str] = []
    if change.requests is not None and change.requests > sent:
        reasons.append(f"the server finished {change.requests:g} requests, the suite sent {sent}")
    if serial:
        busy = (change.running_before or 0.0) + (change.waiting_before or 0.0)
        if busy > 0:
            reasons.append(
                f"{change.running_before or 0:g} running and {change.waiting_before or 0:g} "
                "waiting before a serial timing"
            )
    return "; ".join(reasons) or None


@dataclass(frozen=True)
class Counts:
    """One request's reported draft counts, where no ``SpecStats`` is kept (load samples)."""

    num_draft_tokens: int | None
    num_accepted_draft_tokens: int | None


@dataclass(frozen=True)
class RequestSums:
    """The per-request statistics of the same requests, summed (None: some did not report)."""

    draft_tokens: int | None
    accepted_tokens: int | None
    #: the verify steps (``decode_rounds``) summed: SGLang's ``spec_verify_calls_total``
    #: counts the same steps
    verify_steps: int | None = None

    @classmethod
    def of(cls, stats: Iterable[Any]) -> RequestSums:
        """Sum ``SpecStats``-like objects (``num_draft_tokens``, ``num_accepted_draft_tokens``).

        A request that did not report a field makes that sum unknown; a
        request without any statistics makes both unknown.
        """
        drafted: int | None = 0
        accepted: int | None = 0
        steps: int | None = 0
        for s in stats:
            d = None if s is None else getattr(s, "num_draft_tokens", None)
            a = None if s is None else getattr(s, "num_accepted_draft_tokens", None)
            r = None if s is None else getattr(s, "decode_rounds", None)
            drafted = None if drafted is None or not isinstance(d, int) else drafted + d
            accepted = None if accepted is None or not isinstance(a, int) else accepted + a
            steps = None if steps is None or not isinstance(r, int) else steps + r
        return cls(drafted, accepted, steps)


def stats_disagreement(
    change: CounterDelta, sums: RequestSums, *, tolerance: float = STATS_TOLERANCE
) -> list[str]:
    """Where the per-request sums and the counter deltas differ beyond ``tolerance``.

    Only counts both sides know are compared. The tolerance is a share of the
    counter and at least one token.
    """
    out: list[str] = []
    pairs: Sequence[tuple[str, int | None, float | None]] = (
        ("draft tokens", sums.draft_tokens, change.draft_tokens),
        ("accepted tokens", sums.accepted_tokens, change.accepted_tokens),
    )
    names = _NAMES.get(change.prefix or "")
    if names is not None and names.drafts_are_verify_steps:
        # SGLang adds each finished request's spec_verify_ct to spec_verify_calls_total
        pairs = (*pairs, ("verify steps", sums.verify_steps, change.drafts))
    for what, per_request, counter in pairs:
        if per_request is None or counter is None:
            continue
        allowed = max(1.0, tolerance * abs(counter))
        if abs(per_request - counter) > allowed:
            out.append(
                f"{what}: the responses report {per_request}, the server's counters grew by "
                f"{counter:g} (tolerance {allowed:g})"
            )
    return out


# ------------------------------------------------------------------ the run's record


@dataclass(frozen=True)
class CounterRecord:
    """The counters over one group of requests: a budget's visit in a sweep round, a
    benchmark, or a load point.

    ``shared`` says why another client shared the server (None: nothing shows
    it); ``inconsistent`` lists where the per-request statistics disagree with
    the counters (only checked when the server was not shared). ``point`` is a load
    point's JSON (its mode, value and burstiness: what its rows are ordered by; None
    for a sweep round or a benchmark).
    """

    scope: str
    test: str
    tree_budget: int | None
    label: str
    sent: int
    delta: CounterDelta
    shared: str | None = None
    inconsistent: tuple[str, ...] = ()
    #: False: the server had not counted every request in time; no verdict was drawn
    settled: bool = True
    point: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """Plain JSON for ``sweep.json``, the HTML and ``extra_info``."""
        out: dict[str, Any] = {
            "scope": self.scope,
            "test": self.test,
            "tree_budget": self.tree_budget,
            "label": self.label,
            "sent": self.sent,
            "delta": self.delta.to_json(),
        }
        if self.point is not None:
            out["point"] = dict(self.point)
        if self.shared:
            out["shared"] = self.shared
        if self.inconsistent:
            out["inconsistent"] = list(self.inconsistent)
        if not self.settled:
            out["not_judged"] = (
                f"the server had not counted every request {SETTLE_SECONDS:g} s after the "
                "last answer"
            )
        return out


@dataclass
class ServerMetricsLog:
    """The session's Prometheus scrapes of the server's /metrics: a :class:`MetricsReader`
    and every :class:`CounterRecord`.

    ``judge`` False (several xdist workers share one server) keeps the
    deltas but draws no shared-server or consistency verdict: the suite's own
    other processes would be the "other traffic".
    """

    reader: MetricsReader
    judge: bool = True
    records: list[CounterRecord] = field(default_factory=list)

    def before(self) -> Snapshot | None:
        """The snapshot to take just before a group of requests (None when off)."""
        return self.reader.scrape()

    def after(
        self,
        before: Snapshot | None,
        *,
        scope: str,
        test: str,
        tree_budget: int | None,
        label: str,
        stats: Sequence[Any],
        serial: bool = True,
        check_stats: bool = True,
        point: Mapping[str, Any] | None = None,
    ) -> CounterRecord | None:
        """Close a group of ``len(stats)`` requests (their ``SpecStats`` or None).

        ``check_stats`` False records the deltas without the consistency verdict;
        ``point`` is the load point's JSON (see :class:`CounterRecord`).
        """
        if before is None:
            return None
        change = self._settled(before, len(stats), serial=serial)
        if change is None:
            return None
        # still busy after the wait is other traffic (judged); requests not counted are not
        settled = not _uncounted(change, len(stats))
        judge = self.judge and settled
        shared = other_traffic(change, len(stats), serial=serial) if judge else None
        inconsistent: tuple[str, ...] = ()
        if judge and check_stats and shared is None:
            inconsistent = tuple(stats_disagreement(change, RequestSums.of(stats)))
        record = CounterRecord(
            scope,
            test,
            tree_budget,
            label,
            len(stats),
            change,
            shared,
            inconsistent,
            settled,
            point=point,
        )
        self.records.append(record)
        return record

    def _settled(self, before: Snapshot, sent: int, *, serial: bool) -> CounterDelta | None:
        """The delta once the server has counted the group's requests (bounded wait).

        A server may update its counters just after it sends the last byte (vLLM
        records its statistics after handing the output over): read again until
        every request is counted and, for a serial group, nothing runs any more,
        or :data:`SETTLE_SECONDS` have passed.
        """
        deadline = time.monotonic() + SETTLE_SECONDS
        while True:
            after = self.reader.scrape()
            if after is None:
                return None
            change = delta(before, after)
            if not _lagging(change, sent, serial=serial) or time.monotonic() >= deadline:
                return change
            time.sleep(0.05)

    def shared_budgets(self) -> dict[int | None, str]:
        """Sweep and benchmark budgets another client shared the server during: the first reason."""
        out: dict[int | None, str] = {}
        for r in self.records:
            if r.shared and r.scope != "load":
                out.setdefault(r.tree_budget, r.shared)
        return out

    def by_budget(self) -> dict[int | None, CounterDelta]:
        """Sweep and benchmark deltas added per budget."""
        out: dict[int | None, CounterDelta] = {}
        for r in self.records:
            if r.scope != "load":
                seen = out.get(r.tree_budget)
                out[r.tree_budget] = r.delta if seen is None else seen.plus(r.delta)
        return out

    def to_json(self) -> dict[str, Any]:
        """What ``sweep.json`` stores under ``server_counters``."""
        return {
            "url": self.reader.url,
            "status": self.reader.status,
            "budgets": [{"tree_budget": b, **d.to_json()} for b, d in self.by_budget().items()],
            "shared": [{"tree_budget": b, "why": w} for b, w in self.shared_budgets().items()],
            "records": [r.to_json() for r in self.records],
        }


#: the former name of ``ServerMetricsLog``, kept for code that imports it
CounterLog = ServerMetricsLog


def open_log(
    setting: str | None,
    base_url: str,
    *,
    headers: Mapping[str, str] | None = None,
    judge: bool = True,
) -> ServerMetricsLog:
    """The session's log: ``setting`` is ``--ddtree-metrics-url`` (None: the default, ``off``)."""
    if setting == "off":
        reader = MetricsReader(None, status="off (--ddtree-metrics-url off)")
    else:
        reader = MetricsReader(
            setting or default_metrics_url(base_url),
            explicit=setting is not None,
            headers=dict(headers or {}),
        )
    reader.probe()
    return ServerMetricsLog(reader, judge=judge)


@dataclass
class GroupWatch:
    """Snapshots around each group of requests of one test (a sweep's budget visits).

    ``start`` before a group, ``end`` after it with the group's completions;
    warm-up rounds (negative) are not timed, so they are not watched.
    """

    log: ServerMetricsLog
    test: str
    scope: str = "sweep"
    serial: bool = True
    records: list[CounterRecord] = field(default_factory=list)
    _before: Snapshot | None = None

    def start(self, round: int, tree_budget: int | None) -> None:
        """Take the snapshot before a group (measured rounds only)."""
        self._before = self.log.before() if round >= 0 else None

    def end(
        self,
        round: int,
        tree_budget: int | None,
        completions: Sequence[Any],
        *,
        label: str | None = None,
        point: Mapping[str, Any] | None = None,
    ) -> None:
        """Take the snapshot after the group and record the delta.

        ``completions`` have a ``stats`` (``SpecStats`` or None) or are
        :class:`Counts` themselves; a load point gives its ``label`` and its JSON
        (``point``).
        """
        before, self._before = self._before, None
        default = f"round {round}" if self.scope == "sweep" else "timed rounds"
        record = self.log.after(
            before,
            scope=self.scope,
            test=self.test,
            tree_budget=tree_budget,
            label=label or default,
            stats=[c if isinstance(c, Counts) else getattr(c, "stats", None) for c in completions],
            serial=self.serial,
            # a load point's abandoned requests may finish on the server during the next one
            check_stats=self.scope != "load",
            point=point,
        )
        if record is not None:
            self.records.append(record)

    def inconsistencies(self) -> list[str]:
        """One line per group whose per-request statistics disagree with the counters."""
        return [
            f"tree_budget {r.tree_budget}, {r.label}: {why}"
            for r in self.records
            for why in r.inconsistent
        ]

    def extra_info(self) -> dict[str, Any]:
        """The deltas of this test added up, for pytest-benchmark's ``extra_info``."""
        total: CounterDelta | None = None
        for r in self.records:
            total = r.delta if total is None else total.plus(r.delta)
        out: dict[str, Any] = {} if total is None else total.to_json()
        shared = [r.shared for r in self.records if r.shared]
        if shared:
            out["shared_server"] = shared[0]
        return out


def gauge_lines(by_budget: Mapping[int | None, CounterDelta]) -> list[str]:
    """One line per budget whose server keeps its speculative figures in gauges (SGLang):
    the readings after the budget's last group, said to be gauges, not deltas."""
    from pytest_ddtree.core.budget import budget_order
    from pytest_ddtree.core.settings import budget_label

    lines = []
    for budget, d in sorted(by_budget.items(), key=lambda kv: budget_order(kv[0])):
        if not d.gauges:
            continue
        shown = ", ".join(f"{name} {value:g}" for name, value in d.gauges.items())
        lines.append(
            f"server gauges, tree_budget {budget_label(budget)}: {shown} ({GAUGES_NOTE}; "
            "they cover the server's recent window, not these requests alone)"
        )
    return lines
