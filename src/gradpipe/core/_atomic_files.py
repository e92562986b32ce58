"""Files written so that readers never see them half written: `write_atomic`
replaces a file at once, `write_new` creates one only if it does not exist yet (of
several writers exactly one wins). Both write and sync a temporary file beside the
target first."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["write_atomic", "write_new"]


def _synced_temporary(path: Path, data: bytes) -> str:
    """A new file beside ``path`` holding ``data``, synced to disk; its name."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one."""
    tmp = _synced_temporary(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_new(path: Path, data: bytes) -> bool:
    """Create ``path`` holding ``data`` unless it exists; whether it was created.

    The file is written under a temporary name and hard-linked into place: the link
    fails if ``path`` exists (so of several writers exactly one creates it), and a
    reader never sees a partly written file.
    """
    tmp = _synced_temporary(path, data)
    try:
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError:  # a filesystem without hard links: create exclusively instead
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
        return True
    finally:
        Path(tmp).unlink(missing_ok=True)
