from pathlib import Path

import pytest

from llmhost.engine.config import EngineConfig
from llmhost.engine.request import SamplingParams
from llmhost.settings.serve import SERVE_SPEC
from llmhost.store import ModelNotFoundError, resolve_model


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_concurrent": 0}, "max_concurrent"),
        ({"max_input_tokens": 4096, "max_total_tokens": 4096}, "max_input_tokens"),
        ({"max_queue": -1}, "max_queue"),
        ({"max_concurrent": 200, "prefix_cache_seqs": 100}, "256"),
        ({"cache_type_k": "q9"}, "cache_type_k must be one of f16, bf16, f32, q8_0, q4_0"),
        ({"cache_type_v": "q8_0"}, "cache_type_v q8_0 .* needs flash attention"),
    ],
)
def test_engine_config_names_the_bad_limit(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EngineConfig(**kwargs)  # type: ignore[arg-type]


def test_a_total_given_alone_leaves_the_input_limit_room_for_one_token() -> None:
    """TGI's rule: MAX_TOTAL_TOKENS at or below the default input limit, MAX_INPUT_LENGTH unset."""
    by_flag = SERVE_SPEC.engine_config({"max_total_tokens": 2048}, {})
    by_env = SERVE_SPEC.engine_config({}, {"MAX_TOTAL_TOKENS": "1024"})
    assert (by_flag.max_input_tokens, by_flag.max_total_tokens) == (2047, 2048)
    assert (by_env.max_input_tokens, by_env.max_total_tokens) == (1023, 1024)
    # a larger total keeps the default input limit; both given are checked as given
    assert (
        SERVE_SPEC.engine_config({"max_total_tokens": 8192}, {}).max_input_tokens
        == EngineConfig().max_input_tokens
    )
    with pytest.raises(ValueError, match="max_input_tokens"):
        SERVE_SPEC.engine_config({"max_total_tokens": 2048, "max_input_tokens": 2048}, {})
    with pytest.raises(ValueError, match="max_input_tokens"):
        SERVE_SPEC.engine_config({"max_total_tokens": 2048}, {"MAX_INPUT_LENGTH": "2048"})


def test_quantized_kv_types_pass_with_what_they_need() -> None:
    cfg = EngineConfig(cache_type_k="q4_0", cache_type_v="q8_0", flash_attn=True, swa_full=False)
    assert (cfg.cache_type_k, cfg.cache_type_v, cfg.swa_full) == ("q4_0", "q8_0", False)
    assert EngineConfig(cache_type_k="q8_0").cache_type_v == "f16"  # a quantized K alone needs no FA


def test_context_is_a_stream_for_every_running_and_idle_cached_sequence() -> None:
    cfg = EngineConfig(max_concurrent=4, max_total_tokens=1000, max_input_tokens=500, prefix_cache_seqs=3)
    assert cfg.n_seq_max == 7
    assert cfg.n_ctx == 7000


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"max_tokens": -1}, "max_tokens"), ({"top_p": 0.0}, "top_p"), ({"temperature": -1}, "temperature")],
)
def test_sampling_params_validate(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        SamplingParams(**kwargs)  # type: ignore[arg-type]


def test_resolve_model_directory_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "b.gguf").write_bytes(b"x")
    (tmp_path / "a.gguf").write_bytes(b"x")
    with pytest.raises(ModelNotFoundError, match=r"holds 2 models \(a.gguf, b.gguf\)"):  # never one by name
        resolve_model(str(tmp_path))
    (tmp_path / "b.gguf").unlink()
    assert resolve_model(str(tmp_path)) == tmp_path / "a.gguf"
    monkeypatch.setenv("SM_MODEL_DIR", str(tmp_path))
    assert resolve_model(None) == tmp_path / "a.gguf"
    with pytest.raises(ModelNotFoundError):
        resolve_model(str(tmp_path / "missing.gguf"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelNotFoundError, match=r"no \*\.gguf"):
        resolve_model(str(empty))


@pytest.mark.parametrize(
    ("n_vocab", "rows"),
    [(262_144, 16), (128_256, 32), (151_936, 27), (32_000, 131), (1_000, 512)],
)
def test_a_step_keeps_16_mib_of_prompt_logits_rows_at_most_a_batch(n_vocab: int, rows: int) -> None:
    assert EngineConfig().prompt_logits_rows(n_vocab) == rows


def test_llama_outputs_are_the_running_sequences_rows_and_the_prompt_rows() -> None:
    gemma = 262_144
    assert EngineConfig().llama_n_outputs(gemma) == 8 + 16
    # n-gram guesses: each running sequence verifies up to draft_tokens more
    assert EngineConfig(speculative="ngram", draft_tokens=12).llama_n_outputs(gemma) == 8 * 13 + 16
    # a row per stream at least (llama.cpp reserves them), at most a batch
    assert EngineConfig(max_concurrent=2, prefix_cache_seqs=80).llama_n_outputs(gemma) == 82
    wide = EngineConfig(max_concurrent=64, speculative="ngram", draft_tokens=12)
    assert wide.llama_n_outputs(gemma) == wide.llama_n_batch == 512


def test_guesses_take_draft_tokens_rows_a_sequence_within_the_batch() -> None:
    gemma = 262_144
    assert EngineConfig().guess_rows(gemma) == 0
    assert EngineConfig(speculative="ngram", draft_tokens=12).guess_rows(gemma) == 8 * 12
    # 64 sequences' 768 guesses: the batch's 512 rows hold 432 beside their 64 rows and the 16 prompt rows
    assert EngineConfig(max_concurrent=64, speculative="ngram", draft_tokens=12).guess_rows(gemma) == 432
    crowded = EngineConfig(max_concurrent=250, max_batch_tokens=256, speculative="ngram")
    assert crowded.guess_rows(gemma) == 0  # 250 rows and 16 prompt rows fill the batch's 256
