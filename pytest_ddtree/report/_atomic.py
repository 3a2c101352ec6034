"""Atomic file writes: a reader never sees a half-written report."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to a temporary file beside ``path``, then rename it into place.

    ``os.replace`` is atomic on POSIX and Windows when both names are on the
    same file system, which a sibling temporary file guarantees.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        # mkstemp creates 0600; a report is an ordinary file, readable as the umask allows
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return target


def ensure_writable_dir(path: str | os.PathLike[str]) -> str | None:
    """Create ``path`` if needed; return why it cannot hold a report, or None if it can."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        return "exists and is not a directory"
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot create it ({exc.strerror or exc})"
    if not os.access(target, os.W_OK | os.X_OK):
        return "is not writable"
    return None
