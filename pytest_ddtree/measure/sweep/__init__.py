"""The tree-budget sweep: samples, plan, statistics and the run record.

Nothing here knows about pytest or pytest-benchmark. A sweep is a list of
:class:`Sample` (one per timed request, valid or not); the statistics and
the recommendation are computed from the samples alone, so a ``sweep.json``
written on one machine can be re-analysed, merged or compared anywhere.

- :mod:`~pytest_ddtree.measure.sample`: :class:`Sample` (the load test's too) and its JSON
  form; :mod:`~pytest_ddtree.measure.sweep.samples`: their order, :func:`merge_samples`;
- :mod:`~pytest_ddtree.measure.sweep.plan`: :class:`SweepPlan` and :func:`run_sweep`;
- :mod:`~pytest_ddtree.measure.sweep.statistics`: bootstrap intervals, per-budget
  statistics and the recommendation;
- :mod:`~pytest_ddtree.measure.sweep.depth`: acceptance by depth (:class:`DepthProfile`) and
  whether deeper trees are still accepted (:func:`deeper_line`);
- :mod:`~pytest_ddtree.measure.sweep.run`: :class:`SweepRun` with its
  :class:`RunMetadata` and :class:`DiagnosisRecord`.
"""

from __future__ import annotations

from pytest_ddtree.core.settings import budget_label
from pytest_ddtree.measure.sample import Sample
from pytest_ddtree.measure.sweep.depth import DepthProfile, deeper_line, depth_profile
from pytest_ddtree.measure.sweep.plan import PlannedRequest, SweepOrder, SweepPlan, run_sweep
from pytest_ddtree.measure.sweep.run import DiagnosisRecord, RunMetadata, SweepRun, redact_endpoint
from pytest_ddtree.measure.sweep.samples import merge_samples
from pytest_ddtree.measure.sweep.statistics import (
    BOOTSTRAP_RESAMPLES,
    CONFIDENCE,
    BudgetStats,
    Recommendation,
    SweepSummary,
    bootstrap_ci,
    bootstrap_median_ci,
    bootstrap_median_difference,
    budget_stats,
    quantile,
    rank,
    recommend,
    summarize,
)

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "CONFIDENCE",
    "BudgetStats",
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
    "budget_stats",
    "deeper_line",
    "depth_profile",
    "merge_samples",
    "quantile",
    "rank",
    "recommend",
    "redact_endpoint",
    "run_sweep",
    "summarize",
]
