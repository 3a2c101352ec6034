"""The ``Dialect`` base class: everything one server family says in its own way.

A dialect is one server family's speculative-decoding vocabulary: where a request puts
its tree budget, where the answer carries the speculation statistics and how they read
as ``SpecStats``, what those statistics do not promise, which choice fields name the
stop that fired, and the names of its ``/tokenize`` and ``/metrics``. One subclass per
family, one instance of each in the registry (``core.dialects``). Callers ask the
instance (``dialect.rounds_are_speculative_steps``, ``dialect.stop_fields``, ...) and
never compare its name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from pytest_ddtree.core.dialects.stats import SpecStats

#: no draft is deeper than this: a per-step count beyond it is malformed (and would cost
#: a histogram that long)
MAX_DEPTH = 4096


@dataclass(frozen=True)
class TokenizeShape:
    """One server family's ``/tokenize`` request: where it goes and what it sends.

    Every known answer carries ``tokens`` (a list of ids, or of
    ``{"id": ..., "piece": ...}`` objects) and/or ``count``. ``detokenize`` is the
    path of the family's ``/detokenize``.
    """

    name: str
    path: str
    text_key: str
    extra: tuple[tuple[str, Any], ...]
    with_model: bool = False
    detokenize: str = "/detokenize"

    def body(self, text: str, model: str | None) -> dict[str, Any]:
        """The JSON body asking for the tokens of ``text`` (no special tokens added)."""
        out: dict[str, Any] = {self.text_key: text, **dict(self.extra)}
        if self.with_model and model:
            out["model"] = model
        return out


@dataclass(frozen=True)
class MetricNames:
    """One engine's Prometheus names on ``/metrics`` (``wire.servermetrics`` reads them).

    ``prefix`` is the names' common prefix (``vllm``: ``vllm:...``). The speculative
    counters: drafts (``drafts``), draft tokens, accepted tokens and accepted tokens per
    draft position; None where the engine has no such counter. The load figures: the
    finished-requests counter (None: none), the running and the waiting gauge.
    ``spec_gauges`` are speculative figures the engine keeps as gauges (read as they
    stand, never differenced); ``token_counters`` its (prompt, generated) token counters
    counted per finished request; ``drafts_are_verify_steps``: its ``drafts`` counter
    adds each finished request's verify steps (comparable with the per-request sum).
    """

    prefix: str
    drafts: str | None
    draft_tokens: str | None
    accepted_tokens: str | None
    accepted_per_pos: str | None
    finished: str | None
    running: str
    waiting: str
    spec_gauges: tuple[str, ...] = ()
    token_counters: tuple[str, str] | None = None
    drafts_are_verify_steps: bool = False

    @property
    def spec(self) -> tuple[str | None, str | None, str | None, str | None]:
        """(drafts, draft tokens, accepted tokens, accepted per position)."""
        return (self.drafts, self.draft_tokens, self.accepted_tokens, self.accepted_per_pos)

    @property
    def load(self) -> tuple[str | None, str, str]:
        """(finished-requests counter or None, running gauge, waiting gauge)."""
        return (self.finished, self.running, self.waiting)


class Dialect:
    """One server family's speculative-decoding dialect (subclass per family).

    Subclasses set the class attributes that differ from these defaults and override
    ``carrier`` (detection and parsing both start from it) and ``normalise``.
    """

    #: the ``--ddtree-dialect`` value that selects it
    name: ClassVar[str] = ""
    #: one line for the docs: the server family and where its statistics sit
    summary: ClassVar[str] = ""
    #: where its statistics sit in an answer, as messages name it
    where: ClassVar[str] = ""
    #: the request field its servers read the tree budget from (``--ddtree-budget-field``
    #: syntax), or None when its servers take the budget only at start-up
    budget_field: ClassVar[str | None] = None
    #: body fields a server of this dialect needs before it reports its statistics (sent
    #: only to a server known to speak it: another may reject an unknown field)
    request_fields: ClassVar[Mapping[str, Any]] = MappingProxyType({})
    #: whether a request in this dialect asks for statistics at all (the ``none`` choice:
    #: configured off)
    reports_statistics: ClassVar[bool] = True
    #: whether it reads ``--ddtree-stats-map`` (its statistics are wherever the map says)
    needs_stats_map: ClassVar[bool] = False
    #: detected after every other dialect: its carrier is generic enough that a server
    #: could send it beside its own statistics block
    detect_last: ClassVar[bool] = False
    #: whether the reference server (``python -m pytest_ddtree.reference``) can emit it
    reference_emits: ClassVar[bool] = False

    # --------------------------------------------------- what its statistics promise
    #: the statistics invariants its engine does not promise, said once a run (None: all
    #: hold)
    unstated: ClassVar[str | None] = None
    #: its decode rounds count only the steps that verified drafts, taken before the stop
    #: is applied (vLLM): rounds x acceptance is not the answer's length; the
    #: speculative-step bounds are checked instead
    rounds_are_speculative_steps: ClassVar[bool] = False
    #: it counts each verify step whole even where a stop or the length limit cut it, and
    #: the prefill's token apart (SGLang): its histogram bounds the answer's length from
    #: both sides instead of equalling it
    steps_counted_whole: ClassVar[bool] = False
    #: the raw field present only when the engine drafted (its statistics come anyway);
    #: None: the statistics themselves say whether it speculated
    drafted_key: ClassVar[str | None] = None

    # ----------------------------------------------------------------- stop evidence
    #: the choice fields naming the stop that fired (the stop string, or the stop token's
    #: id), in the order read
    stop_fields: ClassVar[tuple[str, ...]] = ()
    #: whether a null stop field means the model's own end-of-sequence (else it only says
    #: that no stop of the request's list fired)
    null_stop_is_eos: ClassVar[bool] = False
    #: whether its stop field names the end-of-sequence token too (a stop token equal to the
    #: model's end-of-sequence is the model's own end, not a stop of the request's list)
    stop_names_eos: ClassVar[bool] = False

    # ------------------------------------------------------------ /tokenize, /metrics
    #: its ``/tokenize`` request, if the family has one
    tokenize: ClassVar[TokenizeShape | None] = None
    #: its Prometheus names, if it serves ``/metrics`` with speculative figures
    metrics: ClassVar[MetricNames | None] = None

    def carrier(self, obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The object in one response (or stream chunk) holding this dialect's statistics,
        or None: detection asks this of every dialect."""
        return None

    def claims(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` carries this dialect's statistics."""
        return self.carrier(obj) is not None

    def claims_without_statistics(self, objects: Sequence[Any]) -> bool:
        """Whether ``objects`` come from this family although they carry no statistics
        (asked after no dialect claimed them): a server that sends its statistics only
        when asked is still told by its own fields."""
        return False

    def normalise(self, raw: Mapping[str, Any]) -> SpecStats:
        """The statistics ``raw`` (what ``carrier`` found) as ``SpecStats``."""
        raise NotImplementedError(f"dialect {self.name!r} reads no statistics block")

    def parse(
        self, objects: Sequence[Any], stats_map: Mapping[str, str] | None = None
    ) -> SpecStats | None:
        """The statistics in ``objects`` (a response, or a stream's chunks; the newest
        that carries them wins), or None when none does."""
        for obj in reversed(objects):
            if isinstance(obj, Mapping):
                raw = self.carrier(obj)
                if raw is not None:
                    return self.normalise(raw)
        return None

    def malformed(self, raw: Mapping[str, Any]) -> list[tuple[str, Any]]:
        """(field, value) of every statistics field present with a value of the wrong
        type that ``normalise`` left out, for the stats check to name."""
        return []

    def __repr__(self) -> str:
        return f"<dialect {self.name}>"


#: every registered dialect by name, in registration order (``core.dialects`` fills it)
_BY_NAME: dict[str, Dialect] = {}


def register(*found: Dialect) -> Mapping[str, Dialect]:
    """Add ``found`` to the registry (by name, in order); the registry, read-only."""
    for dialect in found:
        if not dialect.name or dialect.name in _BY_NAME:
            raise ValueError(f"dialect name {dialect.name!r} is empty or taken")
        _BY_NAME[dialect.name] = dialect
    return MappingProxyType(_BY_NAME)


def lookup(name: str | None) -> Dialect | None:
    """The dialect called ``name``, or None (``auto``, None, or an unknown name)."""
    return _BY_NAME.get(name or "")


# ------------------------------------------------------- helpers for the parsers


def num(value: Any) -> float | None:
    """``value`` as a finite float, or None (booleans are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def integer(value: Any) -> int | None:
    """``value`` as an int when it is a whole finite number, or None."""
    f = num(value)
    return int(f) if f is not None and f == int(f) else None


def histogram(value: Any) -> tuple[int, ...] | None:
    """``value`` as an acceptance histogram (a non-empty list of integers >= 0), or None."""
    if not isinstance(value, list) or not value:
        return None
    out = tuple(integer(v) for v in value)
    if any(v is None or v < 0 for v in out):
        return None
    return tuple(v for v in out if v is not None)


def depth(raw: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    """The SpecStats fields of a histogram at ``raw[key]`` (``where`` names ``raw``);
    a malformed one keeps its source named and no histogram, for the stats check."""
    if key not in raw or raw[key] is None:
        return {}
    return {"acceptance_histogram": histogram(raw[key]), "depth_source": f"{where}.{key}"}
