"""A whole sweep run: its samples, the typed description of the run and the diagnoses.

:class:`RunMetadata` and :class:`DiagnosisRecord` are the one definition the
pytest layer writes, ``sweep.json`` stores and ``compare`` reads, so a key
written under one name and read under another cannot happen.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pytest_ddtree.checks.blame import RecordedBlame
from pytest_ddtree.core import jsonmodel
from pytest_ddtree.measure.sample import Sample
from pytest_ddtree.measure.sweep.statistics import SweepSummary, summarize

_SECRET_QUERY_KEYS = frozenset(
    {"key", "api_key", "apikey", "api-key", "token", "access_token", "secret", "password", "sig"}
)


def redact_endpoint(url: str) -> str:
    """The endpoint URL without credentials (user info, key-like query values)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable endpoint>"
    netloc = parts.hostname or ""
    if parts.port is not None:
        netloc = f"{netloc}:{parts.port}"
    if parts.username or parts.password:
        netloc = f"***@{netloc}"
    query = parts.query
    if query:
        pairs = [
            (k, "***" if k.lower() in _SECRET_QUERY_KEYS else v)
            for k, v in parse_qsl(query, keep_blank_values=True)
        ]
        query = urlencode(pairs, safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


class _ReadsAsMapping(Mapping[str, Any]):
    """A record that also reads like the plain JSON object it replaces."""

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError

    def __getitem__(self, key: str) -> Any:
        return self.to_json()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_json())

    def __len__(self) -> int:
        return len(self.to_json())


@dataclass
class RunMetadata(_ReadsAsMapping):
    """What describes a sweep run (all plain JSON values, secrets never included).

    ``endpoint`` is already redacted; ``server_models`` is what the server's
    ``GET /models`` lists; ``server_info`` and ``probes`` the machine's and
    the server's state (see :mod:`pytest_ddtree.measure.machine`). Keys this version
    does not know (from another version's ``sweep.json``) are kept in
    ``extra``. Reads like a mapping of the non-empty values, which is also
    its JSON form.
    """

    endpoint: str | None = None
    model: str | None = None
    dialect: str | None = None
    embedded_setup: str | None = None
    api: str | None = None
    budgets: list[int | str] = field(default_factory=list)
    budget_mode: str | None = None
    max_tokens: int | None = None
    configured_rounds: int | None = None
    configured_warmup_rounds: int | None = None
    order: str | None = None
    #: ``--ddtree-sweep``: ``adaptive`` races the budgets, ``exhaustive`` times every round
    sweep: str | None = None
    #: how many races the run ran (an adaptive sweep of one budget runs none)
    races: int | None = None
    tokenizer: str | None = None
    server_models: list[str] | None = None
    workers: int | None = None
    seed: int | None = None
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)
    #: the server's own description (``/version``, ``/get_server_info``), keys masked
    server_info: dict[str, Any] | None = None
    #: the ``--ddtree-probe`` runs, before and after the session
    probes: list[dict[str, Any]] = field(default_factory=list)
    #: the run's tests as pytest counts them (``passed``, ``failed``), failures included, so
    #: a report that shows the timed requests also says how many tests failed around them
    tests: dict[str, int] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    #: What must match for two runs to compare like for like (``compare`` warns otherwise).
    SETUP_FIELDS = ("endpoint", "embedded_setup", "model", "dialect", "server_models")

    def to_json(self) -> dict[str, Any]:
        """The plain-JSON form: every set value, then the unknown keys."""
        return jsonmodel.to_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | RunMetadata) -> RunMetadata:
        """Read a ``metadata`` object; unknown keys and odd values go to ``extra``."""
        if isinstance(data, RunMetadata):
            return dataclasses.replace(data)
        return jsonmodel.from_json(cls, data, source="metadata")


def _metadata_to_json(meta: RunMetadata) -> dict[str, Any]:
    # the JSON form leaves out what is unset, and keeps another version's keys
    out = {k: v for k, v in _metadata_fields(meta).items() if v not in (None, False, [], "")}
    for key, value in meta.extra.items():
        out.setdefault(key, value)
    return out


def _metadata_from_json(data: Mapping[str, Any], _: Any) -> RunMetadata:
    # a key this version does not know, or a value of another kind, is kept in ``extra``
    hints = typing.get_type_hints(RunMetadata)
    values: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in data.items():
        if key == "extra" or key not in hints:
            extra[key] = value
            continue
        try:
            values[key] = jsonmodel.converter.structure(value, hints[key])
        except Exception:
            extra[key] = value
    return RunMetadata(**values, extra=extra)


_metadata_fields = jsonmodel.plain_unstructure_fn(RunMetadata, omit=("extra",))
jsonmodel.converter.register_unstructure_hook(RunMetadata, _metadata_to_json)
jsonmodel.converter.register_structure_hook(RunMetadata, _metadata_from_json)


@dataclass(frozen=True)
class DiagnosisRecord(_ReadsAsMapping):
    """Which layer was found at fault for one failing test (for reports and xdist).

    Reads like a mapping of its JSON form, as the plain objects it replaces did.
    """

    nodeid: str
    #: the layer blamed (JSON ``verdict``, the key older files have)
    blame: RecordedBlame
    codes: tuple[str, ...] = ()
    tree_budget: int | None = None
    prompt_id: str | None = None
    title: str = ""
    reason: str = ""
    advice: str = ""
    baseline_codes: tuple[str, ...] = ()
    #: at a temperature-0 divergence: the target's margin there (``Margin.to_json``)
    margin: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (tuples as lists)."""
        return jsonmodel.to_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | DiagnosisRecord) -> DiagnosisRecord:
        """Read :meth:`to_json` output (unknown keys ignored, odd values as text)."""
        if isinstance(data, DiagnosisRecord):
            return data
        return jsonmodel.from_json(cls, data, source="diagnosis")


# a record that reads like a mapping is still read and written field by field
jsonmodel.register(DiagnosisRecord, blame=jsonmodel.override(rename="verdict"))


@dataclass
class SweepRun:
    """A whole sweep: the samples, what describes the run, and the diagnoses.

    ``metadata`` and ``diagnoses`` may be given as plain JSON (mappings); they
    are read into :class:`RunMetadata` and :class:`DiagnosisRecord`.
    """

    samples: list[Sample] = field(default_factory=list)
    metadata: RunMetadata = field(default_factory=RunMetadata)
    seed: int = 0
    diagnoses: list[DiagnosisRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.metadata = RunMetadata.from_json(self.metadata)
        self.diagnoses = [DiagnosisRecord.from_json(d) for d in self.diagnoses]

    def summary(self) -> SweepSummary:
        """Statistics and recommendation (deterministic for a given seed)."""
        return summarize(self.samples, seed=self.seed)
