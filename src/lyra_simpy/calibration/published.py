"""Published measurements to check the roofline against (read from the package's
``data/profiles`` slices, or the full tables laid out the same way).

Each reader turns one source into :class:`Measured` rows: a device and model from the
catalogs, the batch that was timed, and the published time in ms. What each source times
(described in ``data/profiles/README.md``):

- ``aiconfigurator``: NVIDIA's per-op "silicon" tables (vLLM kernels). A Llama-3-8B step =
  its GEMMs (QKV 6144×4096, O 4096×4096, gate+up 28672×4096, down 4096×14336, × 32
  layers; LM head as 2 × 64128×4096), interpolated bilinearly in (n, k) at a measured m,
  plus 32 × the attention kernel. Norms, RoPE, sampling and launch gaps are not in it.
- ``vidur``: Vidur's per-layer non-attention op times (``mlp.csv``, median) × 32 layers,
  embedding lookup left out: the linear layers alone.
- ``llm-inference-bench``: one static batch of B requests with input = output = L tokens,
  end to end (vLLM; DeepSpeed on Gaudi 2): a prefill of B × L tokens, then L − 1 decodes.
- ``splitwise``: SplitwiseSim's measured Llama-2-70B profile: prompt time of one prompt,
  and time per output token of a batch (median of the repeated rows).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

AIC_DEVICES = {"a100_sxm": "0.14.0", "h100_sxm": "0.24.0", "h200_sxm": "0.24.0", "b200": "0.24.0"}
"""aiconfigurator folder → vLLM version of its tables (the folder names the device)."""
_AIC_FOLDER = {
    "a100_sxm": "a100_sxm",
    "h100_sxm": "h100_sxm",
    "h200_sxm": "h200_sxm",
    "b200": "b200_sxm",
}
_LLAMA3_GEMMS = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))
"""(n, k) of one Llama-3-8B layer's GEMMs (QKV, O, gate+up, down)."""
_LIB_HARDWARE = {
    ("Nvidia A100 GPU", "vLLM"): "a100_sxm",
    ("Nvidia H100 GPU", "vLLM"): "h100_sxm",
    ("AMD MI300X GPU", "vLLM"): "mi300x",
    ("Habana Gaudi2", "Deepspeed"): "gaudi2",
    ("Intel Max 1550", "vLLM"): "max1550",
}
_LIB_MODELS = {"meta-llama/Llama-2-7b-hf": "llama_2_7b", "meta-llama/Meta-Llama-3-8B": "llama_3_8b"}


@dataclass(frozen=True, slots=True)
class Measured:
    """One published time and the batch it belongs to."""

    source: str
    hardware: str
    model: str
    tp: int
    kind: str
    """``decode`` (batch, context per sequence), ``prefill`` (one prompt of n tokens),
    ``layers`` (linear layers over n tokens), ``static_batch`` (B requests, L in = out)."""
    batch: int
    tokens: int
    """Context per sequence (decode), prompt length (prefill, static_batch), tokens (layers)."""
    measured_ms: float
    end_to_end: bool
    """Whether the time includes per-iteration overhead (sampling, scheduler)."""


def _pd() -> Any:
    try:
        import pandas as pd
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise SystemExit("reading the published tables needs pandas and pyarrow") from exc
    return pd


def _bracket(grid: list[int], x: int) -> tuple[int, int]:
    i = bisect.bisect_left(grid, x)
    if i < len(grid) and grid[i] == x:
        return x, x
    return grid[max(i - 1, 0)], grid[min(i, len(grid) - 1)]


def _gemm_ms(
    table: dict[tuple[int, int], float], ns: list[int], ks: list[int], n: int, k: int
) -> float:
    """Bilinear interpolation of GEMM latency in (n, k) at one m."""
    n0, n1 = _bracket(ns, n)
    k0, k1 = _bracket(ks, k)
    tn = 0.0 if n1 == n0 else (n - n0) / (n1 - n0)
    tk = 0.0 if k1 == k0 else (k - k0) / (k1 - k0)
    lo = table[n0, k0] + tk * (table[n0, k1] - table[n0, k0])
    hi = table[n1, k0] + tk * (table[n1, k1] - table[n1, k0])
    return lo + tn * (hi - lo)


def _aic_linear_ms(gemm: Any, m: int, head_rows: int) -> float:
    rows = gemm[gemm.m == m]
    table = {(int(r.n), int(r.k)): float(r.latency) for r in rows.itertuples()}
    ns, ks = sorted({n for n, _ in table}), sorted({k for _, k in table})
    body = 32 * sum(_gemm_ms(table, ns, ks, n, k) for n, k in _LLAMA3_GEMMS)
    head_table = gemm[gemm.m == head_rows]
    head = {(int(r.n), int(r.k)): float(r.latency) for r in head_table.itertuples()}
    return body + 2 * _gemm_ms(head, ns, ks, 64128, 4096)


def _llama3_attention(df: Any) -> Any:
    """Rows with Llama-3-8B's attention shape, bf16 KV, no sliding window."""
    keep = (df.num_heads == 32) & (df.num_key_value_heads == 8) & (df.head_dim == 128)
    keep &= df.kv_cache_dtype == "bfloat16"
    if "window_size" in df.columns:  # (the A100 tables have no window column)
        keep &= df.window_size == 0
    return df[keep]


def aiconfigurator(root: Path) -> list[Measured]:
    """Llama-3-8B decode and prefill steps from the per-op tables (TP 1, bf16)."""
    pd = _pd()
    out = []
    for hw, version in AIC_DEVICES.items():
        base = root / "aiconfigurator" / _AIC_FOLDER[hw]
        gemm = pd.read_parquet(base / "gemm" / "vllm" / version / "gemm_perf.parquet")
        gemm = gemm[gemm.gemm_dtype == "bfloat16"]
        gemm = gemm.groupby(["m", "n", "k"], as_index=False).latency.min()
        attn_dir = base / "attention" / "vllm" / version
        gen = _llama3_attention(pd.read_parquet(attn_dir / "generation_attention_perf.parquet"))
        ctx = _llama3_attention(pd.read_parquet(attn_dir / "context_attention_perf.parquet"))
        for batch in (1, 8, 32, 64, 128):
            for context in (512, 2048, 8192):
                hit = gen[(gen.batch_size == batch) & (gen.step == context - 1)]
                if hit.empty:
                    continue
                ms = _aic_linear_ms(gemm, batch, batch) + 32 * float(hit.latency.min())
                out.append(
                    Measured(
                        "aiconfigurator", hw, "llama_3_8b", 1, "decode", batch, context, ms, False
                    )
                )
        for isl in (512, 1024, 2048, 4096, 8192):
            hit = ctx[(ctx.batch_size == 1) & (ctx.isl == isl)]
            if hit.empty:
                continue
            ms = _aic_linear_ms(gemm, isl, 1) + 32 * float(hit.latency.min())
            out.append(
                Measured("aiconfigurator", hw, "llama_3_8b", 1, "prefill", 1, isl, ms, False)
            )
    return out


def vidur(root: Path) -> list[Measured]:
    """Linear layers (× 32) of Llama-2-7B (A100, H100) and Llama-3-8B (A100), TP 1."""
    pd = _pd()
    out = []
    cases = (
        ("a100", "a100_sxm", "Llama-2-7b-hf", "llama_2_7b"),
        ("h100", "h100_sxm", "Llama-2-7b-hf", "llama_2_7b"),
        ("a100", "a100_sxm", "Meta-Llama-3-8B", "llama_3_8b"),
    )
    for folder, hw, name, model in cases:
        df = pd.read_csv(root / "vidur" / "compute" / folder / "meta-llama" / name / "mlp.csv")
        df = df[df.num_tensor_parallel_workers == 1]
        ops = [c for c in df.columns if c.endswith(".median") and ".emb." not in c]
        per = df.groupby("num_tokens")[ops].median().sum(axis=1)
        for tokens in (1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096):
            if tokens in per.index:
                ms = 32 * float(per.loc[tokens])
                out.append(Measured("vidur", hw, model, 1, "layers", tokens, tokens, ms, False))
    return out


def llm_inference_bench(root: Path) -> list[Measured]:
    """Static batches, input = output = L ∈ {128, 1024}, batch ∈ {1, 16, 32, 64}, one device."""
    pd = _pd()
    df = pd.read_csv(root / "llm-inference-bench" / "All_results.csv")
    df = df[df["Num of Hardware"] == 1]
    out = []
    for (hw_name, framework), hw in _LIB_HARDWARE.items():
        for model_name, model in _LIB_MODELS.items():
            rows = df[
                (df.Hardware == hw_name) & (df.Framework == framework) & (df.Model == model_name)
            ]
            for length in (128, 1024):
                for batch in (1, 16, 32, 64):
                    hit = rows[
                        (rows["Input Output Length"] == length) & (rows["Batch Size"] == batch)
                    ]
                    if hit.empty:
                        continue
                    ms = 1000.0 * float(hit.Latency.median())
                    out.append(
                        Measured(
                            "llm-inference-bench",
                            hw,
                            model,
                            1,
                            "static_batch",
                            batch,
                            length,
                            ms,
                            True,
                        )
                    )
    return out


def splitwise(root: Path) -> list[Measured]:
    """Llama-2-70B at TP 2/4/8 on A100 and H100: prompt times (batch 1) and per-token
    times (prompt 512, 128 output tokens: context 576 on average)."""
    pd = _pd()
    df = pd.read_csv(root / "splitwise-sim" / "perf_model.csv")
    df = df[df.model == "llama2-70b"]
    out = []
    for name, hw in (("a100-80gb", "a100_sxm"), ("h100-80gb", "h100_sxm")):
        for tp in (2, 4, 8):
            rows = df[(df.hardware == name) & (df.tensor_parallel == tp)]
            for prompt in (512, 1024, 2048, 4096, 8192):
                hit = rows[(rows.batch_size == 1) & (rows.prompt_size == prompt)]
                if not hit.empty:
                    ms = float(hit.prompt_time.median())
                    out.append(
                        Measured("splitwise", hw, "llama_2_70b", tp, "prefill", 1, prompt, ms, True)
                    )
            for batch in (1, 8, 32, 64):
                hit = rows[
                    (rows.batch_size == batch)
                    & (rows.prompt_size == 512)
                    & (rows.token_size == 128)
                ]
                if not hit.empty:
                    ms = float(hit.token_time.median())
                    out.append(
                        Measured("splitwise", hw, "llama_2_70b", tp, "decode", batch, 576, ms, True)
                    )
    return out


SOURCES = {
    "aiconfigurator": aiconfigurator,
    "vidur": vidur,
    "llm-inference-bench": llm_inference_bench,
    "splitwise": splitwise,
}
"""Source name → reader of a profiles folder (``data/profiles`` or the full tables)."""
