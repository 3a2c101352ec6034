"""Sweep samples: one record per timed request, and its one JSON form.

The JSON form (``to_json``/``from_json``, used by ``sweep.json`` and the
pytest-xdist transport) and the JSON Schema of a sample are both derived from
the dataclass fields, so a field is spelled out once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_ddtree.core import jsonmodel
from pytest_ddtree.core.budget import budget_order
from pytest_ddtree.core.violation import Violation
from pytest_ddtree.wire.completion import Completion

#: the diagnosis verdicts that put a failure on something other than the budget: the prompt,
#: chat template or model (the target-only baseline fails too), and the serving stack
NOT_THE_BUDGETS = frozenset({"template", "server"})


@dataclass(frozen=True)
class SweepSample:
    """One timed request of a sweep, valid or not.

    ``tree_budget`` is the budget that was requested (None when the server's
    own budget was used); ``echoed_tree_budget`` what the server said it used.
    ``codes`` are the violation codes of an invalid request (empty when valid)
    and ``messages`` their one-line messages. Timing fields are seconds or
    tokens per second and may be None when the request could not measure them
    (no stream, no statistics). ``concurrent`` marks timings taken while other
    requests were in flight (pytest-xdist workers), which are not comparable
    with timings of a serial run. ``acceptance_histogram`` counts the decode rounds
    that accepted 0, 1, ... drafts, as the server reported it (field
    ``depth_source``; empty when it reports none).
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
    ) -> SweepSample:
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

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form (for ``sweep.json`` and xdist transport)."""
        return jsonmodel.to_json(self)

    @classmethod
    def from_json(cls, data: Any, *, source: str = "sample") -> SweepSample:
        """Parse :meth:`to_json` output; a bad field raises one-line ``ValueError``."""
        return jsonmodel.from_json(cls, data, source=source)

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        """The JSON Schema of one sample, from the same field list."""
        return jsonmodel.json_schema(cls)


# written only when set, so a report without a blamed or smoke request reads as before
jsonmodel.register(
    SweepSample,
    blame=jsonmodel.override(omit_if_default=True),
    smoke=jsonmodel.override(omit_if_default=True),
)


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


def merge_samples(*groups: Iterable[SweepSample]) -> list[SweepSample]:
    """Merge samples from several processes (e.g. pytest-xdist workers).

    The result is in a canonical order (round, budget, prompt, worker) so a
    merged report does not depend on which worker finished first; the sort is
    stable, so samples that tie keep their original relative order.
    """
    merged = [s for group in groups for s in group]
    merged.sort(
        key=lambda s: (
            s.round,
            s.temperature,
            budget_order(s.tree_budget),
            s.prompt_id,
            s.worker or "",
        )
    )
    return merged
