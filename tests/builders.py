"""Requests in hand-built scheduler states, shared by the scheduler unit tests, and a
switch making the load-blind routers route at each arrival, and one for carrying fused
runs across arrivals; a llama.cpp scenario from its launch line, and the scripts of
``validation/`` as modules (tests/ is on the import path through its conftest); a
simulated run written as a replay writes a real one."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from lyra_simpy.cluster import routing
from lyra_simpy.cluster.dispatch import Dispatcher
from lyra_simpy.engine.kv import blocks_for
from lyra_simpy.engine.request import Request
from lyra_simpy.metrics.io import write_jsonl

BS = 16
"""Block size of the hand-built views."""


def waiting_req(i: int, input_tokens: int, output_tokens: int = 8) -> Request:
    return Request(i, i, float(i), input_tokens, output_tokens)


def decoding_req(i: int, input_tokens: int, generated: int, output_tokens: int = 100) -> Request:
    """A running request after *generated* emitted tokens (KV holds all but the last)."""
    computed = input_tokens + generated - 1
    return Request(
        i, i, float(i), input_tokens, output_tokens, computed_tokens=computed,
        generated_tokens=generated, blocks=blocks_for(computed, BS), running=True,
    )  # fmt: skip


@contextlib.contextmanager
def routers_reading_state(carry: bool = True) -> Iterator[None]:
    """Round robin and random routed at each arrival, as state-reading routers are
    (with *carry* False, every replica's fused run also ends before each arrival)."""
    classes = (routing.RoundRobin, routing.RandomRouter)
    try:
        for cls in classes:
            cls.reads_state = True
        with runs_carried(carry):
            yield
    finally:
        for cls in classes:
            cls.reads_state = False


@contextlib.contextmanager
def runs_carried(carry: bool) -> Iterator[None]:
    """Whether fused runs are carried across arrivals for routers that read state
    (``Dispatcher.CARRY_RUNS``; False: each run ends before the cluster's next arrival)."""
    before = Dispatcher.CARRY_RUNS
    try:
        Dispatcher.CARRY_RUNS = carry
        yield
    finally:
        Dispatcher.CARRY_RUNS = before


def trace_workload(tmp_path: Path, rows: Iterable[tuple[float, int, int]]) -> dict[str, Any]:
    """Write *rows* (arrival_s, input_tokens, output_tokens) to ``tmp_path/t.csv``; the
    scenario changes that replay exactly them (the scenario's folder: *tmp_path*)."""
    lines = "".join(f"{a},{i},{o}\n" for a, i, o in rows)
    (tmp_path / "t.csv").write_text("arrival_s,input_tokens,output_tokens\n" + lines)
    return {
        "workload.num_requests": None,
        "workload.arrival": {"name": "trace", "path": "t.csv", "format": "csv"},
        "workload.input_tokens": {"name": "trace"},
        "workload.output_tokens": {"name": "trace"},
    }


STAND_IN_SERVER = """#!{python}
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
if "--fail" in sys.argv:
    print({fail_message!r})
    sys.exit(1)
{check}
host = sys.argv[sys.argv.index("--host") + 1] if "--host" in sys.argv else "127.0.0.1"
port = int(sys.argv[sys.argv.index("--port") + 1])
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *a):
        pass
HTTPServer((host, port), H).serve_forever()
"""


def stand_in_server(path: Path, fail_message: str, check: str = "") -> Path:
    """An executable at *path* that serves ``ok`` on ``--host``/``--port`` (127.0.0.1 by
    default) until killed, or prints *fail_message* and exits 1 when given ``--fail``;
    *check*: a Python line run first on ``sys.argv`` (an ``assert``). A stand-in for a
    server binary (llama-server, vLLM's ``python -m``) in the live helpers' tests."""
    path.write_text(
        STAND_IN_SERVER.format(python=sys.executable, fail_message=fail_message, check=check)
    )
    path.chmod(0o755)
    return path


def llamacpp_raw(command: str | None = None, **flags: Any) -> dict[str, Any]:
    """A small scenario of a ``llamacpp`` engine given by its launch *command* and/or
    *flags* (what the preset reads)."""
    engine: dict[str, Any] = {"name": "llamacpp"}
    if command is not None:
        engine["command"] = command
    if flags:
        engine["flags"] = flags
    return {
        "seed": 1,
        "engine": engine,
        "workload": {
            "num_requests": 5,
            "arrival": {"name": "poisson", "rate_per_s": 2.0},
            "input_tokens": {"name": "fixed", "tokens": 20},
            "output_tokens": {"name": "fixed", "tokens": 5},
        },
        "cost": {"name": "linear", "base_ms": 10.0},
    }


def llamacpp_fixed(
    num_requests: int, rate_per_s: float, tokens: tuple[int, int], cost: dict[str, Any],
    **scheduler: Any,
) -> dict[str, Any]:  # fmt: skip
    """A scenario of *num_requests* requests of *tokens* (prompt, output) each, sent at
    a constant *rate_per_s*, on a ``llamacpp`` scheduler of 4 096 cells (*scheduler*: more
    of its knobs) priced by *cost*."""
    return {
        "seed": 1,
        "workload": {
            "num_requests": num_requests,
            "arrival": {"name": "constant", "rate_per_s": rate_per_s},
            "input_tokens": {"name": "fixed", "tokens": tokens[0]},
            "output_tokens": {"name": "fixed", "tokens": tokens[1]},
        },
        "scheduler": {"name": "llamacpp", "n_ctx": 4096, **scheduler},
        "kv_cache": {"block_size": 1, "num_blocks": 4096},
        "cost": cost,
    }


def validation_module(name: str) -> Any:
    """``validation/NAME.py`` loaded as a module (the scripts are not a package), with
    ``validation/`` on ``sys.path`` as when it runs as a script (they import each other)."""
    import importlib.util
    import sys

    folder = Path(__file__).resolve().parents[1] / "validation"
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    path = folder / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def runs_raw(seed: int, rate: float, n: int = 120) -> dict[str, Any]:
    """A scenario (as a dict, to change) costed by tests/data/synthetic_fit.yaml: the
    runs ``calibrate --from-runs`` is tested on (Poisson, prompts 16-400, outputs 2-60)."""
    fit = Path(__file__).resolve().parent / "data" / "synthetic_fit.yaml"
    return {
        "name": "runs",
        "seed": seed,
        "workload": {
            "num_requests": n,
            "arrival": {"name": "poisson", "rate_per_s": rate},
            "input_tokens": {"name": "uniform", "low": 16, "high": 400},
            "output_tokens": {"name": "uniform", "low": 2, "high": 60},
        },
        "scheduler": {"name": "continuous", "max_num_seqs": 16, "max_num_batched_tokens": 8192},
        "kv_cache": {"block_size": 16, "num_blocks": 4096},
        "cost": {"name": "profile", "path": str(fit)},
    }


def token_times(res: Any) -> list[list[float]]:
    """Each request's token times: its first token, then the end of every later
    iteration that decoded up to its finish (one replica, no preemption: it decodes in
    each; a prefill-only iteration of SGLang's scheduler decodes nobody)."""
    ts = res.timeseries
    ends = np.asarray(ts["end_s"])[np.asarray(ts["decode_seqs"]) > 0]
    rec = res.records
    out = []
    for first, finish, n in zip(
        rec["first_token_s"], rec["finish_s"], rec["output_tokens"], strict=True
    ):
        later = ends[(ends > first) & (ends <= finish)].tolist()
        assert len(later) == n - 1  # what this writer relies on
        out.append([float(first), *later])
    return out


def write_run(res: Any, folder: Path, jitter_s: float = 0.0, seed: int = 0) -> Path:
    """*res* as a replay writes it; *jitter_s*: each chunk arrives up to that much late."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    rec = res.records
    rows, tokens = [], []
    for i, times in enumerate(token_times(res)):
        late = rng.uniform(0.0, jitter_s, size=len(times)) if jitter_s else np.zeros(len(times))
        chunk_s = sorted((np.asarray(times) + late).tolist())
        rows.append(
            {
                "request_id": i,
                "arrival_s": float(rec["arrival_s"][i]),
                "input_tokens": int(rec["input_tokens"][i]),
                "output_tokens": int(rec["output_tokens"][i]),
                "cached_tokens": int(rec["cached_tokens"][i]),
                "first_token_s": chunk_s[0],
                "finish_s": chunk_s[-1],
                "status": "ok",
            }
        )
        tokens.append({"request_id": i, "chunk_s": chunk_s, "chunk_tokens": [1] * len(chunk_s)})
    write_jsonl(folder / "requests.jsonl", rows)
    write_jsonl(folder / "tokens.jsonl", tokens)
    return folder


def llamacpp_log_line(t_s: float, kind: str, slot: int, text: str, task: int = -1) -> str:
    """One line of a llama-server log (0c1e570, default verbosity) at *t_s* s since its
    start: a slot's *kind* of event (the log's 12-character function name) and its
    *text*, as the validation scripts read them."""
    m, s = divmod(t_s, 60)
    stamp = f"{int(m)}.{int(s):02d}.{round((s % 1) * 1000):03d}.000"
    return f"{stamp} I slot {kind:>12}: id  {slot} | task {task} | {text}"
