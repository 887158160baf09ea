"""Sweeps: configurations started as commands (the fake server with different speeds), measured,
stopped, and the right ones recommended."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml

from llmhost.bench import SweepSpec, load_results, run_sweep
from llmhost.bench.sweep import expand
from tests.unit.bench.helpers import FAKE_SERVER


def _command(ttft: float, itl: float) -> str:
    return f"{{python}} {FAKE_SERVER} --port {{port}} --ttft {ttft} --itl {itl}"


def test_sweep_starts_measures_stops_and_recommends(tmp_path: Path, fake_url: str) -> None:
    spec_file = tmp_path / "sweep.yaml"
    spec_file.write_text(
        yaml.safe_dump(
            {
                "api": "openai",
                "concurrency": [1, 2],
                "requests": 4,
                "warmup": 1,
                "prompt_tokens": 16,
                "max_new_tokens": 10,
                "price_per_hour": 1.0,
                "slo_ms_per_token": 15.0,
                "startup_timeout_s": 60,
                "configurations": [
                    # fast but expensive: e2e 65 ms, 6.5 ms/token; c=2 → ~307 tok/s → $4.52 per 1M
                    {"name": "fast", "command": _command(0.02, 0.005), "price_per_hour": 5.0},
                    # slow and cheap: e2e 200 ms, 20 ms/token; c=2 → 100 tok/s → $2.78 per 1M
                    {"name": "slow", "command": _command(0.02, 0.02)},
                    # middle: e2e 122 ms, 12.2 ms/token; c=2 → ~164 tok/s → $3.39 per 1M
                    {"name": "mid", "command": _command(0.05, 0.008), "price_per_hour": 2.0},
                    # a server that dies at start: recorded, the sweep goes on
                    {"name": "broken", "command": "{python} -c 'raise SystemExit(3)'"},
                    # an already running server (unpriced → not in the cost ranking at its load? it is
                    # priced by the file's default)
                    {"name": "running", "url": fake_url, "api": "tgi", "price_per_hour": 100.0},
                ],
            }
        )
    )
    spec = SweepSpec.load(spec_file)
    out = tmp_path / "out"
    results = run_sweep(spec, out)
    by_name = {c.name: c for c in results.configs}
    assert "exited with code 3" in (by_name["broken"].error or "")
    for name in ("fast", "slow", "mid", "running"):
        assert by_name[name].error is None, by_name[name].error
        assert [lv.level for lv in by_name[name].levels] == ["c=1", "c=2"]
        assert all(lv.successes == 4 for lv in by_name[name].levels)
    # where the CPU time went: the server started for each configuration, and the load generator
    for name in ("fast", "slow", "mid"):
        usage = by_name[name].processes
        assert usage is not None and usage["server"]["cpu_s"] > 0 and usage["server"]["rss_mb"] > 0
        assert usage["load_generator"]["cpu_s"] > 0 and usage["children"] == [] and usage["wall_s"] > 0
        assert 0 <= usage["other_cpus"] <= usage["host_cpus"]  # whatever else ran meanwhile
    assert by_name["running"].processes is None  # not started by the sweep: nothing to account
    recs = {r.goal: r for r in results.recommendations}
    assert (recs["most_cost_effective"].config, recs["most_cost_effective"].level) == ("slow", "c=2")
    assert recs["best_throughput"].config == "fast"
    assert (recs["best_latency"].config, recs["best_latency"].level) == ("fast", "c=1")
    assert (recs["slo"].config, recs["slo"].level) == ("mid", "c=2")
    # servers were stopped: their ports no longer accept connections
    for name in ("fast", "slow", "mid"):
        port = int(by_name[name].url.rsplit(":", 1)[1])
        with socket.socket() as s, pytest.raises(OSError):
            s.settimeout(1)
            s.connect(("127.0.0.1", port))
    loaded = load_results(out)
    assert {r.goal for r in loaded.recommendations} == set(recs)
    assert (out / "logs" / "fast.log").exists() and (out / "report.html").exists()
    lines = (out / "requests.jsonl").read_text().splitlines()
    assert len(lines) == 4 * 2 * (4 + 1)  # four configurations, two levels, 4 measured + 1 warm-up


def test_serve_matrix_expands_to_llmhost_serve_commands() -> None:
    spec = SweepSpec.model_validate(
        {
            "configurations": [
                {
                    "serve": {
                        "model": "default",
                        "threads": [1, 2],
                        "max_concurrent": [1, 4],
                        "max_batch_tokens": 256,
                    }
                },
                {"name": "peer", "command": "llama-server -m m.gguf --port {port}", "ready_path": "/health"},
            ]
        }
    )
    launches = expand(spec)
    assert [launch.name for launch in launches] == [
        "default-t1-mc1-b256",
        "default-t1-mc4-b256",
        "default-t2-mc1-b256",
        "default-t2-mc4-b256",
        "peer",
    ]
    argv = launches[1].argv
    i = argv.index("serve")
    assert argv[i:] == [
        "serve",
        "default",
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        "--threads",
        "1",
        "--max-concurrent",
        "4",
        "--max-batch-tokens",
        "256",
    ]
    assert launches[1].params == {
        "model": "default",
        "threads": 1,
        "max_concurrent": 4,
        "max_batch_tokens": 256,
    }
    assert launches[4].argv[-1] == "{port}"


def test_invalid_sweep_files() -> None:
    with pytest.raises(ValueError):
        SweepSpec.model_validate({"configurations": [{"url": "http://x", "command": "y"}]})
    with pytest.raises(ValueError):
        SweepSpec.model_validate({"configurations": [{"url": "http://x"}], "bogus": 1})
    with pytest.raises(ValueError, match="extra_args"):
        expand(SweepSpec.model_validate({"configurations": [{"serve": {"copies": 2, "extra_args": ["-x"]}}]}))


def test_copies_start_an_endpoint_of_that_many_copies() -> None:
    from pathlib import Path

    import yaml

    from llmhost.endpoint.spec import parse_endpoint

    spec = {"configurations": [{"serve": {"copies": [1, 2], "threads": 1, "max_concurrent": 4}}]}
    single, double = expand(SweepSpec.model_validate(spec))
    assert "serve" in single.argv and "endpoint" not in single.argv
    assert double.name.endswith("x2") and double.params["copies"] == 2
    i = double.argv.index("endpoint")
    assert double.argv[i : i + 2] == ["endpoint", "up"] and double.argv[-1] == "{port}"
    endpoint = parse_endpoint(yaml.safe_load(Path(double.argv[i + 2]).read_text()))
    [component] = endpoint.components
    assert component.copies == 2 and component.resources.num_cpus == 1
    assert component.engine.max_concurrent == 4


def test_command_placeholders() -> None:
    import sys

    from llmhost.bench.sweep import fill_placeholders

    assert fill_placeholders("{python} s.py --host {host} --port={port}", 8123) == (
        f"{sys.executable} s.py --host 127.0.0.1 --port=8123"
    )


def test_configurations_are_named_after_their_models_without_collisions() -> None:
    from llmhost.bench.figures.labels import model_labels

    models = [
        "default",
        "s3://b/jobs/7/output/model.tar.gz",
        "s3://a/x/gemma/",
        "s3://b/y/gemma/",
        "./gemma-q4.gguf",
        "s3://b/one.gguf",
        "models/gemma",
        "s3://models/gemma",
    ]
    assert model_labels(models) == {
        "default": "default",
        "s3://b/jobs/7/output/model.tar.gz": "output-model",  # not "model.tar"
        "s3://a/x/gemma/": "x-gemma",  # two prefixes ending alike
        "s3://b/y/gemma/": "y-gemma",
        "./gemma-q4.gguf": "gemma-q4",
        "s3://b/one.gguf": "one",
        "models/gemma": "models-gemma",
        "s3://models/gemma": "s3-models-gemma",  # equal to a local path in every segment
    }
    spec = {"configurations": [{"serve": {"model": ["s3://a/x/gemma/", "s3://b/y/gemma/"], "threads": 1}}]}
    names = [launch.name for launch in expand(SweepSpec.model_validate(spec))]
    assert names == ["x-gemma-t1", "y-gemma-t1"]  # before: both "gemma-t1", refused as a duplicate


async def test_a_sweep_cancelled_while_a_server_starts_leaves_no_process(tmp_path: Path) -> None:
    import asyncio
    import os

    from llmhost.bench.sweep import arun_sweep

    pid_file = tmp_path / "pid"
    never_ready = (
        f"{{python}} -c \"import os, time; open('{pid_file}', 'w').write(str(os.getpid())); time.sleep(120)\""
    )
    config = {"name": "slow", "command": never_ready}
    spec = SweepSpec.model_validate({"requests": 1, "startup_timeout_s": 60, "configurations": [config]})
    task = asyncio.create_task(arun_sweep(spec, tmp_path / "out"))
    for _ in range(200):  # until the server has started (bounded: 10 s)
        if pid_file.exists() and pid_file.read_text():
            break
        await asyncio.sleep(0.05)
    pid = int(pid_file.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(ProcessLookupError):  # stopped and reaped, not left running
        os.kill(pid, 0)
