"""pytest hooks and fixtures of pytest-ddtree (logic lives in other modules)."""

from __future__ import annotations
