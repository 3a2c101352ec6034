"""The measurements: timings, budget sweeps, load and the machine they ran on.

- ``bench``: one timed request, validated before its timing counts;
- ``sweep``: the tree-budget sweep (samples, plan, statistics, the race, the run record);
- ``load``: latency under concurrency or request rate (arrivals, runner, per-point statistics);
- ``machine``: what the client machine and the server were while they were measured.

May import: ``core``, ``wire`` and ``checks``. Must not import ``report``, the pytest layer,
the servers (``reference``, ``engines``), nor pytest.
"""
