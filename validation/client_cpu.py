"""How much CPU the replay client takes beside llama-server (docs/VALIDATION-llamacpp.md,
cause 1): starts the server with the matrix's default flags, replays three of the
default short point's loads (``results/validation-llamacpp/default_short/*.yaml``,
written by ``validate_cpu.py --matrix``) and prints the client's CPU time (user +
system, from ``getrusage``, its start-up included) over each replay's wall time.

Run: ``PYTHONPATH=src python validation/client_cpu.py`` (about 1.5 min).
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lyra_simpy.live import llamacpp

ROOT = Path(__file__).resolve().parents[1]
POINT = ROOT / "results" / "validation-llamacpp" / "default_short"
FLAGS = ["-np", "4", "-c", "4096", "-t", "2"]
LOADS = ("closed_4", "closed_8", "poisson_0.3")


def main() -> int:
    missing = [load for load in LOADS if not (POINT / f"{load}.yaml").is_file()]
    if missing:
        print(f"client_cpu: no {POINT / missing[0]}.yaml; run validate_cpu.py --matrix first")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "llama-server.log"
        with llamacpp.Server(llamacpp.server_binary(), llamacpp.model_file(), FLAGS, log) as srv:
            for load in LOADS:
                t0 = time.time()
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                subprocess.run(
                    [sys.executable, "-m", "lyra_simpy.cli", "replay", str(POINT / f"{load}.yaml"),
                     "--endpoint", srv.url, "--out", str(Path(tmp) / load), "--timeout-s", "300",
                     "--extra-body", '{"cache_prompt": false}'],
                    check=True, stdout=subprocess.DEVNULL,
                )  # fmt: skip
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                wall = time.time() - t0
                cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                print(f"{load}: client CPU {cpu:.2f} s over {wall:.1f} s wall "
                      f"= {100 * cpu / wall:.0f} % of one core")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
