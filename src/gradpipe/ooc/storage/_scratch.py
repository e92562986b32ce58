"""The scratch directory: where a process writes its temporary array files.

Each process writes into one private subdirectory of a scratch root
(``set_scratch_dir``, else ``$GRADPIPE_SCRATCH``, else the system temporary
directory), named with its owner tag so that the next process can tell a killed
owner's directory from a live one and sweep it (`_debris`). The directory is
removed at interpreter exit, and on SIGTERM as on Ctrl-C.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from pathlib import Path

from ._debris import SCRATCH_PREFIX, install_sigterm_cleanup, owner_tag, sweep_scratch_root

__all__ = ["get_scratch_dir", "set_scratch_dir"]

_scratch_lock = threading.Lock()
_scratch_root: Path | None = None  # set by `set_scratch_dir`; else env var / tmp
_session_dir: Path | None = None


def set_scratch_dir(path: str | os.PathLike | None) -> None:
    """Choose where new scratch files go (``None`` restores the default).

    The default is ``$GRADPIPE_SCRATCH`` when set, else the system temporary
    directory. gradpipe makes one private subdirectory there per process and
    removes it at exit.
    """
    global _scratch_root, _session_dir
    with _scratch_lock:
        _scratch_root = None if path is None else Path(path)
        _session_dir = None


def get_scratch_dir() -> Path:
    """The directory this process writes scratch files into (created on demand)."""
    global _session_dir
    with _scratch_lock:
        if _session_dir is None or not _session_dir.is_dir():
            root = _scratch_root or Path(
                os.environ.get("GRADPIPE_SCRATCH") or tempfile.gettempdir()
            )
            root.mkdir(parents=True, exist_ok=True)
            sweep_scratch_root(root)  # directories of killed processes
            install_sigterm_cleanup()
            prefix = f"{SCRATCH_PREFIX}{owner_tag()}-"
            _session_dir = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
            _session_dirs.append(_session_dir)
        return _session_dir


_session_dirs: list[Path] = []


@atexit.register
def _remove_session_dirs() -> None:
    for d in _session_dirs:
        shutil.rmtree(d, ignore_errors=True)
