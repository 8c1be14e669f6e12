"""Profile CSV from Vidur's published per-operator profiles (github.com/microsoft/vidur).

Vidur's ``data/profiling/compute/<gpu>/<model>/mlp.csv`` holds, per ``num_tokens`` and
``num_tensor_parallel_workers``, CUDA timings (ms, ``time_stats.<op>.median``) of the
non-attention operators of ONE transformer layer: ``input_layernorm``, ``attn_pre_proj``
(QKV GEMM), ``attn_rope``, ``attn_post_proj``, ``post_attention_layernorm``,
``mlp_up_proj``, ``mlp_act``, ``mlp_down_proj``, ``add``, and the embedding ``emb``.
A step over *n* tokens (prompt tokens plus decoding sequences) is costed here as
``layers × Σ per-layer ops(n) + emb(n)`` — each op once per layer, the embedding once;
repeated rows of one (n, TP) are reduced by their median. Not in the file, so not in the
measured part: attention kernels, the LM head and sampling, tensor-parallel all-reduce
(Vidur keeps it in ``network/*/all_reduce.csv``), scheduler and launch overheads.

Attention: Vidur's ``attention.csv`` (prefill and decode attention vs sizes) is not
among the shared files. It is added here as two *stated assumptions*, each a number the
caller gives (default 0: rows then hold only what Vidur measured) and that the output
keeps in its own column (``assumed_attention_ms``) and in the metadata:

* decode attention: ``decode_attention_ms_per_context_token × batch × context_len``
  (reading the KV cache);
* prefill attention: ``prefill_attention_ms_per_pair × Σ new × (cached + new)``.

docs/calibration.md derives the values used for the shipped A100 example from
AIConfigurator's A100 attention measurements. Rows are written only at token counts
Vidur measured (an unmeasured count is an error naming the measured ones).
"""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lyra_simpy.errors import TraceError

LAYER_OPS = (
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
)
SOURCE = "github.com/microsoft/vidur, data/profiling/compute/<gpu>/<model>/mlp.csv"
EXTRA_COLUMNS = ("measured_ms", "assumed_attention_ms")


@dataclass(frozen=True)
class Grid:
    """The steps to write: decode (batch × context), prefill prompt lengths, mixed."""

    decode_batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    decode_contexts: tuple[int, ...] = (128, 512, 1024, 2048, 4096)
    prefill_tokens: tuple[int, ...] = (32, 64, 128, 256, 512, 1024, 2048, 3072, 4096)
    mixed: tuple[tuple[int, int, int], ...] = ((8, 248, 1024), (32, 480, 1024), (64, 960, 2048))
    """(decode batch, prompt tokens, context) triples; batch + prompt must be measured."""


def read_vidur_mlp(path: Path, tp: int) -> tuple[dict[int, tuple[float, float]], dict[str, Any]]:
    """Per measured token count, the time (ms) of one layer's ops and of the embedding,
    as ``({num_tokens: (layer_ms, emb_ms)}, model shape)``."""
    try:
        fh = path.open(newline="")
    except OSError as exc:
        raise TraceError(
            f"{path}: cannot read Vidur profile ({exc.strerror}); it comes from {SOURCE} "
            "(the package ships Vidur's A100 Llama-2-7B file: data/profiles/vidur/)"
        ) from None
    samples: dict[int, list[tuple[float, float]]] = defaultdict(list)
    shape: dict[str, Any] = {}
    with fh:
        reader = csv.DictReader(fh)
        need = [f"time_stats.{op}.median" for op in (*LAYER_OPS, "emb")]
        need += ["num_tokens", "num_tensor_parallel_workers"]
        missing = [c for c in need if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(f"{path}: header: missing {missing[0]}; not a Vidur mlp.csv")
        for line, row in enumerate(reader, start=2):
            try:
                if int(row["num_tensor_parallel_workers"]) != tp:
                    continue
                layer = sum(float(row[f"time_stats.{op}.median"]) for op in LAYER_OPS)
                emb = float(row["time_stats.emb.median"])
                samples[int(row["num_tokens"])].append((layer, emb))
            except ValueError as exc:
                raise TraceError(f"{path}: row {line}: {exc}") from None
            shape = {k: int(row[k]) for k in ("n_head", "n_kv_head", "n_embd") if k in row}
    if not samples:
        raise TraceError(f"{path}: no rows with num_tensor_parallel_workers = {tp}")
    table = {
        n: (statistics.median(s[0] for s in v), statistics.median(s[1] for s in v))
        for n, v in samples.items()
    }
    return table, shape


def vidur_profile(
    path: Path,
    layers: int,
    tp: int = 1,
    decode_attention_ms_per_context_token: float = 0.0,
    prefill_attention_ms_per_pair: float = 0.0,
    grid: Grid | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Profile rows (DESIGN §4 columns plus :data:`EXTRA_COLUMNS`) and their metadata,
    from the Vidur ``mlp.csv`` at *path* for a model of *layers* layers at TP *tp*."""
    g = grid or Grid()
    table, shape = read_vidur_mlp(path, tp)
    measured = sorted(table)

    def ops_ms(n: int) -> float:
        if n not in table:
            raise TraceError(
                f"{path}: num_tokens {n} was not measured at TP {tp}; measured: "
                f"{measured[0]}..{measured[-1]} ({len(measured)} values)"
            )
        layer, emb = table[n]
        return layers * layer + emb

    rows: list[dict[str, Any]] = []

    def add(phase: str, batch: int, inp: int, ctx: int, n: int, attention: float) -> None:
        m = ops_ms(n)
        rows.append(
            {
                "phase": phase,
                "batch_size": batch,
                "input_tokens": inp,
                "context_len": ctx,
                "latency_ms": round(m + attention, 6),
                "measured_ms": round(m, 6),
                "assumed_attention_ms": round(attention, 6),
            }
        )

    for p in g.prefill_tokens:
        add("prefill", 1, p, 0, p, prefill_attention_ms_per_pair * p * p)
    for b in g.decode_batches:
        for c in g.decode_contexts:
            add("decode", b, 0, c, b, decode_attention_ms_per_context_token * b * c)
    for b, p, c in g.mixed:
        att = decode_attention_ms_per_context_token * b * c + prefill_attention_ms_per_pair * p * p
        add("mixed", b, p, c, b + p, att)
    meta = {
        "hardware": path.parent.parent.parent.name,
        "hardware_note": "Vidur's profiling folder name (data/profiling/compute/<gpu>/)",
        "model": f"{path.parent.parent.name}/{path.parent.name}",
        "engine": "vidur operator profiles (CUDA kernels, no serving engine)",
        "version": "vidur data/profiling (the commit the file was taken from)",
        "tp": tp,
        "date": "as published by Vidur",
        "source": {"file": str(path), "origin": SOURCE},
        "model_shape": {**shape, "layers": layers},
        "measured": (
            "layers x (sum of one layer's non-attention op medians) + embedding, at "
            "num_tokens = prompt tokens + decoding sequences (column measured_ms)"
        ),
        "not_included": "LM head, sampling, TP all-reduce, scheduler/launch overhead",
        "assumed": {
            "decode_attention_ms_per_context_token": decode_attention_ms_per_context_token,
            "prefill_attention_ms_per_pair": prefill_attention_ms_per_pair,
            "note": "attention is not in Vidur's mlp.csv: column assumed_attention_ms",
        },
    }
    return rows, meta


def convert_vidur(
    path: Path,
    out: Path,
    layers: int,
    tp: int = 1,
    decode_attention_ms_per_context_token: float = 0.0,
    prefill_attention_ms_per_pair: float = 0.0,
) -> int:
    """Write the profile CSV *out* and its metadata YAML beside it (same stem) from the
    Vidur ``mlp.csv`` at *path* (see :func:`vidur_profile`); both atomically. Returns
    the number of rows."""
    import yaml

    from lyra_simpy.calibration.profiles import write_profile
    from lyra_simpy.metrics.io import atomic_write

    rows, meta = vidur_profile(
        path, layers, tp, decode_attention_ms_per_context_token, prefill_attention_ms_per_pair
    )
    meta_text = (
        "# Metadata of the profile CSV beside this file (DESIGN §4), written by\n"
        "# `lyra-simpy vidur-profile` (lyra_simpy.calibration.vidur).\n"
        + yaml.safe_dump(meta, sort_keys=False)
    )
    atomic_write(out, lambda tmp: write_profile(tmp, rows, EXTRA_COLUMNS))
    atomic_write(out.with_suffix(".yaml"), lambda tmp: tmp.write_text(meta_text))
    return len(rows)
