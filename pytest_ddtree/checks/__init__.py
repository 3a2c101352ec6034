"""The checks: everything that judges one completion or compares answers.

- ``invariants``: the output-quality invariants over one ``Completion`` and across several;
- ``comparable``: whether two answers can be compared at all, and why not;
- ``diagnose``: what a broken invariant or a lossless mismatch says about the server;
- ``distribution``: whether sampled answers follow the target-only baseline's distribution;
- ``sampling``: the seeds and temperatures a sampled check sends;
- ``margin``: the near-tie margin that tells a tie from a real disagreement.

May import: ``core`` and ``wire``. Must not import ``measure``, ``report``, the pytest layer,
the servers (``reference``, ``engines``), nor pytest.
"""
