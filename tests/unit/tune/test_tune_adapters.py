"""`llmhost tune --lora ... --model-mix ...`'s plumbing: the adapters read as `llmhost serve` reads them,
every candidate's server given them (one copy: `llmhost serve --lora`; several: the endpoint file's
`adapters:`), bench sending the mix, the endpoint file and tune.json carrying them, and a mix naming
what is not served refused naming the flag. No servers: tests/integration/test_tune.py runs one."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from llmhost.bench.sweep import bench_config_for, expand
from llmhost.endpoint.spec import parse_endpoint
from llmhost.tune import Candidate, SearchSpace, TuneSettings, TuneSLO
from llmhost.tune.adapters import SERVED_NAME, Adapters
from llmhost.tune.outputs import endpoint_doc, tune_doc
from llmhost.tune.runner import Workload, sweep_spec
from llmhost.tune.state import CandidateRecord

SLO = TuneSLO(ttft_ms=500, itl_ms=50)


@pytest.fixture
def adapters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Adapters:
    (tmp_path / "a.gguf").write_bytes(b"GGUF")
    (tmp_path / "b.gguf").write_bytes(b"GGUF")
    monkeypatch.chdir(tmp_path)  # a relative path is read from here, and made absolute
    return Adapters.parse(["a=a.gguf", "b=b.gguf:0.5"])


def settings(tmp_path: Path, adapters: Adapters, mix: tuple[str, ...] = ()) -> TuneSettings:
    space = SearchSpace(host_cpus=4, copies=(1, 2), threads=(1,), max_concurrent=(4,))
    return TuneSettings(
        models={None: "default"},
        space=space,
        slo=SLO,
        price_per_hour=1.0,
        out_dir=tmp_path,
        workload=Workload(concurrency=(3,), model_mix=mix),
        adapters=adapters,
    )


def test_adapters_are_read_as_serve_reads_them(tmp_path: Path, adapters: Adapters) -> None:
    assert adapters.names == ("a", "b")
    assert adapters.lora_options() == [f"a={tmp_path / 'a.gguf'}:1.0", f"b={tmp_path / 'b.gguf'}:0.5"]
    assert Adapters.parse(["r=s3://bucket/r.gguf:2"]).lora_options() == ["r=s3://bucket/r.gguf:2.0"]
    for bad, message in (
        ("a", "NAME=PATH"),
        ("a=missing.gguf", "--lora a: no such file"),
        ("a/b=a.gguf", "--lora 'a/b=a.gguf'"),
        ("a=a.gguf:inf", "finite"),
    ):
        with pytest.raises(ValueError, match=message):
            Adapters.parse([bad])
    with pytest.raises(ValueError, match="given twice"):
        Adapters.parse(["a=a.gguf", "a=b.gguf"])


def test_a_mix_names_the_served_model_or_an_adapter(tmp_path: Path, adapters: Adapters) -> None:
    settings(tmp_path, adapters, ("a", "b", SERVED_NAME))
    refused = r"--model-mix 'c': neither .*'model' nor an adapter \(--lora: a, b\)"
    with pytest.raises(ValueError, match=refused):
        settings(tmp_path, adapters, ("a", "c"))
    with pytest.raises(ValueError, match="--lora: none given"):
        settings(tmp_path, Adapters(), ("a",))
    with pytest.raises(ValueError, match="--model-mix applies to the prompts workload"):
        from llmhost.bench.load.conversations import ConversationSettings

        Workload(model_mix=("a",), conversations=ConversationSettings())


def test_every_candidate_serves_the_adapters_and_bench_sends_the_mix(
    tmp_path: Path, adapters: Adapters
) -> None:
    s = settings(tmp_path, adapters, ("a", "b", SERVED_NAME))
    for cand in (Candidate(baseline=True), Candidate(1, 1, 4, 512)):
        spec = sweep_spec(s, cand)
        [launch] = expand(spec)
        argv = launch.argv
        assert [argv[i + 1] for i, a in enumerate(argv) if a == "--lora"] == adapters.lora_options()
        assert argv[argv.index("--served-model-name") + 1] == SERVED_NAME
        cfg = bench_config_for(spec, launch, "http://127.0.0.1:1")
        cfg.validate()
        assert cfg.model == "a,b,model"
    [endpoint] = expand(sweep_spec(s, Candidate(2, 1, 4, 512)))
    i = endpoint.argv.index("up")
    [component] = parse_endpoint(yaml.safe_load(Path(endpoint.argv[i + 1]).read_text())).components
    assert component.name == SERVED_NAME
    assert [(a.name, a.path, a.scale) for a in component.adapters] == [
        ("a", str(tmp_path / "a.gguf"), 1.0),
        ("b", str(tmp_path / "b.gguf"), 0.5),
    ]


def test_without_adapters_nothing_is_named(tmp_path: Path) -> None:
    spec = sweep_spec(settings(tmp_path, Adapters()), Candidate(1, 1, 4, 512))
    [launch] = expand(spec)
    assert "--lora" not in launch.argv and "--served-model-name" not in launch.argv
    assert spec.configurations[0].model_name is None  # bench asks /v1/models, as before


def test_the_endpoint_file_and_tune_json_carry_the_adapters(tmp_path: Path, adapters: Adapters) -> None:
    s = settings(tmp_path, adapters, ("a", SERVED_NAME))
    doc = endpoint_doc(CandidateRecord(Candidate(1, 1, 4, 512)), "default", 4, 1.0, adapters=adapters)
    [component] = parse_endpoint(doc).components
    assert [a.lora_option for a in component.adapters] == adapters.lora_options()
    out = tune_doc(s, [CandidateRecord(Candidate(baseline=True))], "now")
    assert out["workload"]["model_mix"] == ("a", SERVED_NAME)
    assert [a["name"] for a in out["adapters"]] == ["a", "b"]


def test_the_cli_refuses_a_mix_naming_what_is_not_served(tmp_path: Path, adapters: Adapters) -> None:
    from llmhost.cli import app

    args = [
        "tune",
        "default",
        "--slo-ttft-ms",
        "500",
        "--slo-itl-ms",
        "50",
        "--price-per-hour",
        "1",
        "--out",
        str(tmp_path / "out"),
        "--lora",
        "a=a.gguf",
        "--model-mix",
        "a,sql",
    ]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 2, done.output
    assert "--model-mix 'sql': neither the served model's name 'model' nor an adapter" in done.output
