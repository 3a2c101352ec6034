"""``python -m pytest_ddtree.engines``: serve one engine, or install one."""

from __future__ import annotations

from pytest_ddtree.engines.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
