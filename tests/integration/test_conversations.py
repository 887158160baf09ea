"""Conversations on the real default model: `llmhost bench run --workload conversations` against a real
`llmhost serve`, and an endpoint of two copies whose prefix-aware router keeps a conversation on one copy."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import Server
from tests.integration.endpoint_helpers import ENGINE, Endpoint, start_endpoint, stop_endpoint


def test_bench_conversations_against_llmhost_serve(server: Server, tmp_path: Path) -> None:
    out = tmp_path / "results"
    cmd = [
        sys.executable,
        "-m",
        "llmhost.cli",
        "bench",
        "run",
        "--url",
        server.url,
        "--api",
        "openai",
        "--workload",
        "conversations",
        "--concurrency",
        "3",
        "--turns",
        "2",
        "--think-time",
        "0",
        "--system-prompts",
        "2",
        "--system-prompt-tokens",
        "120",
        "--user-tokens",
        "12",
        "--max-new-tokens",
        "6",
        "--temperature",
        "0",
        "--metrics-interval",
        "0",
        "--out",
        str(out),
        "--no-live",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    [config] = json.loads((out / "summary.json").read_text())["configs"]
    assert config["workload"]["conversations"] == 3 and config["workload"]["system_prompts"] == 2
    [level] = config["levels"]
    assert level["level"] == "users=3"
    counts = {"users": 3, "turns_planned": 6, "completed": 3, "cut": 0, "unfinished": 0}
    assert level["conversations"] == counts
    assert level["successes"] == level["requests"] == 6
    dist = level["distributions"]
    for key in ("turn1_ttft_s_p50", "turn2_ttft_s_p50", "later_turn_ttft_s_p90"):
        assert dist[key] > 0
    # every second turn resends its first turn and answer: the server's prefix cache spares them
    assert level["server_figures"]["server_prefix_reuse"] > 0
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    by_user: dict[int, dict[int, int]] = {}
    for r in records:
        by_user.setdefault(r["user"], {})[r["turn"]] = r["prompt_tokens"]
    assert len(by_user) == 3
    for turns in by_user.values():  # the answer (6 tokens) and the next message are in turn 2's prompt
        assert turns[2] > turns[1] + 6


ROUTED = f"""
name: conv
instance: {{type: local, price_per_hour: 0.1}}
components:
  - name: a
    copies: 2
    resources: {{num_cpus: 1, memory_mb: 600}}
    engine: {ENGINE}
    startup_health_check_timeout_s: 90
    routing: {{policy: prefix, block_chars: 64}}
"""


@pytest.fixture(scope="module")
def routed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    # a copy busy on a shared machine is slow to answer /ping, not hung
    endpoint = start_endpoint(
        tmp_path_factory.mktemp("routed"), ROUTED, args=("--health-timeout", "10", "--health-misses", "6")
    )
    try:  # both copies ready before the first turn: where a cold conversation goes is then known
        ready = ["ready"] * 2
        endpoint.wait_for(
            "two ready copies", lambda: [r["state"] for r in endpoint.replicas("a")] == ready, timeout=180
        )
    except BaseException:
        stop_endpoint(endpoint)
        raise
    yield endpoint
    stop_endpoint(endpoint)


def _served(ep: Endpoint) -> dict[str, int]:
    return {r["copy"]: r["served"] for r in ep.replicas("a")}


def _counters(ep: Endpoint) -> dict[str, float]:
    text = httpx.get(f"{ep.url}/metrics", timeout=10).text
    return {
        s.name: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name.startswith("llmhost_endpoint_routed_")
    }


def test_prefix_routing_keeps_each_conversation_on_one_copy(routed: Endpoint) -> None:
    systems = [
        "You are a ship's navigator who answers in short sentences about the sea and stars.",
        "You are a baker who explains recipes for bread, cakes and pastries step by step.",
    ]
    transcripts = list(systems)
    copies: dict[int, list[str]] = {0: [], 1: []}
    with httpx.Client(base_url=routed.url, timeout=120) as client:
        for turn in range(3):
            for conv in (0, 1):  # the conversations' turns alternate, as users' do
                transcripts[conv] += f"\nUser: Question {turn} of conversation {conv}?\nAssistant:"
                before = _served(routed)
                r = client.post(
                    "/v1/completions",
                    json={"model": "a", "prompt": transcripts[conv], "max_tokens": 4, "temperature": 0},
                )
                assert r.status_code == 200, r.text
                transcripts[conv] += r.json()["choices"][0]["text"]
                after = _served(routed)
                [copy] = [c for c in after if after[c] > before.get(c, 0)]
                copies[conv].append(copy)
    # each conversation stays on its copy; the two started apart (the cold one goes to the least busy)
    assert len(set(copies[0])) == 1 and len(set(copies[1])) == 1, copies
    assert copies[0][0] != copies[1][0]
    counters = _counters(routed)
    assert counters["llmhost_endpoint_routed_cold_total"] == 2  # each conversation's first turn
    assert counters["llmhost_endpoint_routed_prefix_total"] == 4
    assert counters["llmhost_endpoint_routed_spilled_total"] == 0
    status = next(c for c in routed.status()["components"] if c["name"] == "a")
    assert status["routing"] == "prefix"
    assert status["routing_decisions"] == {"prefix": 4, "spilled": 0, "cold": 2}
