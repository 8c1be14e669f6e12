"""CUDA-graph padding and the linear cost model, numbers computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from lyra_simpy.cost import BatchShape, LinearCost, LinearCostConfig
from lyra_simpy.cost.padding import Padder


@pytest.mark.parametrize(("rows", "padded"), [(0, 0), (1, 1), (7, 7), (64, 64)])
def test_padder_none_is_identity(rows, padded):
    assert Padder("none", 16)(rows) == padded


@pytest.mark.parametrize(("rows", "padded"), [(1, 16), (15, 16), (16, 16), (17, 17), (40, 40)])
def test_padder_max_batch_pads_to_width_and_runs_eager_above(rows, padded):
    assert Padder("max_batch", 16)(rows) == padded


@pytest.mark.parametrize(
    ("rows", "padded"), [(1, 1), (2, 2), (3, 4), (5, 8), (8, 8), (9, 16), (24, 24), (25, 25)]
)
def test_padder_captured_sizes_with_eager_fallback(rows, padded):
    # unsorted, with a duplicate: the padder sorts and deduplicates
    assert Padder([16, 1, 2, 4, 8, 24, 8], 999)(rows) == padded


def cost(max_batch=16, **kw) -> LinearCost:
    return LinearCost(LinearCostConfig(**kw), max_batch)


def shape(prefill_seqs=0, prefill_tokens=0, decode_seqs=0, rows=None, context=0) -> BatchShape:
    rows = decode_seqs if rows is None else rows
    return BatchShape(prefill_seqs, prefill_tokens, 0, decode_seqs, rows, context)


def test_classroom_engine_decode_padded_to_16():
    c = cost(base_ms=15, per_seq_ms=1, padding="max_batch")
    assert c.iteration_s(shape(decode_seqs=5)) == pytest.approx(0.031, abs=1e-15)
    assert c.iteration_s(shape(decode_seqs=16)) == pytest.approx(0.031, abs=1e-15)
    np.testing.assert_allclose(c.decode_span_s(5, 0, 5, 3), [0.031] * 3, rtol=0, atol=1e-15)


def test_mixed_iteration_is_not_padded():
    c = cost(base_ms=15, per_seq_ms=1, padding="max_batch")
    # 2 prefills + 3 decodes run eagerly: 15 + 5 ms
    assert c.iteration_s(shape(prefill_seqs=2, prefill_tokens=100, decode_seqs=3)) == (
        pytest.approx(0.020, abs=1e-15)
    )


def test_pad_prefill_charges_prefill_iterations_the_padded_width():
    # the lab's rule read as "a prefill costs a decode at that width": 15 + 16 ms
    c = cost(base_ms=15, per_seq_ms=1, padding="max_batch", pad_prefill=True)
    assert c.iteration_s(shape(prefill_seqs=1, prefill_tokens=300)) == pytest.approx(0.031)
    assert c.iteration_s(shape(prefill_seqs=2, prefill_tokens=9, decode_seqs=3)) == (
        pytest.approx(0.031)
    )
    # above the padded width an iteration runs eagerly: 15 + 20 ms
    assert c.iteration_s(shape(prefill_seqs=4, prefill_tokens=9, decode_seqs=16)) == (
        pytest.approx(0.035)
    )
    # without padding the switch changes nothing: 15 + 1 ms
    plain = cost(base_ms=15, per_seq_ms=1, pad_prefill=True)
    assert plain.iteration_s(shape(prefill_seqs=1, prefill_tokens=300)) == pytest.approx(0.016)


def test_unpadded_decode():
    c = cost(base_ms=15, per_seq_ms=1)
    assert c.iteration_s(shape(decode_seqs=5)) == pytest.approx(0.020, abs=1e-15)


def test_static_rows_are_charged_not_live_sequences():
    c = cost(base_ms=10, per_seq_ms=2)
    assert c.iteration_s(shape(decode_seqs=1, rows=4)) == pytest.approx(0.018, abs=1e-15)


def test_all_terms():
    c = cost(
        base_ms=7,
        per_seq_ms=0.5,
        per_prefill_token_ms=0.09,
        per_context_token_ms=0.001,
        padding=[4, 8],
    )
    # mixed: 7 + 0.5 × (1 + 3) + 0.09 × 200 + 0.001 × 300 (no padding)
    t = c.iteration_s(shape(prefill_seqs=1, prefill_tokens=200, decode_seqs=3, context=300))
    assert t == pytest.approx((7 + 2 + 18 + 0.3) / 1000, rel=1e-12)
    # decode-only, 3 rows padded to 4: 7 + 2 + 0.3
    t = c.iteration_s(shape(decode_seqs=3, context=300))
    assert t == pytest.approx(9.3 / 1000, rel=1e-12)


def test_decode_span_context_grows_per_iteration():
    c = cost(base_ms=10, per_seq_ms=1, per_context_token_ms=0.01)
    # 2 rows, context 100 growing by 2 tokens per iteration
    expected = [(10 + 2 + 0.01 * (100 + 2 * j)) / 1000 for j in range(4)]
    np.testing.assert_allclose(c.decode_span_s(2, 100, 2, 4), expected, rtol=1e-12)


def test_decode_span_first_iteration_equals_iteration_s():
    c = cost(base_ms=3, per_seq_ms=0.7, per_context_token_ms=0.003, padding=[2, 8])
    single = c.iteration_s(shape(decode_seqs=5, context=1234))
    span = c.decode_span_s(5, 1234, 5, 1)
    assert len(span) == 1
    assert span[0] == pytest.approx(single, rel=1e-15)


@pytest.mark.parametrize("k", [5, 32, 33, 400])
def test_decode_span_element_j_is_the_single_iteration_at_its_context(k):
    """The protocol's exactness rule, on both the short (Python) and long (NumPy) paths:
    fused runs and single steps must charge the same doubles."""
    c = cost(base_ms=7.1, per_seq_ms=0.37, per_context_token_ms=0.00026, padding=[4, 16])
    span = c.decode_span_s(11, 98765, 11, k)
    assert all(isinstance(v, float) for v in span)
    for j in range(k):
        assert span[j] == c.decode_span_s(11, 98765 + 11 * j, 11, 1)[0]
