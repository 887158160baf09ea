from llmhost.bench.load.loadgen import LevelState, LoadSettings, Phase


def test_measured_phase_continues_after_the_warmup_prompts() -> None:
    settings = LoadSettings(requests=3, warmup=2)
    state = LevelState("cfg", "c=1", settings)
    warm = Phase(state, settings, lambda rec: None, True, settings.warmup, None)
    measured = Phase(state, settings, lambda rec: None, False, settings.requests, None, settings.warmup)
    assert [warm.take(), warm.take(), warm.take()] == [0, 1, None]
    assert [measured.take() for _ in range(4)] == [2, 3, 4, None]


def test_next_level_starts_with_prompts_not_yet_sent() -> None:
    from llmhost.bench.runner import rotate

    requests = ["p0", "p1", "p2", "p3", "p4"]
    assert rotate(requests, 2) == ["p2", "p3", "p4", "p0", "p1"]  # type: ignore[arg-type]
    assert rotate(requests, 5) == requests  # type: ignore[arg-type]
    assert rotate([], 3) == []
