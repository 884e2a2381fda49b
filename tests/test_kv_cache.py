"""Issue 49, part 2: "`cache_type_k` / `cache_type_v` (f16 default; q8_0, q4_0 and the
others llama.cpp accepts) as model options and settings ...; flash attention where
llama.cpp requires it for a quantized V. ... The memory management and the fit checks
count the smaller cells." Bad values "get a 400 naming them". Fast: options, settings,
GGUF headers written by the `gguf` package, plans; nothing is started."""

from __future__ import annotations

from pathlib import Path

import pytest

from juggler.config import ConfigError, Settings, load_settings, validate
from juggler.engine.engine_config import EngineConfig, embed_worker_config, worker_config
from juggler.engine_args import parse_llamacpp_args
from juggler.errors import BadRequest
from juggler.kv_cache import KV_TYPE_NAMES, KV_TYPES, row_bytes
from juggler.manager.auto_ctx import auto_ctx_size, resolved, workers_of
from juggler.manager.fit import check_fit
from juggler.manager.footprint import kv_bytes_per_token
from juggler.manager.recipes import plan_launch
from juggler.options import EngineFlags, LoadOverrides
from juggler.registry.gguf_meta import read_info
from juggler.types import ModelInfo, ModelType
from tests.manager.conftest import resolve_path
from tests.manager.test_fit import smol_like

GIB = 1 << 30


def test_the_types_are_llama_servers_with_ggmls_numbers_and_block_sizes() -> None:
    """llama-server's --cache-type-k: "allowed values: f32, f16, bf16, q8_0, q4_0, q4_1,
    iq4_nl, q5_0, q5_1" (ggml.h: F16 = 1, Q8_0 = 8, Q4_0 = 2; q8_0 keeps 32 values in
    34 bytes, q4_0 in 18)."""
    assert set(KV_TYPE_NAMES) == set(KV_TYPES) and len(KV_TYPES) == 9
    assert (KV_TYPES["f16"].ggml_type, KV_TYPES["q8_0"].ggml_type) == (1, 8)
    assert KV_TYPES["q4_0"].ggml_type == 2
    assert row_bytes("f16", 64) == 128 and row_bytes("q8_0", 64) == 68
    assert row_bytes("q4_0", 64) == 36 and row_bytes("f32", 3) == 12


def test_cache_types_are_options_and_settings_defaulting_to_f16(tmp_path: Path) -> None:
    s = load_settings(environ={"JUGGLER_CACHE_TYPE_K": "q8_0"}, file=tmp_path / "none.json")
    assert (s.cache_type_k, s.cache_type_v) == ("q8_0", "f16")
    options = s.model_options({"cache_type_v": "q4_0"})
    assert (options.cache_type_k, options.cache_type_v) == ("q8_0", "q4_0")
    saved = s.model_options(None, saved={"cache_type_k": "q5_1"})
    assert saved.cache_type_k == "q5_1"
    assert "cache_type_k" in LoadOverrides.model_fields
    # Another cache type is another launch: a load with it reloads the model.
    assert options.launch_key() != s.model_options().launch_key()
    assert Settings().model_options().recipe_options().get("cache_type_k") is None
    assert options.recipe_options()["cache_type_v"] == "q4_0"


@pytest.mark.parametrize("key", ["cache_type_k", "cache_type_v"])
def test_an_unknown_cache_type_is_a_400_naming_it(key: str) -> None:
    with pytest.raises(BadRequest) as err:
        Settings().model_options({key: "q3_k"})
    assert err.value.param == key and "q8_0" in err.value.message
    with pytest.raises(ConfigError, match=key):
        load_settings(environ={f"JUGGLER_{key.upper()}": "f8"}, file=Path("/nonexistent"))


def test_a_quantized_v_cache_without_flash_attention_is_a_400_naming_it() -> None:
    """llama.cpp: "quantized V cache requires flash_attn to be enabled"."""
    with pytest.raises(BadRequest) as err:
        Settings().model_options({"cache_type_v": "q8_0", "llamacpp_args": "--flash-attn off"})
    assert err.value.param == "cache_type_v" and "--flash-attn" in err.value.message
    # Keys alone need no flash attention; flash attention on is fine.
    Settings().model_options({"cache_type_k": "q8_0", "llamacpp_args": "--flash-attn off"})
    Settings().model_options({"cache_type_v": "q4_0", "llamacpp_args": "--flash-attn on"})
    with pytest.raises(ConfigError, match="cache_type_v"):
        validate({"cache_type_v": "q4_0", "llamacpp_args": "--flash-attn off"})


def test_llamacpp_args_do_not_set_the_cache_types_behind_the_options() -> None:
    for flag in ("--cache-type-k q8_0", "--cache-type-v=q4_0"):
        with pytest.raises(BadRequest, match="option instead") as err:
            parse_llamacpp_args(flag)
        assert err.value.param == "llamacpp_args"


def test_the_engine_makes_its_contexts_with_the_types_and_flash_attention() -> None:
    def cfg(**flags: object) -> EngineConfig:
        return EngineConfig("m.gguf", "m", flags=EngineFlags.model_validate(flags))

    plain = worker_config(cfg())
    assert (plain.type_k, plain.type_v, plain.flash_attn) == (1, 1, -1)
    quant = worker_config(cfg(cache_type_k="q8_0", cache_type_v="q4_0"))
    assert (quant.type_k, quant.type_v, quant.flash_attn) == (8, 2, 1)
    keys_only = worker_config(cfg(cache_type_k="q8_0", flash_attn="off"))
    assert (keys_only.type_k, keys_only.type_v, keys_only.flash_attn) == (8, 1, 0)
    embed = embed_worker_config(cfg(cache_type_k="q8_0", cache_type_v="q8_0"), 512)
    assert (embed.type_k, embed.type_v, embed.flash_attn) == (8, 8, 1)


def test_the_fit_check_and_automatic_size_count_the_smaller_cells(tmp_path: Path) -> None:
    """SmolLM2's 23,040 bytes a token at f16 (llama.cpp: 11.25 MiB for 512 cells) are
    12,240 at q8_0 (5.98 MiB) and 6,480 at q4_0 (3.16 MiB)."""
    info = read_info(smol_like(tmp_path / "m.gguf", ctx=1 << 20))
    assert kv_bytes_per_token(info) == 23040
    assert kv_bytes_per_token(info, ("q8_0", "q8_0")) == 12240
    assert kv_bytes_per_token(info, ("q4_0", "q4_0")) == 6480
    assert kv_bytes_per_token(info, ("q8_0", "f16")) == (12240 + 23040) // 2

    # 4 workers x 131072 tokens: 11.25 GiB of f16 cells, 3.2 GiB of q4_0 ones.
    def flags(kv: str) -> EngineFlags:
        return EngineFlags(ctx_size=131072, workers=4, cache_type_k=kv, cache_type_v=kv)

    with pytest.raises(BadRequest, match="cannot fit"):
        check_fit(info, flags("f16"), ModelType.LLM, memory_bytes=8 * GIB)
    check_fit(info, flags("q4_0"), ModelType.LLM, memory_bytes=8 * GIB)
    small = 200 << 20
    options = Settings().model_options({"ctx_size": -1, "cache_type_k": "q8_0"})
    options = options.model_copy(update={"cache_type_v": "q8_0"})
    workers = workers_of(options, Settings(), info)
    f16_size = auto_ctx_size(info, workers=workers, memory_bytes=small)
    q8 = ("q8_0", "q8_0")
    q8_size = auto_ctx_size(info, workers=workers, memory_bytes=small, kv_types=q8)
    assert q8_size > f16_size * 1.8
    assert resolved(options, info, Settings(), memory_bytes=small).ctx_size == q8_size


def test_a_head_the_blocks_do_not_divide_is_a_400_naming_the_type(tmp_path: Path) -> None:
    import gguf
    import numpy as np

    path = tmp_path / "odd.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(2048)
    w.add_block_count(2)
    w.add_embedding_length(80)  # 2 heads of 40 values: not a multiple of 32
    w.add_head_count(2)
    w.add_tensor("a.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    info = read_info(path)
    check_fit(info, EngineFlags(ctx_size=1024, workers=1), ModelType.LLM, memory_bytes=GIB)
    quantized = EngineFlags(ctx_size=1024, workers=1, cache_type_v="q8_0")
    with pytest.raises(BadRequest, match="40 values") as err:
        check_fit(info, quantized, ModelType.LLM, memory_bytes=GIB)
    assert err.value.param == "cache_type_v"


def test_the_backend_is_started_with_the_types(tmp_path: Path) -> None:
    model = ModelInfo(name="M", checkpoint=str(smol_like(tmp_path / "m.gguf")))
    options = Settings().model_options({"cache_type_k": "q8_0", "cache_type_v": "q8_0"})
    argv = plan_launch(model, options, Settings(), resolve_path, memory_bytes=8 * GIB).argv(1)
    at = argv.index("--cache-type-k")
    assert argv[at + 1] == "q8_0" and argv[argv.index("--cache-type-v") + 1] == "q8_0"
