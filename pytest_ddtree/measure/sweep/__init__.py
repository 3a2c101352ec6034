"""The tree-budget sweep: samples, plan, statistics and the run record.

Nothing here knows about pytest or pytest-benchmark. A sweep is a list of
:class:`Sample` (one per timed request, valid or not); the statistics and
the recommendation are computed from the samples alone, so a ``sweep.json``
written on one machine can be re-analysed, merged or compared anywhere.

- :mod:`~pytest_ddtree.measure.sample`: :class:`Sample` (the load test's too) and its JSON
  form; :mod:`~pytest_ddtree.measure.sweep.samples`: their order, :func:`merge_samples`;
- :mod:`~pytest_ddtree.measure.sweep.plan`: :class:`SweepPlan` and :func:`run_sweep`;
- :mod:`~pytest_ddtree.measure.sweep.statistics`: the per-budget statistics
  (:class:`~pytest_ddtree.measure.arm.ArmStats` of each budget at the point C=1), their
  places and the recommendation;
- :mod:`~pytest_ddtree.measure.sweep.depth`: acceptance by depth (:class:`DepthProfile`;
  whether deeper trees are still accepted is worded by ``report/depth_text.py``);
- :mod:`~pytest_ddtree.measure.sweep.run`: :class:`SweepRun` with its
  :class:`RunMetadata` and :class:`DiagnosisRecord`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_ddtree.core.settings import budget_label
    from pytest_ddtree.measure.sample import Sample
    from pytest_ddtree.measure.sweep.depth import DepthProfile, depth_profile
    from pytest_ddtree.measure.sweep.plan import PlannedRequest, SweepOrder, SweepPlan, run_sweep
    from pytest_ddtree.measure.sweep.run import (
        DiagnosisRecord,
        RunMetadata,
        SweepRun,
        redact_endpoint,
    )
    from pytest_ddtree.measure.sweep.samples import merge_samples
    from pytest_ddtree.measure.sweep.statistics import (
        BOOTSTRAP_RESAMPLES,
        CONFIDENCE,
        Recommendation,
        SweepSummary,
        bootstrap_ci,
        bootstrap_median_ci,
        bootstrap_median_difference,
        quantile,
        rank,
        recommend,
        summarize,
    )

#: where each name lives (a bare name: a module of this package); imported on first use, so
#: a module of the package (``bootstrap``) can be imported by one the package imports
_EXPORTS = {
    "budget_label": "pytest_ddtree.core.settings",
    "Sample": "pytest_ddtree.measure.sample",
    "DepthProfile": "depth",
    "depth_profile": "depth",
    "PlannedRequest": "plan",
    "SweepOrder": "plan",
    "SweepPlan": "plan",
    "run_sweep": "plan",
    "DiagnosisRecord": "run",
    "RunMetadata": "run",
    "SweepRun": "run",
    "redact_endpoint": "run",
    "merge_samples": "samples",
    "BOOTSTRAP_RESAMPLES": "statistics",
    "CONFIDENCE": "statistics",
    "Recommendation": "statistics",
    "SweepSummary": "statistics",
    "bootstrap_ci": "statistics",
    "bootstrap_median_ci": "statistics",
    "bootstrap_median_difference": "statistics",
    "quantile": "statistics",
    "rank": "statistics",
    "recommend": "statistics",
    "summarize": "statistics",
}

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "CONFIDENCE",
    "DepthProfile",
    "DiagnosisRecord",
    "PlannedRequest",
    "Recommendation",
    "RunMetadata",
    "Sample",
    "SweepOrder",
    "SweepPlan",
    "SweepRun",
    "SweepSummary",
    "bootstrap_ci",
    "bootstrap_median_ci",
    "bootstrap_median_difference",
    "budget_label",
    "depth_profile",
    "merge_samples",
    "quantile",
    "rank",
    "recommend",
    "redact_endpoint",
    "run_sweep",
    "summarize",
]

if not TYPE_CHECKING:  # the type checker reads the imports above, and checks every name

    def __getattr__(name: str) -> Any:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module 'pytest_ddtree.measure.sweep' has no attribute {name!r}")
        if "." not in module:
            module = f"pytest_ddtree.measure.sweep.{module}"
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value
