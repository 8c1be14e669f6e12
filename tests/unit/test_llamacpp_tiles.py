"""What llama.cpp's CPU flash attention computes for prompt tokens (issue 12): whole
64 × 64 (query row, KV cell) tiles the mask leaves open, or each open cell in a pass of
fewer than 64 rows (``ggml_compute_forward_flash_attn_ext_f16``): the pairs computed of
``step_attention`` against a reference that lays the cells out one by one and builds each
row's mask; the probe rows of prompts sent together; the fit and the cost of the
term."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from lyra_simpy.calibration.fit import fit_profile, predict_ms
from lyra_simpy.calibration.fitfile import format_report
from lyra_simpy.calibration.profiles import read_profile, write_profile
from lyra_simpy.cost.base import BatchShape
from lyra_simpy.cost.profiled import ProfileCost, ProfileCostConfig
from lyra_simpy.live.llamacpp_probes import COUNT_COLUMNS, prompt_counts
from lyra_simpy.policies import LlamaCppConfig
from lyra_simpy.policies.llamacpp_attention import FA_TILE, step_attention

DATA = Path(__file__).resolve().parents[1] / "data"


def reference(
    config: LlamaCppConfig, decode_tokens: int, chunks: list[tuple[int, int]], held: int
) -> int:
    """The computed pairs by brute force, on an explicit layout: each chunk's earlier
    cells a tile-aligned block of its own at the start of the buffer (inside the held
    cells, which the decoding sequences fill), the step's rows at cells held, held + 1,
    ...; a decoding row sees every held cell and its own; a prompt row its earlier block
    and its chunk's rows up to its own."""
    nub = config.ubatch_tokens
    total = 0
    if not config.kv_unified:
        for before, take in chunks:
            for p0 in range(0, take, nub):
                rows = range(before + p0, before + min(p0 + nub, take))  # positions
                total += _pass(
                    [set(range(pos + 1)) for pos in rows],
                )
        return total
    blocks, at = [], 0
    for before, _ in chunks:
        blocks.append(set(range(at, at + before)))
        at += -(-before // FA_TILE) * FA_TILE
    assert at <= held or not decode_tokens, "the reference's blocks must fit the held cells"
    seen: list[set[int] | None] = [set(range(held)) | {held + j} for j in range(decode_tokens)]
    row = decode_tokens
    for c, (_, take) in enumerate(chunks):
        first = held + row
        for i in range(take):
            seen.append(blocks[c] | set(range(first, first + i + 1)))
        row += take
    for u0 in range(0, row, nub):
        ub = seen[u0 : u0 + nub]
        prompt_rows = [k for k in range(len(ub)) if u0 + k >= decode_tokens]
        if not prompt_rows:
            continue
        total += _pass(ub, prompt_only=[k >= decode_tokens - u0 for k in range(len(ub))])
    return total


def _pass(rows: list, prompt_only: list[bool] | None = None) -> int:
    """One pass: rows' visible cells → computed pairs (tiled at >= 64 rows)."""
    if len(rows) < FA_TILE:
        keep = prompt_only or [True] * len(rows)
        return sum(len(r) for r, k in zip(rows, keep, strict=True) if k)
    total = 0
    for q0 in range(0, len(rows), FA_TILE):
        tiles = {cell // FA_TILE for r in rows[q0 : q0 + FA_TILE] for cell in r}
        total += FA_TILE * FA_TILE * len(tiles)
    return total


UNIFIED = LlamaCppConfig(n_parallel=4, n_ctx=8192, kv_unified=True)
PER_SLOT = LlamaCppConfig(n_parallel=4, n_ctx=8192)


@pytest.mark.parametrize("n_ubatch", [512, 100, 64])
@pytest.mark.parametrize("kvu", [True, False], ids=["kvu", "per-slot"])
def test_computed_pairs_match_a_cell_by_cell_reference(n_ubatch, kvu):
    rng = np.random.default_rng(n_ubatch + kvu)
    config = (UNIFIED if kvu else PER_SLOT).model_copy(update={"n_ubatch": n_ubatch})
    for _ in range(40):
        n = int(rng.integers(1, 4))
        chunks = [
            (int(rng.choice([0, 0, 37, 64, 130])), int(rng.integers(1, 300))) for _ in range(n)
        ]
        decoders = int(rng.choice([0, 0, 3, 70]))  # (70: decode rows in two query tiles)
        blocks = sum(-(-b // FA_TILE) * FA_TILE for b, _ in chunks)
        held = blocks + decoders * int(rng.integers(20, 200))
        want = reference(config, decoders, chunks, held)
        assert step_attention(config, decoders, chunks, held).computed == want, (chunks, decoders)


def test_a_lone_prompt_computes_the_tiles_below_its_diagonal():
    # 296 rows from nothing: query tiles 0..4 (the last of 40 rows, padded), each the KV
    # tiles up to its own: 1 + 2 + 3 + 4 + 5 tiles of 64 x 64
    assert step_attention(UNIFIED, 0, [(0, 296)], 0).computed == 15 * 64 * 64
    # its last 4 tokens: a pass below a tile, each row its own cells: 297 + ... + 300
    assert step_attention(UNIFIED, 0, [(296, 4)], 296).computed == 297 + 298 + 299 + 300
    # where the pass spans 296 x 512 cells (n_kv) and 4 x 512
    assert step_attention(UNIFIED, 0, [(0, 296)], 0).spanned == 296 * 512


def test_a_prompt_beside_decoders_computes_their_cells_in_its_first_tile():
    # 3 decoders hold 603 cells (tiles 0-9); the batch is their 3 rows then 296 prompt
    # rows at cells 606-901. Query tile 0 (3 decode + 61 prompt rows): tiles 0-10 (11);
    # tiles 1-4: the prompt's tiles from 9 (cell 606) to cells 730, 794, 858, 901: 3, 4,
    # 5, 6. With -kvu the pass spans 299 rows x 1024 cells, 296 of them the prompt's
    assert step_attention(UNIFIED, 3, [(0, 296)], 603).computed == (11 + 3 + 4 + 5 + 6) * 4096
    assert step_attention(UNIFIED, 3, [(0, 296)], 603).spanned == 296 * 1024
    swa = UNIFIED.model_copy(update={"sliding_window": True, "n_ctx": 4096})
    # the probe row: that step, then the prompt's last 4 tokens beside the decoders
    # (7 rows: below a tile) at positions 296-299
    assert prompt_counts(swa, 1, 300, 3, 201)[5] == 29 * 4096 + 297 + 298 + 299 + 300


def test_prompts_sent_together_span_the_cells_of_one_but_compute_their_own():
    swa = LlamaCppConfig(n_parallel=4, n_ctx=4096, kv_unified=True, sliding_window=True)
    # four prompts of 290: one step of 4 x 286 (three passes: 512, 512, 120) with no
    # logits, then one of 4 x 4 with them; a checkpoint for each
    four = prompt_counts(swa, 4, 290, 0, 0)
    assert four[:4] == (2, 4, 4, 1)
    one = prompt_counts(swa, 1, 1160, 0, 0)
    assert one[:4] == (3, 4, 2, 1)  # 644, 512 and 4 tokens
    # about the same cells spanned, under a third of the pairs computed
    assert four[4] / one[4] == pytest.approx(0.94, abs=0.01)
    assert four[5] / one[5] == pytest.approx(0.32, abs=0.01)
    assert (
        four[5]
        == step_attention(swa, 0, [(0, 286)] * 4, 0).computed
        + step_attention(swa, 0, [(286, 4)] * 4, 4 * 286).computed
    )
    # per-slot KV, -b 64 (stops 64 and 4 before the end): a step's room goes to the slots
    # in order — (36, 28), (60, 4), (4, 4: one pass, equal chunks in a run), (-, 60),
    # (-, 4); checkpoints: slot 0 in steps 2 and 3, slot 1 in 4 and 5. Every pass is
    # below a tile: each token computes its own cells, 2 x (1 + ... + 100)
    small = LlamaCppConfig(n_parallel=2, n_ctx=2048, n_batch=64, sliding_window=True)
    assert prompt_counts(small, 2, 100, 0, 0) == (5, 7, 4, 2, 51200, 2 * 5050)


def test_the_fit_separates_cells_spanned_from_pairs_computed(tmp_path):
    # -kvu probe rows as lyra-simpy profile writes them, lone prompts and prompts sent
    # together, priced by known terms: the fit gives each back
    swa = LlamaCppConfig(n_parallel=4, n_ctx=4096, kv_unified=True, sliding_window=True)
    true = {"fixed_ms": 4.0, "per_prefill_token_ms": 1.2, "per_prefill_attention_ms": 2e-4,
            "per_output_pass_ms": 12.0, "per_computed_attention_ms": 4e-4,
            "per_extra_pass_ms": 1.0}  # fmt: skip
    rows = []
    for b, p in [(1, 4), (1, 8), (1, 200), (1, 300), (1, 400), (1, 800), (2, 200), (4, 200),
                 (2, 400), (4, 400)]:  # fmt: skip
        steps, passes, ckpt, outs, spanned, computed = prompt_counts(swa, b, p, 0, 0)
        ms = (true["fixed_ms"] * steps + true["per_prefill_token_ms"] * b * p
              + true["per_prefill_attention_ms"] * spanned + true["per_output_pass_ms"] * outs
              + true["per_computed_attention_ms"] * computed
              + true["per_extra_pass_ms"] * (passes - steps))  # fmt: skip
        rows.append({"phase": "prefill", "batch_size": b, "input_tokens": p, "context_len": 0,
                     "latency_ms": ms, **dict(zip(COUNT_COLUMNS, (steps, passes, ckpt, outs,
                                                                   spanned, computed),
                                                   strict=True))})  # fmt: skip
    for b in (1, 2, 4):
        rows.append({"phase": "decode", "batch_size": b, "input_tokens": 0, "context_len": 200,
                     "latency_ms": 4.0 + 12.0 + 0.5 * b, "steps": 1, "passes": 1,
                     "checkpoints": 0, "output_passes": 1, "attention_cells": 0,
                     "attention_computed": 0})  # fmt: skip
    path = tmp_path / "p.csv"
    write_profile(path, rows, COUNT_COLUMNS)
    profile = read_profile(path)
    fit = fit_profile(profile)
    for term, value in true.items():
        assert getattr(fit.coefficients, term) == pytest.approx(value, rel=1e-6), term
    np.testing.assert_allclose(predict_ms(fit, profile), profile.latency_ms)
    # calibrate's report names every term the fit has, in the units it used
    shown = {line.split()[0]: line for line in format_report(fit).splitlines()[3:13]}
    assert float(shown["per_computed_attention_ms"].split()[1]) == pytest.approx(4e-4)
    assert float(shown["per_output_pass_ms"].split()[1]) == pytest.approx(12.0)
    assert "KV cell its pass spans" in shown["per_prefill_attention_ms"]
    other = format_report(fit_profile(read_profile(DATA / "synthetic_profile.csv")))
    assert "per_output_pass_ms" not in other
    assert "per_computed_attention_ms" not in other
    # without the column (a profile written before it) the term is not measured
    old = tmp_path / "old.csv"
    write_profile(old, rows, COUNT_COLUMNS[:-1])
    before = fit_profile(read_profile(old))
    assert before.coefficients.per_computed_attention_ms == 0.0
    assert "per_computed_attention_ms" in before.fit.unmeasured_terms


def test_the_cost_charges_the_pairs_computed(tmp_path):
    fit = yaml.safe_load((DATA / "synthetic_fit.yaml").read_text())
    fit["profile"] = None
    fit["attention"] = "n_kv"
    fit["coefficients"] = {"fixed_ms": 5.0, "per_prefill_token_ms": 0.05,
                           "per_prefill_attention_ms": 1e-4,
                           "per_computed_attention_ms": 3e-4}  # fmt: skip
    path = tmp_path / "fit.yaml"
    path.write_text(yaml.safe_dump(fit))
    cost = ProfileCost(ProfileCostConfig.model_validate({"name": "profile", "path": str(path)}), 4)
    # a 296-token prompt alone: 296 x 512 cells spanned, 15 tiles computed
    shape = BatchShape(1, 296, 296 * 296, 0, 0, 0, 0, 1, 0, 296 * 512, 1, 15 * 4096)
    want = 5 + 0.05 * 296 + 1e-4 * 296 * 512 + 3e-4 * 15 * 4096
    assert cost.iteration_s(shape) == pytest.approx(want / 1000)
    # a decode-only step computes no prompt pairs: unchanged by the term
    assert cost.iteration_s(BatchShape(0, 0, 0, 2, 2, 100)) == pytest.approx(5e-3)
