"""Hardware and model catalogs: KV bytes and capacity computed by hand, validation."""

from __future__ import annotations

import pytest

from lyra_simpy import ScenarioError
from lyra_simpy.cost.catalog import (
    CatalogError,
    hardware_catalog,
    kv_bytes_per_token,
    kv_capacity_blocks,
    model_catalog,
    parse_hardware,
    parse_models,
    state_bytes_per_request,
    weight_bytes,
)

GIB = 2**30
DEVICES = {
    "a100_sxm", "h100_sxm", "h200_sxm", "b200", "mi300x", "gaudi2", "gaudi3", "max1550",
    "cpu_generic",
}  # fmt: skip
MODELS = {
    "llama_2_7b", "llama_2_70b", "llama_3_8b", "llama_3_70b", "qwen3_4b", "qwen3_8b", "qwen3_5_4b",
    "gemma_3_270m",
}  # fmt: skip


def test_catalogs_hold_the_issue_entries():
    assert set(hardware_catalog()) == DEVICES
    assert set(model_catalog()) == MODELS


def test_kv_bytes_per_token_by_hand():
    m = model_catalog()
    # 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes
    assert kv_bytes_per_token(m["llama_3_8b"], "bf16") == 32 * 8 * 128 * 2 * 2 == 131072
    assert kv_bytes_per_token(m["llama_3_8b"], "fp8") == 65536  # FP8 halves it
    assert kv_bytes_per_token(m["llama_2_7b"], "bf16") == 32 * 32 * 128 * 2 * 2 == 524288
    assert kv_bytes_per_token(m["qwen3_8b"], "bf16") == 36 * 8 * 128 * 2 * 2 == 147456


def test_hybrid_model_keeps_kv_in_full_layers_and_a_state_per_request():
    q = model_catalog()["qwen3_5_4b"]
    assert (q.attention_layers, q.linear_layers) == (8, 24)
    # only the 8 full-attention layers: 8 x 4 KV heads x 256 x 2 x 2 bytes
    assert kv_bytes_per_token(q, "bf16") == 8 * 4 * 256 * 2 * 2 == 32768
    # 24 Gated DeltaNet layers x (32 x 128 x 128 x 4 B + 3 x 8192 x 2 B)
    assert state_bytes_per_request(q) == 24 * (32 * 128 * 128 * 4 + 3 * 8192 * 2)
    assert state_bytes_per_request(model_catalog()["llama_3_8b"]) == 0


def test_kv_capacity_by_hand():
    h200, llama = hardware_catalog()["h200_sxm"], model_catalog()["llama_3_8b"]
    got = kv_capacity_blocks(
        h200, llama, tp=1, weight_dtype="bf16", kv_dtype="bf16", block_size=16,
        mem_fraction=0.9, activation_reserve_gib=3.5, max_running=256,
    )  # fmt: skip
    free = (141 * 0.9 - 3.5) * GIB - 8.03e9 * 2
    assert got == int(free // (131072 * 16))
    assert 55_000 < got < 56_000  # about 890 k tokens of KV
    fp8 = kv_capacity_blocks(
        h200, llama, tp=1, weight_dtype="bf16", kv_dtype="fp8", block_size=16,
        mem_fraction=0.9, activation_reserve_gib=3.5, max_running=256,
    )  # fmt: skip
    assert fp8 in (2 * got, 2 * got + 1)
    two = kv_capacity_blocks(
        h200, llama, tp=2, weight_dtype="bf16", kv_dtype="bf16", block_size=16,
        mem_fraction=0.9, activation_reserve_gib=3.5, max_running=256,
    )  # fmt: skip
    assert two == int((2 * (141 * 0.9 - 3.5) * GIB - 8.03e9 * 2) // (131072 * 16))


def test_hybrid_capacity_reserves_one_state_per_running_slot():
    hw, q = hardware_catalog()["h100_sxm"], model_catalog()["qwen3_5_4b"]

    def blocks(running):
        return kv_capacity_blocks(
            hw, q, tp=1, weight_dtype="bf16", kv_dtype="bf16", block_size=16,
            mem_fraction=0.9, activation_reserve_gib=3.5, max_running=running,
        )  # fmt: skip

    free = (80 * 0.9 - 3.5) * GIB - weight_bytes(q, "bf16") - 64 * state_bytes_per_request(q)
    assert blocks(64) == int(free // (32768 * 16))
    assert blocks(1) > blocks(64)


def test_weights_that_do_not_fit_are_one_clear_line():
    with pytest.raises(CatalogError, match=r"^Llama-3-70B .* leaves no KV memory on 1 x "):
        kv_capacity_blocks(
            hardware_catalog()["a100_sxm"], model_catalog()["llama_3_70b"], tp=1,
            weight_dtype="bf16", kv_dtype="bf16", block_size=16, mem_fraction=0.9,
            activation_reserve_gib=3.5, max_running=8,
        )  # fmt: skip


def test_catalog_numbers_are_sane():
    for name, hw in hardware_catalog().items():
        assert hw.hbm_bandwidth_tbps > 0, name
        assert 0.05 < hw.hbm_bandwidth_tbps < 10, name
        assert 50 < hw.bf16_tflops < 3000, name  # dense, not the sparse datasheet figure
        assert hw.fp8_tflops is None or hw.bf16_tflops <= hw.fp8_tflops <= 2.01 * hw.bf16_tflops
        assert 16 <= hw.memory_gib <= 1024, name
        assert hw.interconnect_gbps > 0, name


@pytest.mark.parametrize("name", sorted(MODELS - {"qwen3_5_4b"}))
def test_parameter_count_matches_the_shape(name):
    """Catches typos: layers x (attention projections + gated MLP) + embeddings."""
    m = model_catalog()[name]
    h, hd = m.hidden_size, m.head_dim
    per_layer = h * (m.num_heads + 2 * m.num_kv_heads) * hd + m.num_heads * hd * h
    per_layer += 3 * h * m.intermediate_size
    total = m.num_layers * per_layer + m.vocab_size * h * (1 if m.tied_embeddings else 2)
    assert total == pytest.approx(m.params_b * 1e9, rel=0.02)


def test_catalog_validation_error_is_one_line():
    entry = dict(hardware_catalog()["h100_sxm"].model_dump(), hbm_bandwidth_tbps=-1)
    with pytest.raises(CatalogError) as info:
        parse_hardware({"bad_gpu": entry})
    assert (
        str(info.value)
        == "hardware.yaml: bad_gpu.hbm_bandwidth_tbps: got -1, must be greater than 0"
    )
    with pytest.raises(CatalogError, match=r"^models.yaml: m: linear_state_bytes: must be > 0"):
        parse_models({"m": dict(model_catalog()["qwen3_5_4b"].model_dump(), linear_state_bytes=0)})
    with pytest.raises(CatalogError, match=r"^models.yaml: m.bogus: unknown field"):
        parse_models({"m": dict(model_catalog()["qwen3_4b"].model_dump(), bogus=1)})
    with pytest.raises(CatalogError, match="must be a mapping"):
        parse_models([])


def test_num_blocks_auto_resolves_from_the_catalog(make_scenario):
    sc = make_scenario(
        {
            "cost": {"name": "roofline", "hardware": "h200_sxm", "model": "llama_3_8b"},
            "kv_cache": {"block_size": 16, "num_blocks": "auto"},
        }
    )
    assert sc.kv_cache.num_blocks == kv_capacity_blocks(
        hardware_catalog()["h200_sxm"], model_catalog()["llama_3_8b"], tp=1,
        weight_dtype="bf16", kv_dtype="bf16", block_size=16, mem_fraction=0.9,
        activation_reserve_gib=3.5, max_running=4,
    )  # fmt: skip
    assert sc.kv_cache.mem_fraction == 0.9  # what was used shows in the manifest
    assert sc.resolved()["kv_cache"]["num_blocks"] == sc.kv_cache.num_blocks


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"kv_cache.num_blocks": "auto"},
            "kv_cache.num_blocks: got 'auto' with cost 'linear', needs a catalog cost model",
        ),
        ({"kv_cache.mem_fraction": 0.8}, "kv_cache: mem_fraction: only used with num_blocks: auto"),
        (
            {"cost": {"name": "roofline", "hardware": "h300", "model": "llama_3_8b"}},
            "cost.roofline.hardware: got 'h300', must be one of ['a100_sxm'",
        ),
        (
            {"cost": {"name": "roofline", "hardware": "h100_sxm", "model": "llama_3_8b", "tp": 3}},
            "tp: got 3, must divide the model's 32 heads",
        ),
        (
            {
                "cost": {"name": "roofline", "hardware": "a100_sxm", "model": "llama_3_70b"},
                "kv_cache.num_blocks": "auto",
            },
            "kv_cache.num_blocks: auto: Llama-3-70B (and 3.1-70B) (131.4 GiB of bf16 weights) "
            "leaves no KV memory on 1 x NVIDIA A100-SXM4 80GB at mem_fraction 0.9",
        ),
    ],
)
def test_scenario_errors_are_one_line(make_scenario, changes, message):
    with pytest.raises(ScenarioError) as info:
        make_scenario(changes)
    text = str(info.value)
    assert message in text
    assert "\n" not in text
