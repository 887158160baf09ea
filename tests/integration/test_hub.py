"""hf:// models through a real huggingface_hub against the hub stand-in on 127.0.0.1 (tests/hubserver.py):
pulled by file and by quantization, split models fetched whole and served from part 1, a cut transfer
resumed, cached models served with the hub offline or gone, and every failure an error naming the
repository or file (exit 2 from the CLI, never a traceback). Tiny random-weight models, except one
end-to-end `llmhost serve hf://…:Q4_K_M` of the default model."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmhost.store import resolve_model
from llmhost.store.hub import fetch
from llmhost.store.hubref import HubModelError, parse_hub_ref
from tests.hubserver import Hub, hub_server
from tests.integration.conftest import Server, free_port, start_server, stop_server

pytestmark = pytest.mark.integration
TINY_LIMITS = ("--max-total-tokens", "256", "--max-input-tokens", "128", "--max-concurrent", "2")
LIMITS = ("--max-total-tokens", "512", "--max-input-tokens", "256", "--max-concurrent", "2")


def split_gguf(src: Path, out: Path, max_tensors: int) -> list[Path]:
    """`src` rewritten as gguf-split parts (`OUT-0000N-of-0000M.gguf`) by the gguf package's writer."""
    import gguf

    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(out, arch, split_max_tensors=max_tensors)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue  # the writer writes these itself
        vtype = field.types[0]
        sub_type = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), vtype, sub_type=sub_type)
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, tensor.data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return sorted(out.parent.glob(f"{out.stem}-*-of-*.gguf"))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny models (a different seed each: different bytes), a 3-part split one and an mmproj file."""
    from llmhost.optimize.convert import convert_hf
    from tests.unit.optimize.tiny import make_tiny_hf

    tmp = tmp_path_factory.mktemp("hub-models")
    out = {}
    for seed, name in enumerate(["tiny-Q4_K_M.gguf", "tiny-Q8_0.gguf", "mmproj-tiny-F16.gguf"]):
        out[name] = tmp / name
        convert_hf(make_tiny_hf(tmp / f"hf{seed}", seed=seed), out[name], outtype="f32")
    (tmp / "split").mkdir()
    for part in split_gguf(out["tiny-Q8_0.gguf"], tmp / "split" / "tiny-F32.gguf", max_tensors=8):
        out[part.name] = part
    (tmp / "README.md").write_text("# tiny\n")
    out["README.md"] = tmp / "README.md"
    return out


@pytest.fixture
def hub(files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Hub]:
    """The stand-in with its repositories; this process's huggingface_hub pointed at it, an empty cache."""
    with hub_server() as hub:
        pick = ("tiny-Q4_K_M.gguf", "tiny-Q8_0.gguf", "mmproj-tiny-F16.gguf", "README.md")
        hub.add("acme/tiny-GGUF", {n: files[n] for n in pick})
        hub.add("acme/split-GGUF", {f"F32/{n}": p for n, p in files.items() if "-of-" in n})
        hub.add(
            "acme/two-GGUF",
            {n: files[n] for n in ("tiny-Q8_0.gguf", "mmproj-tiny-F16.gguf")}
            | {"tiny-F16.gguf": files["tiny-Q4_K_M.gguf"]},
        )
        hub.add("acme/gated-GGUF", {"tiny-Q4_K_M.gguf": files["tiny-Q4_K_M.gguf"]}, gated=True)
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
        for name in ("HF_HUB_OFFLINE", "HF_TOKEN", "HF_HUB_CACHE"):
            monkeypatch.delenv(name, raising=False)
        yield hub


def llmhost(*args: str, timeout: float = 120, **env: str) -> tuple[int, str]:
    """Exit status and stderr+stdout of the CLI (the environment this test set, plus `env`), the rich
    error box's borders and line wrapping removed."""
    full = {**os.environ, "COLUMNS": "400", **env}
    done = subprocess.run(
        [sys.executable, "-m", "llmhost.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full,
        stdin=subprocess.DEVNULL,
    )
    text = re.sub(r"[│╭╮╰╯─]", " ", done.stderr + done.stdout)
    return done.returncode, " ".join(text.split())


def test_pull_by_file_and_by_quant_into_the_hub_cache(
    hub: Hub, files: dict[str, Path], tmp_path: Path
) -> None:
    by_quant = fetch(parse_hub_ref("hf://acme/tiny-GGUF:q8_0"))
    repo = hub.repos["acme/tiny-GGUF"]
    assert by_quant == [
        tmp_path / "hf" / "hub" / "models--acme--tiny-GGUF" / "snapshots" / repo.commit / "tiny-Q8_0.gguf"
    ]
    assert by_quant[0].read_bytes() == files["tiny-Q8_0.gguf"].read_bytes()
    assert fetch(parse_hub_ref("hf://acme/tiny-GGUF/tiny-Q8_0.gguf")) == by_quant
    # no quantization named: Q4_K_M, the mmproj file beside it never
    (default,) = fetch(parse_hub_ref("hf://acme/tiny-GGUF"))
    assert default.name == "tiny-Q4_K_M.gguf"
    assert default.read_bytes() == files["tiny-Q4_K_M.gguf"].read_bytes()
    assert len(hub.gets()) == 2  # each file fetched once; the cached one again: no GET
    assert not any(s.token for s in hub.gets())
    code, out = llmhost("models")
    assert code == 0, out
    assert re.search(r"hf://acme/tiny-GGUF/tiny-Q4_K_M.gguf +1\.5 MB " + repo.commit[:12], out), out
    assert "2 model(s), 3.0 MB" in out


@pytest.mark.parametrize(
    ("ref", "says"),
    [
        (
            "hf://acme/tiny-GGUF:Q5_K_S",
            "hf://acme/tiny-GGUF:Q5_K_S: the quantization 'Q5_K_S' matches no model "
            "of acme/tiny-GGUF (in the repository); name one of: hf://acme/tiny-GGUF/tiny-Q4_K_M.gguf, "
            "hf://acme/tiny-GGUF/tiny-Q8_0.gguf",
        ),
        (
            "hf://acme/two-GGUF",
            "hf://acme/two-GGUF: no quantization named, and no Q4_K_M model of acme/two-GGUF "
            "(in the repository); name one of: hf://acme/two-GGUF/tiny-F16.gguf, hf://acme/two-GGUF/tiny-Q8_0.gguf",
        ),
        (
            "hf://acme/tiny-GGUF/mmproj-tiny-F16.gguf",
            "mmproj-tiny-F16.gguf is a multimodal projector (mmproj), not a model",
        ),
        (
            "hf://acme/tiny-GGUF/nope.gguf",
            "hf://acme/tiny-GGUF/nope.gguf: no file 'nope.gguf' in acme/tiny-GGUF "
            "(in the repository); its GGUF models: hf://acme/tiny-GGUF/tiny-Q4_K_M.gguf",
        ),
        (
            "hf://acme/missing:Q4_K_M",
            "hf://acme/missing:Q4_K_M: no repository acme/missing on http://127.0.0.1:",
        ),
        (
            "hf://acme/gated-GGUF:Q4_K_M",
            "hf://acme/gated-GGUF:Q4_K_M: acme/gated-GGUF is a gated repository on http://127.0.0.1:",
        ),
    ],
)
def test_a_model_that_is_not_there_is_named_with_the_choices(hub: Hub, ref: str, says: str) -> None:
    code, out = llmhost("models", "pull", ref)
    assert code == 2 and says in out and "Traceback" not in out, out
    assert hub.gets() == []  # nothing downloaded


def test_a_gated_repository_downloads_with_a_granted_token(hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    hub.tokens.add("hf_granted")
    monkeypatch.setenv("HF_TOKEN", "hf_granted")
    (path,) = fetch(parse_hub_ref("hf://acme/gated-GGUF:Q4_K_M"))
    assert path.name == "tiny-Q4_K_M.gguf"
    heads = [s for s in hub.seen if s.method == "HEAD"]
    assert heads and all(s.token for s in heads)
    assert not any(s.token for s in hub.gets())  # the token stays on the hub, never sent to the CDN


def test_a_split_model_is_fetched_whole_and_served_from_part_1(hub: Hub, tmp_path: Path) -> None:
    parts = fetch(parse_hub_ref("hf://acme/split-GGUF/F32/tiny-F32-00002-of-00003.gguf"))
    assert [p.name for p in parts] == [f"tiny-F32-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert len({p.parent for p in parts}) == 1  # beside each other, as llama.cpp looks for them
    hub.seen.clear()
    server = start_server(tmp_path, "hf://acme/split-GGUF:F32", *TINY_LIMITS)  # cached: no download
    try:
        assert hub.gets() == []
        assert complete(server)["model"] == "tiny-F32"
    finally:
        stop_server(server)
    assert f"serving {parts[0]}" in server.log.read_text()


def test_a_cached_model_starts_offline_and_with_the_hub_gone(
    hub: Hub, monkeypatch: pytest.MonkeyPatch
) -> None:
    (pulled,) = fetch(parse_hub_ref("hf://acme/tiny-GGUF"))
    hub.seen.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert fetch(parse_hub_ref("hf://acme/tiny-GGUF:Q4_K_M")) == [pulled]
    assert hub.seen == []  # not even a listing
    offline_choice = r"'Q8_0' matches no model of acme/tiny-GGUF \(in the cache: HF_HUB_OFFLINE is set\)"
    with pytest.raises(HubModelError, match=offline_choice):
        fetch(parse_hub_ref("hf://acme/tiny-GGUF:Q8_0"))
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    assert fetch(parse_hub_ref("hf://acme/tiny-GGUF/tiny-Q4_K_M.gguf")) == [pulled]
    code, out = llmhost("models", "pull", "hf://acme/other-GGUF:Q4_K_M")
    assert code == 2, out
    assert "is unreachable (ConnectionError), and acme/other-GGUF is not in the cache" in out, out


def test_a_download_the_disk_cannot_hold_is_refused_before_it_starts(hub: Hub) -> None:
    hub.repos["acme/tiny-GGUF"].advertised_size["tiny-Q8_0.gguf"] = 1 << 60
    code, out = llmhost("models", "pull", "hf://acme/tiny-GGUF:Q8_0")
    assert code == 2 and "hf://acme/tiny-GGUF:Q8_0: needs 1152921504606.8 MB in the cache" in out, out
    assert hub.gets() == []


def test_models_rm_removes_a_model_or_a_repository(hub: Hub) -> None:
    q4, q8 = (
        fetch(parse_hub_ref("hf://acme/tiny-GGUF:Q4_K_M"))[0],
        fetch(parse_hub_ref("hf://acme/tiny-GGUF:Q8_0"))[0],
    )
    blobs = q4.parent.parent.parent / "blobs"
    assert len(list(blobs.iterdir())) == 2
    code, out = llmhost("models", "rm", "hf://acme/tiny-GGUF:q8_0", HF_HUB_OFFLINE="1")
    assert code == 0 and f"removed {q8}" in out and q4.is_file() and not q8.exists(), out
    assert len(list(blobs.iterdir())) == 1
    code, out = llmhost("models", "rm", "hf://acme/tiny-GGUF")
    assert code == 0 and not blobs.parent.exists()
    assert llmhost("models")[1].startswith("no GGUF model in the cache")


def test_a_folder_with_two_models_and_an_mmproj_is_refused(files: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    for name in ("tiny-Q4_K_M.gguf", "tiny-Q8_0.gguf", "mmproj-tiny-F16.gguf"):
        (folder / name).symlink_to(files[name])
    code, out = llmhost("serve", "--port", str(free_port()), str(folder))
    assert code == 2, out
    assert f"model directory {folder} holds 2 models (tiny-Q4_K_M.gguf, tiny-Q8_0.gguf)" in out, out
    (folder / "tiny-Q8_0.gguf").unlink()
    assert resolve_model(str(folder)) == folder / "tiny-Q4_K_M.gguf"  # the mmproj file is no model


def complete(server: Server) -> dict[str, Any]:
    answer = httpx.post(
        f"{server.url}/v1/completions", json={"prompt": "The sky is", "max_tokens": 4}, timeout=60
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] == 4
    return dict(answer.json())


def test_serve_the_default_model_by_name_resumed_then_with_the_hub_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cold cache: the 253 MB download is cut halfway and resumed (a Range for the rest only), checked,
    served; then served again from the cache with the hub stopped."""
    gemma = resolve_model("default")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with hub_server() as hub:
        hub.add("google/gemma-3-270m-GGUF", {"gemma-3-270m-Q4_K_M.gguf": gemma, "g-Q8_0.gguf": gemma})
        hub.cut_once.add("gemma-3-270m-Q4_K_M.gguf")
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        server = start_server(tmp_path, "hf://google/gemma-3-270m-GGUF:Q4_K_M", *LIMITS)
        try:
            assert complete(server)["model"] == "gemma-3-270m-Q4_K_M"
        finally:
            stop_server(server)
        first, again = hub.gets()
    log = server.log.read_text()
    assert "resuming (attempt 2 of 4)" in log and "(sha256 check)" in log, log
    start = re.fullmatch(r"bytes=(\d+)-", again.range or "")
    assert first.range is None and start is not None and 0 < int(start[1]) <= gemma.stat().st_size // 2
    server = start_server(tmp_path, "hf://google/gemma-3-270m-GGUF:Q4_K_M", *LIMITS)
    try:
        assert complete(server)["model"] == "gemma-3-270m-Q4_K_M"
    finally:
        stop_server(server)
    assert "is unreachable" in server.log.read_text()


def test_endpoint_components_and_optimize_take_hf_models(hub: Hub, tmp_path: Path) -> None:
    from llmhost.endpoint.control.manager import resolve
    from llmhost.endpoint.control_errors import ModelRefError
    from llmhost.endpoint.spec import ComponentSpec

    resolved = resolve(ComponentSpec(name="tiny", model="hf://acme/tiny-GGUF:Q8_0"))
    assert resolved.gguf.name == "tiny-Q8_0.gguf"
    assert resolved.serve_ref == str(resolved.gguf)  # what copies load: the cached file
    with pytest.raises(ModelRefError, match=r"component 'x': model 'hf://acme/tiny-GGUF:Q2_K': .*matches no"):
        resolve(ComponentSpec(name="x", model="hf://acme/tiny-GGUF:Q2_K"))
    out = tmp_path / "tiny-q8.gguf"
    code, text = llmhost(
        "optimize", "quantize", "hf://acme/tiny-GGUF/tiny-Q4_K_M.gguf", "--type", "q8_0", "--out", str(out)
    )
    assert code == 0 and out.is_file(), text
    code, text = llmhost("optimize", "quantize", "hf://acme/nothing:Q4_K_M", "-t", "q8_0", "-o", str(out))
    assert code == 2 and "no repository acme/nothing on" in text, text


def test_a_models_dir_yaml_names_an_hf_model(hub: Hub, tmp_path: Path, files: dict[str, Path]) -> None:
    from llmhost.endpoint.control.modelsdir import estimated_memory_mb, scan
    from llmhost.endpoint.spec import ModelsDirSpec, SpecError

    (tmp_path / "tiny.yaml").write_text("model: hf://acme/tiny-GGUF:Q8_0\n")
    (component,) = scan(ModelsDirSpec(path=str(tmp_path)))
    assert component.name == "tiny" and component.model == "hf://acme/tiny-GGUF:Q8_0"
    # its size and its running sequences' KV, from the download (the same bytes as the file served)
    assert component.resources.memory_mb == estimated_memory_mb(files["tiny-Q8_0.gguf"])
    assert len(hub.gets()) == 1
    (tmp_path / "tiny.yaml").write_text("model: hf://acme/tiny-GGUF:Q3_K\n")
    with pytest.raises(SpecError, match=r"tiny.yaml: model: hf://acme/tiny-GGUF:Q3_K: the quantization"):
        scan(ModelsDirSpec(path=str(tmp_path)))
