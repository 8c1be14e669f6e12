"""The roofline cost model, with iteration times computed by hand.

Llama-3-8B on an H200 at 50 % of every peak (989 TFLOP/s, 4.8 TB/s), 1 ms overhead:
body parameters = 8.03e9 − 2 × 128256 × 4096 (untied embedding and LM head),
LM head = 128256 × 4096 = 525,336,576, KV = 131,072 B/token.
"""

from __future__ import annotations

import pytest

from lyra_simpy.cost import COST_MODELS, BatchShape, RooflineCost, RooflineCostConfig

HEAD = 128256 * 4096
BODY = 8.03e9 - 2 * HEAD
FLOPS = 989e12 * 0.5
BYTES = 4.8e12 * 0.5
KV = 131072
WEIGHTS_S = (BODY + HEAD) * 2 / BYTES
PAIR_FLOPS = 4 * 32 * 128 * 32  # heads x head_dim x layers


def cost(max_batch: int = 64, **kw) -> RooflineCost:
    base = {
        "name": "roofline", "hardware": "h200_sxm", "model": "llama_3_8b",
        "compute_efficiency": 0.5, "bandwidth_efficiency": 0.5, "overhead_ms": 1.0,
    }  # fmt: skip
    return RooflineCost(RooflineCostConfig(**{**base, **kw}), max_batch)


def test_registered():
    assert COST_MODELS["roofline"] is RooflineCost


def test_decode_is_weight_and_kv_bound_by_hand():
    # 8 sequences at 1024 tokens of context each: every term memory bound
    c = cost()
    want = 1e-3 + WEIGHTS_S + KV * (8 * 1024 + 8) / BYTES
    assert pytest.approx(6.2539, abs=1e-4) == WEIGHTS_S * 1000
    assert c.decode_span_s(8, 8 * 1024, 8, 1)[0] == pytest.approx(want, rel=1e-12)
    assert c.iteration_s(BatchShape(0, 0, 0, 8, 8, 8 * 1024)) == c.decode_span_s(8, 8192, 8, 1)[0]
    assert want * 1000 == pytest.approx(7.7017, abs=1e-4)


def test_prefill_is_compute_bound_by_hand():
    # one 2048-token prompt, nothing cached: causal pairs = 2048² / 2
    c = cost()
    linear = (2 * BODY * 2048 + 2 * HEAD * 1) / FLOPS
    attention = PAIR_FLOPS * (2048 * 2048 - 2048 * 2048 / 2) / FLOPS
    want = 1e-3 + linear + attention
    got = c.iteration_s(BatchShape(1, 2048, 2048 * 2048, 0, 0, 0))
    assert got == pytest.approx(want, rel=1e-12)
    assert linear * 1000 == pytest.approx(57.81, abs=0.01)
    assert attention * 1000 == pytest.approx(2.2235, abs=1e-4)


def test_fp8_kv_halves_the_kv_read_and_fp8_weights_the_weight_read():
    base, kv8, w8 = cost(), cost(kv_dtype="fp8"), cost(weight_dtype="fp8")
    ctx = 64 * 4096
    kv_part = base.decode_span_s(64, ctx, 64, 1)[0] - 1e-3 - WEIGHTS_S
    assert kv8.decode_span_s(64, ctx, 64, 1)[0] - 1e-3 - WEIGHTS_S == pytest.approx(kv_part / 2)
    assert w8.decode_span_s(1, 0, 1, 1)[0] - 1e-3 - KV / BYTES == pytest.approx(WEIGHTS_S / 2)


def test_tensor_parallel_splits_work_and_adds_all_reduces():
    c = cost(tp=2)
    # 64 all-reduces (2 per layer) of 4 rows x 4096 x 2 B, ring: 2 (tp-1)/tp = 1 of it
    allreduce = 64 * (10e-6 + 1.0 * 4 * 4096 * 2 / 450e9)
    want = 1e-3 + WEIGHTS_S / 2 + KV / 2 * (4 * 100 + 4) / BYTES + allreduce
    assert c.decode_span_s(4, 400, 4, 1)[0] == pytest.approx(want, rel=1e-12)


def test_padding_charges_the_captured_size_for_decode_only():
    padded, eager = cost(padding=[16, 64]), cost()
    # 3 decodes run as the 16-row graph: linear layers pay 16 rows, KV only what is read
    assert padded.decode_span_s(3, 300, 3, 1) == eager.decode_span_s(16, 300, 16, 1)
    assert (
        padded.iteration_s(BatchShape(0, 0, 0, 3, 3, 300)) == eager.decode_span_s(16, 300, 3, 1)[0]
    )
    # mixed iterations run eagerly (SGLang): no padding
    mixed = BatchShape(1, 100, 100 * 100, 3, 3, 300)
    assert padded.iteration_s(mixed) == eager.iteration_s(mixed)
    # above the largest captured size: eager
    assert padded.decode_span_s(65, 650, 65, 1) == eager.decode_span_s(65, 650, 65, 1)


def test_compute_bound_decode_at_large_batch_and_context():
    # a huge batch makes the linear layers compute bound: time grows with the rows
    c = cost()
    small, big = c.decode_span_s(1024, 0, 1024, 1)[0], c.decode_span_s(4096, 0, 4096, 1)[0]
    assert big - 1e-3 == pytest.approx(
        (2 * BODY * 4096 + 2 * HEAD * 4096) / FLOPS + KV * 4096 / BYTES, rel=1e-12
    )
    assert big > small


def test_hybrid_model_reads_the_state_of_each_sequence():
    c = cost(model="qwen3_5_4b")
    state = 24 * (32 * 128 * 128 * 4 + 3 * 8192 * 2)
    one, two = c.decode_span_s(1, 0, 1, 1)[0], c.decode_span_s(2, 0, 2, 1)[0]
    # weights do not change with the batch here; each sequence adds its state and 1 token KV
    assert two - one == pytest.approx((state + 32768) / BYTES, rel=1e-9)


@pytest.mark.parametrize("k", [1, 5, 32, 33, 200])
def test_decode_span_elements_equal_single_steps_bit_for_bit(k):
    for c in (cost(), cost(tp=2, padding="max_batch"), cost(model="qwen3_5_4b", padding=[4, 8])):
        span = c.decode_span_s(5, 777, 5, k)
        singles = [c.decode_span_s(5, 777 + 5 * j, 5, 1)[0] for j in range(k)]
        assert span == singles
        assert all(type(v) is float for v in span)


def test_describe_names_the_catalog_entries():
    info = cost().describe()
    assert info["kv_bytes_per_token"] == KV
    assert info["weights_read_ms"] == pytest.approx(WEIGHTS_S * 1000)


# -- speculative verification and eager launches ------------------------------------------


def test_verify_tokens_run_the_linear_layers_and_attend_to_the_context_by_hand():
    # 64 sequences at 2048 tokens each verify 3 drafts: 256 tokens through the linear
    # layers (compute bound: 2 x BODY x 256 / FLOPS > weights), 4 pairs per context token
    c = cost()
    ctx = 64 * 2048
    linear = (2 * BODY * 256 + 2 * HEAD * 64) / FLOPS
    attention = max(PAIR_FLOPS * 4 * ctx / FLOPS, KV * (ctx + 256) / BYTES)
    want = 1e-3 + max(linear, WEIGHTS_S) + attention
    got = c.iteration_s(BatchShape(0, 0, 0, 64, 64, ctx, verify_tokens=3 * 64))
    assert got == pytest.approx(want, rel=1e-12)
    assert got > c.decode_span_s(64, ctx, 64, 1)[0]  # verification is not free


def test_verify_tokens_are_padded_with_their_rows():
    # 5 sequences in the graph of 8 verify 3 drafts each for all 8 rows
    c = cost(padding=[4, 8])
    five = c.iteration_s(BatchShape(0, 0, 0, 5, 5, 5000, verify_tokens=15))
    eight = c.iteration_s(BatchShape(0, 0, 0, 8, 8, 5000, verify_tokens=24))
    assert five == eight


def small_model(**kw) -> RooflineCost:
    base = {"name": "roofline", "hardware": "b200", "model": "qwen3_5_4b", "overhead_ms": 1.5}
    return RooflineCost(RooflineCostConfig(**{**base, **kw}), 64)


def test_eager_iterations_are_launch_bound_and_graphs_are_not():
    eager = small_model(padding=[1, 2, 4, 8], eager_launch_ms=5.0)
    plain = small_model(padding=[1, 2, 4, 8])
    # a batch of 4 replays its graph: the launch floor does not apply
    assert eager.decode_span_s(4, 4000, 4, 1) == plain.decode_span_s(4, 4000, 4, 1)
    assert plain.decode_span_s(9, 9000, 9, 1)[0] < 6.5e-3  # the GPU work alone
    # 9 rows are above the largest captured size: launched kernel by kernel
    assert eager.decode_span_s(9, 9000, 9, 1)[0] == 1.5e-3 + 5e-3
    # a short prompt runs eagerly too (prefill is never a graph in SGLang)
    assert eager.iteration_s(BatchShape(1, 16, 256, 0, 0, 0)) == 1.5e-3 + 5e-3
    # without captured sizes every decode is eager; a long prefill is compute bound
    none = small_model(eager_launch_ms=5.0)
    assert none.decode_span_s(1, 100, 1, 1)[0] == 1.5e-3 + 5e-3
    long = BatchShape(1, 8192, 8192 * 8192, 0, 0, 0)
    assert none.iteration_s(long) == plain.iteration_s(long) > 6.5e-3


@pytest.mark.parametrize("rows", [4, 9])
def test_eager_floor_keeps_decode_spans_bit_for_bit(rows):
    c = small_model(padding=[1, 2, 4, 8], eager_launch_ms=2.0)
    span = c.decode_span_s(rows, 100, rows, 40)
    for j, t in enumerate(span):
        assert t == c.decode_span_s(rows, 100 + j * rows, rows, 1)[0]
