"""Size and write time of a Perfetto trace (``--trace-events``) for speed.py's workload.

Simulates benchmarks/speed.py's workload (10 000 Azure-conversation requests, Poisson
4 req/s, one replica), then writes its ``trace_events.json`` and requests.jsonl (the
reference: a file every run writes) and prints their sizes, write times and the ratio,
and the time to load the trace back with ``json.load``.

Usage: ``python benchmarks/trace_events.py [--requests N]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

import lyra_simpy
from lyra_simpy.engine.request import RECORD_FIELDS
from lyra_simpy.metrics.io import write_records_jsonl
from lyra_simpy.output.trace_events import write_trace_events

HERE = Path(__file__).resolve().parent


def _speed_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_speed", HERE / "speed.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=10_000)
    args = p.parse_args(argv)
    speed = _speed_module()
    raw = speed.workload(speed.trace_path(), args.requests, True)
    scenario = lyra_simpy.scenario_from_dict(raw, base_dir=speed.REPO_ROOT)
    t = time.perf_counter()
    lyra_simpy.simulate(scenario)
    plain_s = time.perf_counter() - t
    t = time.perf_counter()
    res = lyra_simpy.simulate(scenario, request_log=True)  # as --trace-events runs it
    logged_s = time.perf_counter() - t
    with tempfile.TemporaryDirectory() as tmp:
        trace, jsonl = Path(tmp) / "trace_events.json", Path(tmp) / "requests.jsonl"
        t = time.perf_counter()
        events = write_trace_events(res, trace)
        trace_s = time.perf_counter() - t
        t = time.perf_counter()
        write_records_jsonl(jsonl, res.records, RECORD_FIELDS)  # as lyra-simpy run does
        jsonl_s = time.perf_counter() - t
        t = time.perf_counter()
        with trace.open() as fh:
            json.load(fh)
        load_s = time.perf_counter() - t
        mib = trace.stat().st_size / 2**20
        jsonl_mib = jsonl.stat().st_size / 2**20
    print(f"requests            {args.requests}")
    print(f"engine iterations   {res.engine['iterations']}")
    print(f"simulate()          {plain_s:.2f} s; with the request log {logged_s:.2f} s")
    print(f"trace events        {events}")
    print(f"trace_events.json   {mib:.1f} MiB, written in {trace_s:.2f} s")
    print(f"requests.jsonl      {jsonl_mib:.1f} MiB, written in {jsonl_s:.2f} s")
    print(f"ratio trace/jsonl   {trace_s / jsonl_s:.1f}x time, {mib / jsonl_mib:.1f}x size")
    print(f"json.load(trace)    {load_s:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
