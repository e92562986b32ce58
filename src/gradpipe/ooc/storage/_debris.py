"""What a killed process leaves on disk, and how the next one clears it away.

A process writes scratch files into its own directory and every named file under a
temporary ``.partial-`` name first (`_paged_file`). Ctrl-C, an exception or a normal
exit removes both; SIGKILL cannot be caught, so a killed process leaves them
behind. Each such name carries its owner: the process id and the process's start
time (``gradpipe-ooc-<pid>-<start>-…`` and ``<name>.partial-<pid>-<start>-…``), and
the next process sweeps away those whose owner is gone. The start time is what
makes this safe: process ids are reused, and a live process that happens to get a
dead one's id has another start time, so its files are never taken for debris.

SIGTERM is made to clean up as Ctrl-C does: when gradpipe first writes a file, it
installs (from the main thread only, and only over the default action or a Python
handler, which it calls first) a handler that exits by ``SystemExit``, so ``finally``
blocks and ``atexit`` remove this process's files.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import threading
import uuid
from pathlib import Path
from types import FrameType

__all__ = [
    "install_sigterm_cleanup",
    "owner_tag",
    "sweep_partials",
    "sweep_scratch_root",
]

SCRATCH_PREFIX = "gradpipe-ooc-"
_SCRATCH_RE = re.compile(rf"^{SCRATCH_PREFIX}(\d+)-(\d+)-")
_OLD_SCRATCH_RE = re.compile(rf"^{SCRATCH_PREFIX}(\d+)-[^-]+$")  # before owner tags
_PARTIAL_RE = re.compile(r"\.partial-(\d+)-(\d+)-[0-9a-f]+$")


def _start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), or None if unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        # the command name (field 2) may contain spaces; fields after it are plain
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def owner_tag() -> str:
    """``<pid>-<start time>`` of this process (start 0 where it cannot be known)."""
    return _tag_of(os.getpid())


@functools.lru_cache(maxsize=1)
def _tag_of(pid: int) -> str:
    # read once a process (a forked child asks with its own pid); each scratch file
    # and each file written under a temporary name carries it
    return f"{pid}-{_start_time(pid) or 0}"


def _owner_gone(pid: int, start: int | None) -> bool:
    """Whether the process that wrote a name tagged ``pid``/``start`` has ended."""
    if not _alive(pid):
        return True
    if start is None or start == 0:
        return False  # cannot tell a reused id from the owner: keep
    now = _start_time(pid)
    return now is not None and now != start


def sweep_scratch_root(root: Path) -> list[Path]:
    """Remove the scratch directories in ``root`` of processes that have ended."""
    removed = []
    with contextlib.suppress(OSError):
        entries = list(os.scandir(root))
        for entry in entries:
            m = _SCRATCH_RE.match(entry.name)
            old = None if m else _OLD_SCRATCH_RE.match(entry.name)
            if not (m or old) or not entry.is_dir(follow_symlinks=False):
                continue
            if m:
                pid, start = int(m[1]), int(m[2])
            else:
                assert old is not None  # one of the two names matched
                pid, start = int(old[1]), None
            if _owner_gone(pid, start):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(Path(entry.path))
    return removed


def sweep_partials(final: str) -> list[str]:
    """Remove ``<final>.partial-…`` files whose writing process has ended."""
    folder, base = os.path.split(final)
    removed = []
    with contextlib.suppress(OSError):
        for name in os.listdir(folder or "."):
            if not name.startswith(base + ".partial-"):
                continue
            m = _PARTIAL_RE.search(name)
            if m and _owner_gone(int(m[1]), int(m[2])):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(folder, name))
                removed.append(os.path.join(folder, name))
    return removed


# ---------------------------------------------------------------- SIGTERM

_installed = [False]


def install_sigterm_cleanup() -> bool:
    """Make SIGTERM unwind like Ctrl-C (once; main thread only). Returns whether
    gradpipe's handler is in place."""
    if _installed[0]:
        return True
    if threading.current_thread() is not threading.main_thread():
        return False
    previous = signal.getsignal(signal.SIGTERM)
    if previous is signal.SIG_IGN or previous is None:
        return False  # ignored on purpose, or set outside Python: leave it alone

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        if callable(previous):
            previous(signum, frame)  # the application's handler decides first
            return
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_sigterm)
    _installed[0] = True
    return True


def partial_name(final: str) -> str:
    """The temporary name ``final`` is written under: its owner process, then random."""
    return f"{final}.partial-{owner_tag()}-{uuid.uuid4().hex[:8]}"
