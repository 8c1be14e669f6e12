"""The small slices of the published profiles that travel with the package.

``python -m lyra_simpy.calibration.slices FULL OUT`` reads the full published tables
(the project's ``shared/profiles`` folder, whose README gives each file's source, commit
and licence) and writes, under *OUT* and in the same layout and format, only the rows
that :mod:`~lyra_simpy.calibration.published`'s readers use: so
``roofline_check`` scores the same rows from the slice as from the full tables, and
``docs/calibration-roofline.md`` is reproduced from a clone with nothing beside it. Vidur's
A100 Llama-2-7B ``mlp.csv`` (``vidur-profile``'s worked example) is copied whole. The
package keeps the result as ``data/profiles/`` with a README of sources, licences and
SHA-256 (checked by a test).

What each slice keeps (the readers' own selections, see ``published.py``):

- aiconfigurator GEMM tables: bf16 rows at the ``m`` the readers look up (the decode
  batches, the prefill lengths, and 1 for the prefill's LM head), and at each such
  ``m`` only the ``n`` and ``k`` that bracket the Llama-3-8B shapes (the bilinear
  interpolation reads nothing else).
- aiconfigurator attention tables: the Llama-3-8B shape rows at the batches and
  context lengths the readers look up.
- Vidur ``mlp.csv`` (H100 Llama-2-7B, A100 Llama-3-8B): TP 1 rows at the token counts
  read.
- LLM-Inference-Bench ``All_results.csv``, SplitwiseSim ``perf_model.csv``: the rows of
  the configurations read.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

from lyra_simpy.calibration import published as pub

DECODE_BATCHES = (1, 8, 32, 64, 128)
DECODE_CONTEXTS = (512, 2048, 8192)
PREFILL_LENGTHS = (512, 1024, 2048, 4096, 8192)
VIDUR_TOKENS = (1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096)
VIDUR_WHOLE = Path("vidur/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv")
_HEAD = (64128, 4096)


def _brackets(grid: list[int], targets: list[int]) -> set[int]:
    out: set[int] = set()
    for x in targets:
        out.update(pub._bracket(grid, x))
    return out


def _gemm_slice(gemm: Any) -> Any:
    gemm = gemm[gemm.gemm_dtype == "bfloat16"]
    keep = []
    wanted_m = {*DECODE_BATCHES, *PREFILL_LENGTHS, 1}
    ns_target = sorted({n for n, _ in pub._LLAMA3_GEMMS} | {_HEAD[0]})
    ks_target = sorted({k for _, k in pub._LLAMA3_GEMMS} | {_HEAD[1]})
    for m in sorted(wanted_m):
        rows = gemm[gemm.m == m]
        if rows.empty:
            continue
        ns = _brackets(sorted(set(rows.n.astype(int))), ns_target)
        ks = _brackets(sorted(set(rows.k.astype(int))), ks_target)
        keep.append(rows[rows.n.isin(ns) & rows.k.isin(ks)])
    pd = pub._pd()
    return pd.concat(keep)


def _attention_slice(df: Any, generation: bool) -> Any:
    df = pub._llama3_attention(df)
    if generation:
        steps = [c - 1 for c in DECODE_CONTEXTS]
        return df[df.batch_size.isin(DECODE_BATCHES) & df.step.isin(steps)]
    return df[(df.batch_size == 1) & df.isl.isin(PREFILL_LENGTHS)]


def _write_parquet(df: Any, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    df.reset_index(drop=True).to_parquet(out, index=False)


def _write_csv(df: Any, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out, index=False, lineterminator="\n")


def write_slices(full: Path, out: Path) -> list[Path]:
    """Write every slice of the tables under *full* into *out*; return the files."""
    pd = pub._pd()
    written: list[Path] = []
    for hw, version in pub.AIC_DEVICES.items():
        rel = Path("aiconfigurator") / pub._AIC_FOLDER[hw]
        gemm_rel = rel / "gemm" / "vllm" / version / "gemm_perf.parquet"
        _write_parquet(_gemm_slice(pd.read_parquet(full / gemm_rel)), out / gemm_rel)
        written.append(out / gemm_rel)
        for name, generation in (
            ("generation_attention_perf.parquet", True),
            ("context_attention_perf.parquet", False),
        ):
            attn_rel = rel / "attention" / "vllm" / version / name
            df = _attention_slice(pd.read_parquet(full / attn_rel), generation)
            _write_parquet(df, out / attn_rel)
            written.append(out / attn_rel)
    for folder, name in (("h100", "Llama-2-7b-hf"), ("a100", "Meta-Llama-3-8B")):
        rel = Path("vidur/compute") / folder / "meta-llama" / name / "mlp.csv"
        df = pd.read_csv(full / rel)
        df = df[(df.num_tensor_parallel_workers == 1) & df.num_tokens.isin(VIDUR_TOKENS)]
        _write_csv(df, out / rel)
        written.append(out / rel)
    (out / VIDUR_WHOLE).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(full / VIDUR_WHOLE, out / VIDUR_WHOLE)
    written.append(out / VIDUR_WHOLE)
    lib_rel = Path("llm-inference-bench/All_results.csv")
    lib = pd.read_csv(full / lib_rel)
    wanted = (
        (lib["Num of Hardware"] == 1)
        & lib["Input Output Length"].isin((128, 1024))
        & lib["Batch Size"].isin((1, 16, 32, 64))
        & lib.Model.isin(list(pub._LIB_MODELS))
        & lib[["Hardware", "Framework"]].apply(tuple, axis=1).isin(list(pub._LIB_HARDWARE))
    )
    _write_csv(lib[wanted], out / lib_rel)
    written.append(out / lib_rel)
    sw_rel = Path("splitwise-sim/perf_model.csv")
    sw = pd.read_csv(full / sw_rel)
    sw = sw[
        (sw.model == "llama2-70b")
        & sw.hardware.isin(("a100-80gb", "h100-80gb"))
        & sw.tensor_parallel.isin((2, 4, 8))
        & (
            ((sw.batch_size == 1) & sw.prompt_size.isin((512, 1024, 2048, 4096, 8192)))
            | (
                sw.batch_size.isin((1, 8, 32, 64))
                & (sw.prompt_size == 512)
                & (sw.token_size == 128)
            )
        )
    ]
    _write_csv(sw, out / sw_rel)
    written.append(out / sw_rel)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("full", type=Path, help="the full published tables (shared/profiles)")
    parser.add_argument("out", type=Path, help="where to write the slices")
    args = parser.parse_args(argv)
    for path in write_slices(args.full, args.out):
        print(f"wrote {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
