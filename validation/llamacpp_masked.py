"""Whether several prompts in one ``-kvu`` pass cost what their shared buffer's cells say
(issue 12, ``docs/VALIDATION-llamacpp.md`` item 10).

``python validation/llamacpp_masked.py [--rounds 5]`` starts ``llama-server -np 4 -c 4096
-t 2 -kvu`` (the matrix's ``-kvu`` configuration) and times, by the engine's own prompt
time (``timings.prompt_ms``, median over ``--rounds``): lone prompts of 1-4 × 290 tokens,
and 2-4 prompts of 290 tokens sent together (one step: the server takes every waiting
prompt into the batch of its next ``update_slots``). One token out, ``cache_prompt:
false``, fresh random token ids each time.

A lone prompt of 1 160 tokens and four of 290 together put the same tokens through the same
passes (``n_ubatch`` 512) over the same buffer cells: if every cell a pass spans cost its
attention (the masked ones too), they would cost the same. llama.cpp's CPU flash attention
(``ggml/src/ggml-cpu/ops.cpp``, ``ggml_compute_forward_flash_attn_ext_tiled``) skips every
64 × 64 tile of (query rows, KV cells) that the mask hides entirely — the other prompts'
cells, and the cells after a token (causal): four prompts of 290 compute about a quarter
of the attention of one of 1 160. The script prints each row's time beside both counts
(:func:`lyra_simpy.live.llamacpp_probes.prompt_counts`: cells spanned, pairs computed)
and how well a cost per step, per token and per cell fits the rows with either count or
both. ``--report`` prints a stored run again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

import httpx
import numpy as np

from lyra_simpy.live import llamacpp

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "llamacpp-masked"
FLAGS = ["-np", "4", "-c", "4096", "-t", "2", "-kvu"]
PROMPT = 290
ROWS = [(1, 1), (1, 2), (1, 3), (1, 4), (2, 1), (3, 1), (4, 1)]
"""(prompts sent together, each one's length in units of PROMPT)."""


async def one_row(url: str, rng: np.random.Generator, together: int, units: int) -> list[float]:
    """The engine prompt times of *together* prompts of *units* × PROMPT tokens sent at once."""
    async with httpx.AsyncClient(timeout=300) as client:

        async def send() -> float:
            body = {"prompt": rng.integers(1000, 200000, size=units * PROMPT).tolist(),
                    "n_predict": 1, "cache_prompt": False}  # fmt: skip
            reply = (await client.post(f"{url}/completion", json=body)).json()
            return float(reply["timings"]["prompt_ms"])

        return list(await asyncio.gather(*(send() for _ in range(together))))


def measure(rounds: int, log: Path) -> dict[tuple[int, int], list[list[float]]]:
    rng = np.random.default_rng(11)
    out: dict[tuple[int, int], list[list[float]]] = {row: [] for row in ROWS}
    binary, model = llamacpp.server_binary(), llamacpp.model_file()
    with llamacpp.Server(binary, model, FLAGS, log) as srv:
        for k in range(rounds + 1):
            for row in ROWS:
                times = asyncio.run(one_row(srv.url, rng, *row))
                if k:  # the first round warms the server up
                    out[row].append(times)
    return out


def counts(together: int, tokens: int) -> tuple[int, ...]:
    """The probe row's extra columns by the engine model (``llamacpp_probes.prompt_counts``)."""
    from lyra_simpy.live.llamacpp_probes import prompt_counts
    from lyra_simpy.policies.llamacpp_config import LlamaCppConfig

    config = LlamaCppConfig(n_parallel=4, n_ctx=4096, kv_unified=True, sliding_window=True)
    return prompt_counts(config, together, tokens, 0, 0)


def report(record: list[dict]) -> None:
    """Each row beside its counts, and three least-squares fits of the rows (a cost per
    step, per token and per cell): cells spanned alone, computed alone, both."""
    print("together  tokens each  prompt_ms (median; spread)  steps  cells spanned  computed")
    x, y = [], []
    for r in record:
        runs = np.array(r["prompt_ms"])
        ms = float(np.median(runs.max(axis=1)))
        steps, _, _, _, spanned, computed = counts(r["together"], r["tokens"])
        print(f"{r['together']:>8}  {r['tokens']:>11}  {ms:>9.1f} "
              f"({np.median(runs.max(axis=1) - runs.min(axis=1)):4.1f})"
              f"  {steps:>15}  {spanned:>13}  {computed:>8}")  # fmt: skip
        x.append((1.0, steps, r["together"] * r["tokens"], spanned, computed))
        y.append(ms)
    a, b = np.array(x), np.array(y)
    for name, cols in (("spanned", [0, 1, 2, 3]), ("computed", [0, 1, 2, 4]),
                       ("both", [0, 1, 2, 3, 4])):  # fmt: skip
        coef = np.linalg.lstsq(a[:, cols], b, rcond=None)[0]
        rel = a[:, cols] @ coef / b - 1
        print(f"fit on cells {name:>8}: rms {np.sqrt(np.mean(rel**2)):.1%}, rows "
              + " ".join(f"{e:+.1%}" for e in rel))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llamacpp_masked.py")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--report", action="store_true",
                        help="print the stored results/llamacpp-masked/masked.json")  # fmt: skip
    args = parser.parse_args(argv)
    if not args.report:
        OUT.mkdir(parents=True, exist_ok=True)
        got = measure(args.rounds, OUT / "llama-server.log")
        raw = [{"together": t, "tokens": u * PROMPT, "prompt_ms": r} for (t, u), r in got.items()]
        (OUT / "masked.json").write_text(json.dumps(raw, indent=1))
    report(json.loads((OUT / "masked.json").read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
