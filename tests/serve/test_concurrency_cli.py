"""Many clients at once, and the `gradpipe call` command."""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from serve_settings import TOKEN, json_array

from gradpipe.serve import RemoteComponent

N_CLIENTS, N_REQUESTS = 16, 50


def test_concurrent_mixed_requests(server_url, local):
    rng = np.random.default_rng(2)
    cases = []
    for size in (3, 5, 8, 3):
        inputs = {
            "x": rng.normal(size=size).astype(np.float32),
            "w": np.float32(rng.normal()),
            "p": {"a": rng.normal(size=size).astype(np.float32)},
            "n": int(size % 3),
        }
        cot = {"y": rng.normal(size=size).astype(np.float32), "s": np.float32(1.0)}
        tan = {"x": rng.normal(size=size).astype(np.float32)}
        cases.append({
            "inputs": inputs, "cot": cot, "tan": tan,
            "apply": local.apply(inputs),
            "vjp": local.vjp(inputs, ["x", "w"], ["y", "s"], cot),
            "jvp": local.jvp(inputs, ["x"], ["y", "s"], tan),
        })  # fmt: skip

    def run(worker: int) -> int:
        remote = RemoteComponent(server_url, token=TOKEN,
                                 encoding="binary" if worker % 2 else "json")  # fmt: skip
        checked = 0
        try:
            for i in range(N_REQUESTS):
                case = cases[(worker + i) % len(cases)]
                kind = ("apply", "vjp", "jvp", "handle")[(worker * 7 + i) % 4]
                if kind == "apply":
                    got, want = remote.apply(case["inputs"]), case["apply"]
                elif kind == "jvp":
                    got = remote.jvp(case["inputs"], ["x"], ["y", "s"], case["tan"])
                    want = case["jvp"]
                elif kind == "vjp":
                    got = remote.vjp(case["inputs"], ["x", "w"], ["y", "s"], case["cot"])
                    want = case["vjp"]
                else:
                    _, handle = remote.apply_keep(case["inputs"])
                    got = remote.vjp(None, ["x", "w"], ["y", "s"], case["cot"], handle=handle)
                    want = case["vjp"]
                for key in want:
                    np.testing.assert_allclose(got[key], np.asarray(want[key]), rtol=1e-5)
                checked += 1
        finally:
            remote.close()
        return checked

    with ThreadPoolExecutor(N_CLIENTS) as pool:
        results = list(pool.map(run, range(N_CLIENTS)))
    assert results == [N_REQUESTS] * N_CLIENTS


def test_gradpipe_call(server_url, tmp_path):
    payload = {"inputs": {"x": json_array([0.0, 1.0]), "w": json_array(1.0),
                          "p": {"a": json_array([0.0, 0.0])}}}  # fmt: skip
    path = tmp_path / "payload.json"
    path.write_text(json.dumps(payload))
    env = {**os.environ, "GRADPIPE_TOKEN": TOKEN}
    command = [sys.executable, "-m", "gradpipe.cli", "call", server_url, "apply", f"@{path}"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["outputs"]["y"]["shape"] == [2]
    assert answer["outputs"]["y"]["data"]["encoding"] == "json"  # readable numbers by default

    done = subprocess.run([*command[:-2], "health"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and json.loads(done.stdout) == {"status": "ok"}

    env.pop("GRADPIPE_TOKEN")
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 1 and "401" in done.stderr


def test_gradpipe_serve_refuses_a_target_that_is_not_a_component():
    from serve_settings import HERE

    command = [sys.executable, "-m", "gradpipe.cli", "serve", "served_components:forward",
               "--app-dir", str(HERE)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "not a Component" in done.stderr and "Traceback" not in done.stderr
