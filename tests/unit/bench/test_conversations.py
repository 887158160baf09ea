"""The conversation workload: generated conversations (deterministic, groups, think time), the JSONL
file, prompts that extend the previous turn, the options' checks, and a level run against the fake
server (answers fed back, TTFT by turn)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmhost.bench import BenchConfig, run_benchmark
from llmhost.bench.figures.metrics import RequestRecord, turn_figures
from llmhost.bench.load.conversations import ConversationSettings, conversations, generate, parse_think_time
from llmhost.bench.load.server_metrics import derive


def test_generated_conversations_are_deterministic() -> None:
    s = ConversationSettings(turns=3, seed=7)
    assert generate(s, range(5)) == generate(s, range(5))
    assert generate(s, range(12))[:6] == generate(s, range(6))  # a user's conversation is its own
    other = generate(ConversationSettings(turns=3, seed=8), range(5))
    assert [c.messages for c in other] != [c.messages for c in generate(s, range(5))]


def test_system_prompts_are_shared_by_groups() -> None:
    convs = generate(ConversationSettings(system_prompts=3, system_prompt_tokens=100), range(7))
    assert [c.group for c in convs] == [0, 1, 2, 0, 1, 2, 0]
    assert convs[0].system == convs[3].system == convs[6].system
    assert len({c.system for c in convs}) == 3
    assert all(c.system and 300 <= len(c.system) <= 520 for c in convs)  # ~100 tokens at 4 chars each
    assert len({c.messages for c in convs}) == 7  # the users' own messages differ
    none = generate(ConversationSettings(system_prompt_tokens=0), range(2))
    assert all(c.system is None for c in none)


def test_think_times_are_drawn_in_the_range() -> None:
    convs = generate(ConversationSettings(turns=4, think_time_s=(2.0, 5.0)), range(20))
    times = [t for c in convs for t in c.think_s]
    assert len(times) == 80 and all(2.0 <= t <= 5.0 for t in times)
    assert len(set(times)) > 40
    fixed = generate(ConversationSettings(think_time_s=(0.5, 0.5)), range(3))
    assert {t for c in fixed for t in c.think_s} == {0.5}
    assert parse_think_time("2,5") == parse_think_time("2-5") == (2.0, 5.0)
    assert parse_think_time("3") == (3.0, 3.0)
    for bad in ("x", "1,2,3", ""):
        with pytest.raises(ValueError, match="think-time"):
            parse_think_time(bad)
    with pytest.raises(ValueError, match="think-time"):
        ConversationSettings(think_time_s=(5.0, 2.0))


def test_each_turn_extends_the_previous_turn_and_its_answer() -> None:
    [conv] = generate(ConversationSettings(turns=3, system_prompt_tokens=20), range(1))
    p1 = conv.completion_prompt([])
    p2 = conv.completion_prompt([" first answer"])
    p3 = conv.completion_prompt([" first answer", " second"])
    assert p1.startswith(conv.system or "") and p1.endswith("Assistant:")
    assert p2.startswith(p1 + " first answer\nUser: " + conv.messages[1]) and p3.startswith(p2 + " second")
    chat = conv.chat_messages([" first answer"])
    assert [m["role"] for m in chat] == ["system", "user", "assistant", "user"]
    assert chat[2]["content"] == " first answer" and chat[3]["content"] == conv.messages[1]


def test_conversations_file(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    lines = [{"system": "S", "turns": ["a", "b"], "think_s": [0, 1.5], "max_tokens": 8}, {"turns": ["c"]}]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    convs = conversations(ConversationSettings(file=str(path), think_time_s=(1.0, 1.0)), range(3))
    assert [c.messages for c in convs] == [("a", "b"), ("c",), ("a", "b")]
    assert convs[0].think_s == (0.0, 1.5) and convs[1].think_s == (1.0,) and convs[0].max_new_tokens == 8
    assert convs[1].system is None and convs[2].system == "S"
    for bad, word in (
        ({"turns": []}, "turns"),
        ({"turns": ["a"], "think_s": [1, 2]}, "think_s"),
        ({"turns": ["a"], "max_tokens": 0}, "max_tokens"),
        ({"turns": ["a"], "x": 1}, "unknown"),
        ({"turns": ["a"], "system": 3}, "system"),
    ):
        path.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=f"c.jsonl:1: .*{word}"):
            conversations(ConversationSettings(file=str(path)), range(1))


def test_options_that_do_not_apply_are_refused() -> None:
    ok = BenchConfig(url="http://127.0.0.1:1", workload="conversations", concurrency=[2, 4])
    ok.validate()
    assert [label for label, _, _ in ok.levels()] == ["users=2", "users=4"]
    for bad, word in (
        ({"api": "tgi"}, "openai and chat"),
        ({"rates": [1.0]}, "--rate"),
        ({"requests": 4}, "--requests"),
        ({"warmup": 1}, "--warmup"),
        ({"turns": 0}, "--turns"),
        ({"workload": "chats"}, "--workload"),
    ):
        cfg = BenchConfig(url="http://127.0.0.1:1", **{"workload": "conversations", **bad})  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=word):
            cfg.validate()


def test_turn_figures() -> None:
    recs = []
    for turn, ttft in ((1, 1.0), (1, 3.0), (2, 0.2), (3, 0.4)):
        r = RequestRecord("c", "users=2", 0, 0.0, False, turn=turn)
        r.finish_ok([ttft, ttft + 0.1], ttft + 0.1, 2)
        recs.append(r)
    f = turn_figures(recs)
    assert f["turn1_ttft_s_p50"] == pytest.approx(2.0) and f["turn2_ttft_s_p99"] == pytest.approx(0.2)
    assert f["later_turn_ttft_s_p50"] == pytest.approx(0.3)
    assert turn_figures([RequestRecord("c", "c=1", 0, 0.0, False)]) == {}


def test_prefix_reuse_and_routing_from_metrics() -> None:
    delta = {
        "llmhost_prefix_cache_reused_tokens_total": 300.0,
        "llmhost_prompt_tokens_prefilled_total": 100.0,
        "llmhost_endpoint_routed_prefix_total": 9.0,
        "llmhost_endpoint_routed_spilled_total": 1.0,
    }
    figures = derive(delta, [])
    assert figures["server_prefix_reuse"] == pytest.approx(0.75)
    assert figures["server_prefix_reused_tokens"] == 300.0
    assert figures["server_routed_by_prefix"] == pytest.approx(0.9)
    assert "server_prefix_reuse" not in derive({}, [])  # a peer without these counters: no figure


def test_prefix_reuse_counts_what_the_host_memory_tier_restored() -> None:
    """Tokens restored from host memory were spared too: a conversation load that mostly restores
    would otherwise read as poor reuse (measured: 0.62 reported where 0.86 of prompt tokens were spared)."""
    delta = {
        "llmhost_prefix_cache_reused_tokens_total": 200.0,
        "llmhost_prompt_cache_restored_tokens_total": 600.0,
        "llmhost_prompt_tokens_prefilled_total": 200.0,
    }
    figures = derive(delta, [])
    assert figures["server_prefix_reuse"] == pytest.approx(0.8)
    assert (figures["server_prefix_reused_tokens"], figures["server_host_restored_tokens"]) == (800.0, 600.0)


@pytest.mark.parametrize("api", ["openai", "chat"])
def test_a_conversation_level_against_the_fake_server(fake_url: str, tmp_path: Path, api: str) -> None:
    cfg = BenchConfig(
        url=fake_url,
        api=api,
        workload="conversations",
        concurrency=[3],
        turns=2,
        think_time_s=(0.0, 0.05),
        system_prompt_tokens=30,
        user_tokens=8,
        max_new_tokens=4,
        goodput={"ttft": 10_000},
        server_metrics=False,
    )
    results = run_benchmark(cfg, tmp_path)
    [level] = results.levels()
    assert level.level == "users=3" and level.requests == level.successes == 6
    assert level.conversations == {"users": 3, "turns_planned": 6, "completed": 3, "cut": 0, "unfinished": 0}
    for key in ("turn1_ttft_s_p50", "turn2_ttft_s_p90", "later_turn_ttft_s_p50"):
        assert level.get(key)
    assert level.good_requests == 6
    records = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert sorted((r["user"], r["turn"]) for r in records) == [(u, t) for u in range(3) for t in (1, 2)]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["configs"][0]["workload"]["source"] == "generated conversations"
    assert "Conversations" in (tmp_path / "report.html").read_text()
