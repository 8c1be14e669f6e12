"""What a step that samples costs beside one that does not, on llama-server (issue 12).

``python validation/llamacpp_sampling.py [--rounds 5]`` starts ``llama-server -np 4 -c
4096 -t 2 -kvu`` (the matrix's ``-kvu`` configuration) twice: as launched, where context
checkpoints cut a lone prompt into a first chunk (all but its last 4 tokens) that samples
nothing and a last step of 4 tokens that samples its first token; and with
``--ctx-checkpoints 0``, where the whole prompt is one step that samples. For lone
prompts of 8-128 tokens (``cache_prompt: false``, one token out) it prints the engine's
own prompt time (``timings.prompt_ms``), the median over ``--rounds``, both ways and
the difference: what the extra 4-token step costs when the first chunk does not sample.
If every step paid the same fixed cost, the difference would be about that fixed cost
(the linear fit: 15 ms) plus 4 tokens.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import speed_gate

from lyra_simpy.live import llamacpp

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "llamacpp-sampling"
FLAGS = ["-np", "4", "-c", "4096", "-t", "2", "-kvu"]
LENGTHS = (8, 16, 40, 64, 128)


def prompt_ms(flags: list[str], rounds: int, log: Path) -> dict[int, float]:
    """The median engine prompt time of a lone prompt of each length, on a server
    launched with *flags*."""
    rng = np.random.default_rng(7)
    out: dict[int, list[float]] = {n: [] for n in LENGTHS}
    binary, model = llamacpp.server_binary(), llamacpp.model_file()
    with llamacpp.Server(binary, model, flags, log) as srv:
        for k in range(rounds + 1):
            for n in LENGTHS:
                ms = speed_gate.lone_prompt_ms(srv.url, rng.integers(1000, 200000, size=n).tolist())
                if ms is None:
                    raise SystemExit(f"llamacpp_sampling.py: a lone prompt of {n} tokens failed")
                if k:  # the first round warms the server up
                    out[n].append(ms)
    return {n: float(np.median(v)) for n, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llamacpp_sampling.py")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    cut = prompt_ms(FLAGS, args.rounds, OUT / "checkpoints.log")
    whole = prompt_ms([*FLAGS, "--ctx-checkpoints", "0"], args.rounds, OUT / "whole.log")
    print("tokens  two steps (first samples nothing)  one step (samples)  difference (ms)")
    for n in LENGTHS:
        print(f"{n:>6}  {cut[n]:>33.1f}  {whole[n]:>18.1f}  {cut[n] - whole[n]:>15.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
