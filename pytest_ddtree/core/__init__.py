"""The shared vocabulary: the data every layer speaks, and no I/O.

- ``settings``: ``Settings`` (with ``Timeout`` and ``Lossless``) and the parsers that turn an
  option, an ini key or an environment variable into a value or a one-line ``SettingsError``;
- ``options``: the ``OPTIONS`` table that defines every option once, its resolution into one
  ``Settings`` and the ``@pytest.mark.ddtree`` keywords;
- ``violation``: ``Violation`` and ``InvariantError``, what every check reports;
- ``codes``: the stable invariant codes and the layer each belongs to;
- ``expectation``: ``Expectation``, what a prompt expects of its answer;
- ``prompts``: prompt set files (JSON or JSON Lines), read and validated;
- ``slo``: ``SLO`` and its parser;
- ``wording``: ``percent``, how a fraction that a constant defines is written in text;
- ``dialects``: one plug-in per server family's statistics dialect, their registry, and
  ``SpecStats``, the statistics they read.

May import: the standard library and the project's runtime dependencies. Must not import any
other folder of ``pytest_ddtree`` (every layer imports this one), nor pytest.
"""

from __future__ import annotations

__version__ = "0.1.0"
