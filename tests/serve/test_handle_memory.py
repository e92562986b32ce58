"""The residual-handle store's byte limit bounds the server's memory, not only its own
count: after a flood of kept handles the server's RSS stays within 1.5x the limit
above its idle baseline (the bound the serving guide documents)."""

import httpx
import numpy as np
import psutil
from serve_settings import logged_errors, running_server

from gradpipe.serve import BINARY, encode

LIMIT = 128 * 2**20
N = 2**18  # x and p.a of 1 MiB each; each handle keeps 2 MiB of residuals
FLOOD = 150  # 300 MiB of residuals kept through a 128 MiB store


def test_rss_after_a_flood_of_kept_handles_stays_within_the_documented_bound(tmp_path):
    options = ["--max-body-size", "16MiB", "--max-handles", "100000",
               "--max-handle-bytes", str(LIMIT)]  # fmt: skip
    log_path = tmp_path / "server.log"
    with running_server(options, log_path) as (url, process):
        server = psutil.Process(process.pid)
        rng = np.random.default_rng(0)

        def body(keep):
            x = rng.standard_normal(N).astype(np.float32)
            inputs = {"x": x, "w": np.float32(2), "p": {"a": x[::-1].copy()}}
            return encode({"inputs": inputs, "keep_residuals": keep}, BINARY)

        with httpx.Client(base_url=url, timeout=120, headers={"Content-Type": BINARY}) as client:
            # Idle baseline: programs compiled and a request's buffers warm (one handle of
            # 2 MiB is held then; the flood evicts it).
            for keep in (False, False, True, False):
                assert client.post("/apply", content=body(keep)).status_code == 200
            baseline = server.memory_info().rss
            for _ in range(FLOOD):
                response = client.post("/apply", content=body(True))
                assert response.status_code == 200
            stats = client.get("/stats").json()
            growth = server.memory_info().rss - baseline
    assert stats["handle_bytes"] <= LIMIT
    assert stats["handles"] < FLOOD  # the store did evict: the limit was reached
    assert growth <= 1.5 * LIMIT, (
        f"RSS grew by {growth / 2**20:.0f} MiB for a {LIMIT / 2**20:.0f} MiB handle store "
        f"({stats['handle_bytes'] / 2**20:.0f} MiB held)"
    )
    assert not logged_errors(log_path)
