"""One timed request of any arm of the measurement, and its one JSON form.

An arm is one point of the experiment: a tree budget × a load point. The budget sweep
measures its arms one request at a time (the load point C=1, ``SERIAL``); the load test at
the load points it is given. Both record each request as a :class:`Sample`, with one set of
names and one decode-rate formula (``wire.completion.decode_rate``): a field one pipeline
does not measure keeps its default.

The JSON form (``to_json``/``from_json``, used by ``sweep.json`` and the pytest-xdist
transport) and the JSON Schema of a sample are both derived from the dataclass fields, so
a field is spelled out once. Samples written before the two pipelines shared this type
still read: the load's former names are mapped (``FORMER_LOAD_NAMES``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_ddtree.core import jsonmodel
from pytest_ddtree.core.violation import Violation
from pytest_ddtree.measure.load.arrivals import LoadPoint
from pytest_ddtree.wire.completion import Completion, decode_rate

__all__ = ["FORMER_LOAD_NAMES", "NOT_THE_BUDGETS", "SERIAL", "Sample"]

#: the diagnosis verdicts that put a failure on something other than the budget: the prompt,
#: chat template or model (the target-only baseline fails too), and the serving stack
NOT_THE_BUDGETS = frozenset({"template", "server"})

#: the load point of the serial sweep: one request at a time
SERIAL = LoadPoint("concurrency", 1)

#: the names a load sample's fields had before the sweep and the load shared one sample
#: type (the JSON keys of the files and worker payloads written then), and today's
FORMER_LOAD_NAMES = {
    "e2e": "end_to_end",
    "output_tokens": "completion_tokens",
    "acceptance": "mean_acceptance_length",
    "drafted": "drafted_tokens",
    "accepted": "accepted_tokens",
    "run": "round",
}


@dataclass(frozen=True)
class Sample:
    """One timed request of one arm (a tree budget × a load point), valid or not.

    ``tree_budget`` is the budget that was requested (None when the server's own budget was
    used); ``echoed_tree_budget`` what the server said it used. ``point`` is the load point
    (None for the serial sweep: ``load_point`` is then ``SERIAL``). ``round`` is the
    repetition: the sweep's round, or which run of its budget at the load point (a raced
    budget is sent in several runs).
    ``codes`` are the violation codes of an invalid request (empty when valid); the sweep
    keeps their one-line ``messages``, the load the first violation's ``evidence`` and the
    transport ``error``. Timing fields are seconds or tokens per second and may be None when
    the request could not measure them (no stream, no statistics); the decode rate is the
    one formula of ``wire.completion.decode_rate``, and ``tpot`` its inverse.
    ``concurrent`` marks sweep timings taken while other requests were in flight
    (pytest-xdist workers), which are not comparable with timings of a serial run.
    ``acceptance_histogram`` counts the decode rounds that accepted 0, 1, ... drafts, as the
    server reported it (field ``depth_source``; empty when it reports none).

    The load's own figures: ``start`` (wall-clock epoch of the send), ``gaps`` (between
    content events), ``server_ttft`` (the server's own TTFT) and ``withheld`` (timing-based
    checks not judged because the client was saturated).
    """

    tree_budget: int | None
    prompt_id: str
    round: int
    valid: bool
    codes: tuple[str, ...] = ()
    messages: tuple[str, ...] = ()
    completion_tokens: int | None = None
    ttft: float | None = None
    decode_tokens_per_second: float | None = None
    end_to_end: float | None = None
    mean_acceptance_length: float | None = None
    decode_rounds: int | None = None
    server_tokens_per_second: float | None = None
    echoed_tree_budget: int | None = None
    worker: str | None = None
    concurrent: bool = False
    acceptance_rate: float | None = None
    #: draft tokens the server reported making (None: not reported)
    drafted_tokens: int | None = None
    acceptance_histogram: tuple[int, ...] = ()
    depth_source: str | None = None
    #: the drift check: "start" (first measurement of the first budget), "end" (its repeat)
    drift_mark: str | None = None
    #: the sampling temperature (0 in reports written before temperatures were recorded)
    temperature: float = 0.0
    #: the request's sampling seed above temperature 0 (None: none was sent)
    seed: int | None = None
    #: whether the speculative statistics asked for came back (None: not asked, or the
    #: request failed)
    spec_reported: bool | None = None
    #: the layer the diagnosis of an invalid request blamed (a verdict: ``template``,
    #: ``server``, ``speculation``, ``undetermined``); None when valid or not diagnosed
    blame: str | None = None
    #: the untimed smoke request sent once before a prompt is timed (at the smallest budget)
    smoke: bool = False
    #: the load point the request was sent at (None: the serial sweep, one request at a
    #: time, the point ``SERIAL``; see ``load_point``)
    point: LoadPoint | None = None
    #: wall-clock epoch of the send (the load's; 0 in the sweep)
    start: float = 0.0
    #: gaps between consecutive content events, seconds (the load's)
    gaps: tuple[float, ...] = ()
    #: draft tokens the server reported accepted (None: not reported)
    accepted_tokens: int | None = None
    #: the transport error of a request that did not complete, and the first violation
    #: in full (the load's)
    error: str | None = None
    evidence: str = ""
    #: the server's own time to first content (``ddtree_stats.ttft_ms``), seconds
    server_ttft: float | None = None
    #: timing-based checks not judged because the client was saturated at this point
    withheld: tuple[str, ...] = ()
    #: the prompt depth in tokens the request was built at (``--ddtree-context``; None: the
    #: prompt's own length)
    context_depth: int | None = None

    @property
    def against_budget(self) -> bool:
        """Whether this invalid request counts against its budget (its timed requests
        invalid, the budget never recommended). Not when its diagnosis puts the failure
        elsewhere (``NOT_THE_BUDGETS``: the prompt, template or model; the serving stack); and
        an untimed smoke request only when the failure is blamed on speculation: it is no timed
        request of the budget, whatever the budget it went to."""
        if self.valid or self.blame in NOT_THE_BUDGETS:
            return False
        return not self.smoke or self.blame == "speculation"

    @classmethod
    def from_completion(
        cls,
        completion: Completion,
        violations: Sequence[Violation],
        *,
        round: int,
        worker: str | None = None,
        concurrent: bool = False,
        prompt_id: str | None = None,
        blame: str | None = None,
        smoke: bool = False,
    ) -> Sample:
        """Build a sample from a finished request and the violations it broke (``blame``:
        the verdict of their diagnosis, when one was made)."""
        stats = completion.stats
        codes: list[str] = []
        for v in violations:
            if v.code not in codes:
                codes.append(v.code)
        pid = prompt_id or completion.request.prompt_id or "prompt"
        return cls(
            tree_budget=completion.request.tree_budget,
            prompt_id=pid,
            round=round,
            valid=not violations,
            codes=tuple(codes),
            messages=tuple(v.message for v in violations),
            completion_tokens=_int(completion.completion_tokens),
            ttft=_finite(completion.ttft),
            decode_tokens_per_second=_finite(completion.decode_tokens_per_second),
            end_to_end=_finite(completion.end_to_end),
            mean_acceptance_length=None if stats is None else _finite(stats.mean_acceptance_length),
            decode_rounds=None if stats is None else _int(stats.decode_rounds),
            server_tokens_per_second=(
                None if stats is None else _finite(stats.server_tokens_per_second)
            ),
            echoed_tree_budget=None if stats is None else _int(stats.tree_budget),
            worker=worker,
            concurrent=concurrent,
            acceptance_rate=None if stats is None else _finite(stats.acceptance_rate),
            drafted_tokens=None if stats is None else _int(stats.num_draft_tokens),
            acceptance_histogram=() if stats is None else stats.acceptance_histogram or (),
            depth_source=None if stats is None else stats.depth_source,
            temperature=_finite(completion.request.temperature) or 0.0,
            seed=_int(completion.request.body.get("seed")),
            spec_reported=completion.speculation_reported,
            blame=blame if violations else None,
            smoke=smoke,
            accepted_tokens=None if stats is None else _int(stats.num_accepted_draft_tokens),
        )

    @property
    def server_client_ratio(self) -> float | None:
        """Server-reported decode rate over the client-measured one."""
        s, c = self.server_tokens_per_second, self.decode_tokens_per_second
        if s is None or c is None or c <= 0:
            return None
        ratio = s / c
        # a rate so close to zero that the ratio overflows says nothing (and JSON has no inf)
        return ratio if math.isfinite(ratio) else None

    @property
    def load_point(self) -> LoadPoint:
        """The load point of the sample's arm (``SERIAL`` for the sweep)."""
        return SERIAL if self.point is None else self.point

    @property
    def seconds(self) -> float:
        """Seconds from the send to the last byte (0 when not measured)."""
        return self.end_to_end or 0.0

    @property
    def end(self) -> float:
        """Wall-clock time of the last byte (the load's)."""
        return self.start + self.seconds

    @property
    def tpot(self) -> float | None:
        """Seconds per output token after the first content event: the inverse of the
        decode rate; None where the request has none."""
        rate = self.decode_tokens_per_second
        return 1.0 / rate if rate is not None and rate > 0 else None

    @property
    def max_gap(self) -> float | None:
        """The request's worst inter-event gap (its ITL against an SLO)."""
        return max(self.gaps) if self.gaps else None

    def slo_metrics(self) -> dict[str, float | None]:
        """The per-request values an SLO judges."""
        return {"ttft": self.ttft, "itl": self.max_gap, "tpot": self.tpot, "e2e": self.end_to_end}

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form (for ``sweep.json`` and xdist transport)."""
        return jsonmodel.to_json(self)

    @classmethod
    def from_json(cls, data: Any, *, source: str = "sample") -> Sample:
        """Parse :meth:`to_json` output (or a former load sample's); a bad field raises
        one-line ``ValueError``."""
        return jsonmodel.from_json(cls, data, source=source)

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        """The JSON Schema of one sample, from the same field list."""
        return jsonmodel.json_schema(cls)


def _upgrade(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """A sample as today's reader reads it: a former load sample's names mapped
    (``FORMER_LOAD_NAMES``), with the figures it did not carry derived from those it did
    (its decode rate by the one formula, the first event taken as one token; its
    acceptance rate from its draft counts)."""
    if not any(old in data for old in FORMER_LOAD_NAMES):
        return data
    out = {FORMER_LOAD_NAMES.get(k, k): v for k, v in data.items()}
    if out.get("prompt_id") is None:
        out["prompt_id"] = "prompt"
    e2e, ttft = _finite(out.get("end_to_end")), _finite(out.get("ttft"))
    if "decode_tokens_per_second" not in out and e2e is not None and ttft is not None:
        seconds = e2e - ttft if out.get("gaps") else None
        out["decode_tokens_per_second"] = decode_rate(
            _int(out.get("completion_tokens")), None, seconds
        )
    drafted, accepted = _int(out.get("drafted_tokens")), _int(out.get("accepted_tokens"))
    if "acceptance_rate" not in out and drafted and drafted > 0 and accepted is not None:
        out["acceptance_rate"] = accepted / drafted
    return out


#: the fields written only when set: a sweep sample reads as it did before the load's
#: fields joined it
WHEN_SET: tuple[str, ...] = ("blame", "smoke", "point", "start", "gaps", "accepted_tokens")
WHEN_SET += ("error", "evidence", "server_ttft", "withheld", "context_depth")
_when_set: dict[str, Any] = {name: jsonmodel.override(omit_if_default=True) for name in WHEN_SET}
jsonmodel.register(Sample, upgrade=_upgrade, **_when_set)


def _finite(value: Any) -> float | None:
    # Servers report whatever they like; NaN or a string must not reach the
    # statistics or break the JSON report.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value
