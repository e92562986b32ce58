"""Killed processes: a named array is entirely old or entirely new, debris is swept.

Each test runs a real child process, stops it at a chosen point (it prints
``paused`` and sleeps there) and kills it with SIGKILL or SIGTERM.
"""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import gradpipe
from gradpipe import ooc
from gradpipe.ooc.storage import _debris

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="process tests use /proc")

SRC = str(Path(gradpipe.__file__).parents[1])
#: a child imports gradpipe from the checkout and the rest from where this process
#: does (a machine whose packages are named by PYTHONPATH too)
PYTHONPATH = os.pathsep.join([SRC, *filter(None, [os.environ.get("PYTHONPATH")])])

PAUSE = """
import os, sys, time
def pause():
    print("paused", flush=True)
    time.sleep(120)
"""

UPDATE_CHILD = (
    PAUSE
    + """
import numpy as np
from gradpipe import ooc
from gradpipe.ooc.storage import _paged_file
path, stop_at = sys.argv[1], sys.argv[2]
X = ooc.DiskArray.open(path, writable=True)
count = [0]
real_write, real_replace = _paged_file.PagedFile.write, os.replace
def write(self, region, data):
    real_write(self, region, data)
    count[0] += 1
    if str(count[0]) == stop_at:
        pause()
def replace(src, dst):
    if stop_at == "rename":
        pause()
    real_replace(src, dst)
_paged_file.PagedFile.write = write
_paged_file.os.replace = replace
with ooc.MemoryBudget(8192):
    X.update_(1.0)
if stop_at == "done":
    pause()
"""
)


def _run_until_paused(tmp_path, code, *args, env=None):
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(code))
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "JAX_PLATFORMS": "cpu", **(env or {})}
    child = subprocess.Popen(
        [sys.executable, str(script), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    line = child.stdout.readline()
    if line.strip() != "paused":
        child.kill()
        raise AssertionError(f"child did not pause: {line!r} {child.stderr.read()[-2000:]}")
    return child


def _partials(folder):
    return sorted(p.name for p in Path(folder).iterdir() if ".partial-" in p.name)


@pytest.mark.parametrize("stop_at", ["1", "16", "32", "rename", "done"])
def test_sigkill_during_update_leaves_the_old_or_the_new_array(tmp_path, stop_at):
    path = tmp_path / "w.gpa"
    ooc.DiskArray.zeros((64, 256), path=path)  # 32 writes of 2 rows under 8 KiB
    child = _run_until_paused(tmp_path, UPDATE_CHILD, path, stop_at)
    child.send_signal(signal.SIGKILL)
    child.wait()
    values = ooc.DiskArray.open(path).to_numpy()
    want = 1.0 if stop_at == "done" else 0.0
    assert np.all(values == want), f"killed at {stop_at}: {np.unique(values)}"
    assert _partials(tmp_path) == []  # opening swept the dead writer's shadow copy


def test_update_of_a_named_file_keeps_its_permissions(tmp_path):
    path = tmp_path / "w.gpa"
    ooc.DiskArray.zeros((8, 8), path=path)
    path.chmod(0o640)
    w = ooc.DiskArray.open(path, writable=True)
    w.update_(2.0)
    assert (path.stat().st_mode & 0o777) == 0o640
    np.testing.assert_array_equal(ooc.DiskArray.open(path).to_numpy(), np.full((8, 8), 2.0))
    np.testing.assert_array_equal(w.to_numpy(), np.full((8, 8), 2.0))
    assert _partials(tmp_path) == []


WRITER_CHILD = (
    PAUSE
    + """
import numpy as np
from gradpipe import ooc
keep = ooc.DiskArray.zeros((4, 4))  # a scratch file in this process's directory
print(keep.path, flush=True)
def rows(a, b):
    if a > 0:
        pause()
    return np.zeros((b - a, 4), np.float32)
ooc.DiskArray.from_row_blocks((64, 4), np.float32, rows, path=sys.argv[1], page_shape=(8, 4))
"""
)


def test_sigkill_debris_is_swept_by_the_next_process(tmp_path):
    scratch, named = tmp_path / "scratch", tmp_path / "named.gpa"
    env = {"GRADPIPE_SCRATCH": str(scratch)}
    script = textwrap.dedent(WRITER_CHILD)
    (tmp_path / "child.py").write_text(script)
    child = subprocess.Popen(
        [sys.executable, str(tmp_path / "child.py"), str(named)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": PYTHONPATH, "JAX_PLATFORMS": "cpu", **env},
    )
    scratch_file = Path(child.stdout.readline().strip())
    assert child.stdout.readline().strip() == "paused"
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert scratch_file.exists() and _partials(tmp_path)  # what SIGKILL leaves

    # a live process's directory, and one whose pid is alive but was reused
    me = _debris.owner_tag()
    live = scratch / f"gradpipe-ooc-{me}-abcd1234"
    reused = scratch / f"gradpipe-ooc-{os.getpid()}-1-abcd1234"
    live.mkdir()
    reused.mkdir()

    nxt = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from gradpipe import ooc; ooc.DiskArray.zeros((2, 2)); "
            "ooc.DiskArray.zeros((2, 2), path=sys.argv[1])",
            str(named),
        ],
        env={**os.environ, "PYTHONPATH": PYTHONPATH, "JAX_PLATFORMS": "cpu", **env},
        capture_output=True,
        text=True,
    )
    assert nxt.returncode == 0, nxt.stderr[-2000:]
    assert not scratch_file.parent.exists()
    assert _partials(tmp_path) == []
    assert live.exists() and not reused.exists()
    assert [p.name for p in scratch.iterdir()] == [live.name]


@pytest.mark.parametrize("app_handler", [False, True])
def test_sigterm_cleans_up_like_ctrl_c(tmp_path, app_handler):
    scratch, named = tmp_path / "scratch", tmp_path / "named.gpa"
    code = WRITER_CHILD
    if app_handler:  # an application's own handler runs first and decides
        code = (
            "import signal, sys\n"
            "def bye(signum, frame):\n"
            "    print('app handler', flush=True)\n"
            "    sys.exit(3)\n"
            "signal.signal(signal.SIGTERM, bye)\n"
        ) + textwrap.dedent(code)
    (tmp_path / "child.py").write_text(textwrap.dedent(code))
    child = subprocess.Popen(
        [sys.executable, str(tmp_path / "child.py"), str(named)],
        stdout=subprocess.PIPE,
        text=True,
        env={
            **os.environ,
            "PYTHONPATH": PYTHONPATH,
            "JAX_PLATFORMS": "cpu",
            "GRADPIPE_SCRATCH": str(scratch),
        },
    )
    scratch_file = Path(child.stdout.readline().strip())
    assert child.stdout.readline().strip() == "paused"
    child.send_signal(signal.SIGTERM)
    try:
        out, _ = child.communicate(timeout=60)
    finally:
        child.kill()  # a no-op when it exited; ends it when SIGTERM did not
    assert child.returncode == (3 if app_handler else 128 + signal.SIGTERM)
    assert ("app handler" in out) == app_handler
    assert not scratch_file.parent.exists()
    assert _partials(tmp_path) == [] and not named.exists()


def test_a_live_writers_temporary_file_is_not_swept(tmp_path):
    path = tmp_path / "x.gpa"
    ooc.DiskArray.zeros((4, 4), path=path)
    mine = tmp_path / f"x.gpa.partial-{_debris.owner_tag()}-0123abcd"
    mine.write_bytes(b"in progress")
    ooc.DiskArray.open(path)
    assert mine.exists()
    mine.unlink()
