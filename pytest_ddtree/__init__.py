"""pytest-ddtree: validate and benchmark speculative-decoding LLM endpoints.

Every response is checked against output-quality invariants before any
timing is recorded, so a run that measured garbage fails instead of
producing a misleading number.
"""

from __future__ import annotations

__version__ = "0.1.0"
