"""The checks: everything that judges one completion or compares answers.

- ``invariants``: the output-quality invariants over one ``Completion`` and across several;
- ``comparable``: whether two answers can be compared at all, and why not;
- ``diagnose``: which layer (template, server, speculation) a broken invariant blames;
- ``lossless``: whether speculation changes the temperature-0 output, and where first;
- ``state``: whether identical temperature-0 requests agree (determinism, state leaks);
- ``blame``: ``Diagnosis`` and the advice shared by ``diagnose`` and ``lossless``;
- ``distribution``: whether sampled answers follow the target-only baseline's distribution;
- ``sampling``: the seeds and temperatures a sampled check sends;
- ``margin``: the near-tie margin that tells a tie from a real disagreement.

May import: ``core`` and ``wire``. Must not import ``measure``, ``report``, the pytest layer,
the servers (``reference``, ``engines``), nor pytest.
"""
