"""The pytest layer: hooks' helpers, fixtures, the session and the run's end.

- ``session``: the per-run state (``settings_of``, the worker payload, the merge on the
  controller) and the session-finish work;
- ``collection``: parametrisation by budget and temperature, the ``ddtree_*`` markers;
- ``runtime``: the endpoint a run talks to (an embedded reference server or a URL), its
  client, token counter and counters log;
- ``analysis``: the sweep's, the race's and the load's verdicts at the end of the run, and
  the report written from them;
- ``summary``: the terminal summary;
- ``integrations``: pytest-benchmark, JUnit XML and xdist;
- ``fixtures``: the objects the ``ddtree_*`` fixtures return, thin shells over ``measure`` and
  ``checks``;
- ``bundle``: the bundled suite (``ddtree-suite``, ``pytest --pyargs pytest_ddtree.suite``);
- ``_guard``: SIGTERM handled like Ctrl-C, the transport counters made visible.

The hooks themselves are in ``pytest_ddtree.plugin`` (the ``pytest11`` entry point).

May import: every other folder, the servers (``reference``, ``engines``) and pytest. This is the
only layer that imports pytest; nothing below imports it.
"""
