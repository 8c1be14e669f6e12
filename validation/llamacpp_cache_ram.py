"""Does llama-server's prompt cache in RAM slow the steps that start a request?

With its defaults (``--cache-ram 8192``, ``--cache-idle-slots``) llama-server, on the
main loop and between two steps, copies the state of the slot a new request takes (and
of every idle slot) into host RAM before the request's prompt is computed
(``tools/server/server-context.cpp``: ``get_available_slot`` → ``server_slot::prompt_save``;
``server-task.cpp``: ``server_prompt_cache::alloc``). Every running request waits for
that copy. The probes of ``lyra-simpy profile`` time a lone prompt by the server's own
``prompt_ms``, which does not include it.

``python validation/llamacpp_cache_ram.py [--rounds 2] [--point default_long] [--load
closed_4]`` starts the point's server twice per round, as the matrix launched it and
with ``--cache-ram 0`` added, replays the point's stored scenario on each, and prints
for each run the median of measured / predicted (the point's probe fit) for decode-only
steps and for steps that carry a prompt (:mod:`llamacpp_steps`), the run's p50 TTFT,
TPOT and E2E, and the server's resident memory at the end. Needs ``validate_cpu.py
--matrix`` to have run (it reads ``results/validation-llamacpp/POINT``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import llamacpp_points as points
from llamacpp_steps import arrival_split, priced, rebuild

from lyra_simpy.calibration.fitfile import load_fit
from lyra_simpy.calibration.runs import steps_of_runs
from lyra_simpy.cli import main as cli
from lyra_simpy.live import llamacpp
from lyra_simpy.policies.llamacpp_config import LlamaCppConfig
from lyra_simpy.scenario import load_scenario


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def one_run(point: Path, load: str, flags: list[str], out: Path) -> str:
    scenario = point / f"{load}.yaml"
    log = out / "llama-server.log"
    with llamacpp.Server(llamacpp.server_binary(), llamacpp.model_file(), flags, log) as srv:
        code = cli(["replay", str(scenario), "--endpoint", srv.url, "--out", str(out / "run"),
                    "--timeout-s", "300", "--extra-body", points.EXTRA_BODY])  # fmt: skip
        assert srv._proc is not None
        rss = rss_mib(srv._proc.pid)
    if code != 0:
        return f"replay exited {code}"
    fit = load_fit(point / "fit_probes.yaml")
    config = load_scenario(scenario).scheduler
    assert isinstance(config, LlamaCppConfig)
    steps = steps_of_runs([out / "run"], rebuild(config, fit))
    ratio = steps.latency_ms / priced(steps, fit)
    prompt = steps.prefill_seqs > 0
    split = arrival_split(steps, ratio)
    summary = json.loads(next((out / "run").rglob("summary.json")).read_text())
    return (
        f"decode-only {np.median(ratio[~prompt]):.2f}  with a prompt {np.median(ratio[prompt]):.2f}"
        f" (its checkpoint step {split['prompt+checkpoint'][0]:.2f},"
        f" others {split['prompt'][0]:.2f})"
        f"  p50 TTFT {summary['median_ttft_ms']:.0f} ms  TPOT {summary['median_tpot_ms']:.1f} ms"
        f"  E2E {summary['median_e2el_ms']:.0f} ms  server RSS {rss:.0f} MiB"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--point", default="default_long", help="CFG_REGIME of the matrix")
    parser.add_argument("--load", default="closed_4", choices=list(points.LOADS))
    args = parser.parse_args(argv)
    point = points.OUT / args.point
    if not (point / "fit_probes.yaml").is_file():
        print(f"{point}: not stored; run validate_cpu.py --matrix first", file=sys.stderr)
        return 2
    flags = points.CONFIGS[args.point.rsplit("_", 1)[0]]
    variants = {"as launched": flags, "--cache-ram 0": [*flags, "--cache-ram", "0"]}
    print(f"{args.point} {args.load}: llama-server {' '.join(flags)}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(1, args.rounds + 1):
            for name, launch in variants.items():
                out = Path(tmp) / f"{k}-{len(launch)}"
                print(f"  round {k}  {name:<12} {one_run(point, args.load, launch, out)}",
                      flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
