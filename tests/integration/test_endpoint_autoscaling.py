"""Autoscaling with real copies: from zero on the first request, out under load, in after the cooldown;
then `llmhost endpoint down`."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import httpx

from tests.integration.endpoint_helpers import ENGINE, call, start_endpoint, stop_endpoint

ENDPOINT = f"""
name: auto
components:
  - name: auto
    resources: {{num_cpus: 0.5, memory_mb: 600}}
    engine: {ENGINE}
    autoscaling: {{min_copies: 0, max_copies: 2, target_concurrent_per_copy: 2,
                  scale_in_cooldown_s: 3, scale_out_cooldown_s: 0}}
    startup_health_check_timeout_s: 90
"""


async def test_scale_from_zero_out_under_load_and_back_in(tmp_path: Path) -> None:
    ep = start_endpoint(tmp_path, ENDPOINT, wait_ping=False)
    try:
        assert ep.replicas("auto") == []
        assert httpx.get(f"{ep.url}/ping").status_code == 200  # scaled to zero on purpose
        body = {"model": "auto", "prompt": "Once upon", "max_tokens": 32, "ignore_eos": True, "stream": True}
        async with httpx.AsyncClient(base_url=ep.url, timeout=120) as c:
            first = await call(c, "/v1/completions", {**body, "max_tokens": 4})
            assert first.status == 200 and first.done, first.text  # waited for a copy, did not fail
            seen: list[int] = []
            stop = threading.Event()

            def watch() -> None:
                while not stop.is_set():
                    seen.append(len(ep.replicas("auto")))
                    stop.wait(0.2)

            watcher = threading.Thread(target=watch)
            watcher.start()
            try:
                outcomes = await asyncio.gather(*(call(c, "/v1/completions", body) for _ in range(6)))
            finally:
                stop.set()
                watcher.join()
        assert all(o.status == 200 and o.done for o in outcomes)
        assert max(seen) == 2, seen  # 6 concurrent / 2 per copy, capped at max_copies
        ep.wait_for("scale in to zero after the cooldown", lambda: ep.replicas("auto") == [], timeout=30)
        down = ep.cli("down")
        assert down.returncode == 0 and "draining and stopping" in down.stdout, down.stderr
        ep.process.wait(timeout=60)
    finally:
        stop_endpoint(ep)
