"""Every code block of the README and the documentation runs as written.

Each page runs in a fresh process, in an empty temporary directory, its blocks in
order: ```python blocks in one namespace (so a block may use what an earlier one
defined), ```bash blocks with ``bash -e`` in the same directory. Output-only blocks
(```text, ```json) are shown, not run. A block that cannot run here is preceded by
an HTML comment that says why, which the page source keeps:

    <!-- not run: installs from PyPI; the tests run the checkout -->

A block preceded by ``<!-- file: NAME -->`` is a file the page's reader would save:
it is written under NAME (for a server or a later block to import), and a Python
one also runs. The working directory is on ``sys.path``, as in ``python`` started there.
A failing block fails the test, naming the page and the line of the block.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    "README.md",
    *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md")),
]
RUN = {"python": "python", "py": "python", "bash": "bash", "sh": "bash", "shell": "bash"}
OUTPUT = {"text", "json", "console-output", "output"}
FENCE = re.compile(r"^(`{3,})\s*([\w+-]*)\s*$")
MARK = re.compile(r"^<!--\s*(not run|file):\s*(.*?)\s*-->\s*$")
#: A page that builds or serves components needs their extras (pydantic, starlette):
#: the out-of-core pages run without them (`make test-device`, on a machine that
#: has only what the out-of-core suite needs).
COMPONENTS = re.compile(
    r"gradpipe[ .](serve|component)|from gradpipe import [^\n]*(serve|component)"
)

RUNNER = r"""
import json, os, subprocess, sys, traceback
blocks = json.load(open(sys.argv[1]))
sys.path.insert(0, os.getcwd())  # as `python` in that directory: the page's files import
ns = {"__name__": "__main__"}
for b in blocks:
    where = f"{b['page']}, the {b['lang']} block at line {b['line']}"
    try:
        if b["file"]:
            with open(b["file"], "w") as f:
                f.write(b["source"])
        if b["lang"] == "python":
            exec(compile(b["source"], f"{b['page']}:{b['line']}", "exec"), ns)
        elif not b["file"]:
            subprocess.run(["bash", "-e", "-o", "pipefail", "-c", b["source"]], check=True,
                           stdin=subprocess.DEVNULL)
    except BaseException:
        sys.stdout.flush()
        traceback.print_exc()
        print(f"\nSNIPPET FAILED: {where}", file=sys.stderr)
        sys.exit(1)
    sys.stdout.flush()
"""


def parse(page: str) -> list[dict]:
    """The page's fenced blocks: language, first line, source, marker."""
    lines = (ROOT / page).read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang, start = m.group(1), m.group(2).lower(), i + 1
        end = next(j for j in range(start, len(lines)) if lines[j].strip() == fence)
        prev = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mark = MARK.match(prev.strip())
        blocks.append(
            {
                "page": page,
                "line": start,
                "lang": lang,
                "source": "\n".join(lines[start:end]) + "\n",
                "not_run": mark.group(2) if mark and mark.group(1) == "not run" else None,
                "file": mark.group(2) if mark and mark.group(1) == "file" else None,
            }
        )
        i = end + 1
    return blocks


@pytest.mark.parametrize("page", PAGES)
def test_page_blocks_run(page: str, tmp_path: Path, snippet_tally: dict) -> None:
    if COMPONENTS.search((ROOT / page).read_text()):
        pytest.importorskip("pydantic")
        pytest.importorskip("starlette")
    blocks = parse(page)
    for b in blocks:
        where = f"{page}, block at line {b['line']}"
        assert b["lang"] in RUN or b["lang"] in OUTPUT, (
            f"{where}: mark its language: python or bash (run), text or json (output only)"
        )
        if b["not_run"] is not None:
            assert b["not_run"], f"{where}: say why it is not run: <!-- not run: REASON -->"
    runnable = [
        {**b, "lang": RUN[b["lang"]]} for b in blocks if b["lang"] in RUN and b["not_run"] is None
    ]
    snippet_tally[page] = {
        "ran": len(runnable),
        "output": sum(b["lang"] in OUTPUT for b in blocks),
        "not_run": sum(b["not_run"] is not None for b in blocks),
    }
    if not runnable:
        return
    (tmp_path / "blocks.json").write_text(json.dumps(runnable))
    (tmp_path / "runner.py").write_text(RUNNER)
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.setdefault("JAX_PLATFORMS", "cpu")
    env["MPLBACKEND"] = "Agg"
    log = tmp_path / "output.txt"
    with log.open(
        "w"
    ) as out:  # a file, not a pipe: a server the page leaves would hold a pipe open
        proc = subprocess.Popen(
            [sys.executable, str(tmp_path / "runner.py"), str(tmp_path / "blocks.json")],
            cwd=work,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: a server the page starts dies with it
        )
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            pass
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    output = log.read_text()[-6000:]
    assert proc.returncode != -signal.SIGKILL, (
        f"{page}: its blocks did not finish in 120 s\n{output}"
    )
    assert proc.returncode == 0, output
