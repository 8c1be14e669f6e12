"""Measure a live engine's step costs and write a profile CSV (DESIGN §4) with metadata.

Three kinds of measurement, each repeated ``repeats`` times (the median is kept):

* ``prefill``: one request with a prompt of *P* tokens and one output token, alone on the
  server. Latency: the engine's ``timings.prompt_ms`` when it reports it (llama.cpp),
  else the client's TTFT (which adds HTTP and queueing time).
* ``decode``: *B* requests sent together, each a prompt of *L* tokens and
  ``decode_steps`` output tokens; once their prompts are in, the *B* sequences decode in
  lock-step, one token each per engine step, so a step is the gap between two streamed
  chunks. Latency: the median inter-chunk gap over all *B* streams (client-side: robust
  to the few steps at the start that also carry the others' prompts, which a mean of the
  engine's ``predicted_per_token_ms`` would fold in; that mean is kept in the extra
  column ``engine_ms``). Context: *L* + half the output.
* ``mixed``: *B* requests decoding (prompt ``mixed_context``), then one probe request
  with a prompt of *P* tokens and one output token; the engine puts the probe's prompt
  into the same step as the *B* decodes (llama.cpp ``update_slots``: sampled tokens of
  decoding slots first, then prompt tokens up to ``n_batch``). Latency: the probe's
  ``timings.prompt_ms``, else its client TTFT.

The metadata YAML beside the CSV says engine, version, model, hardware, flags, date and
which timing each phase used (``timing_source``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, PositiveFloat, PositiveInt, ValidationError

from lyra_simpy.errors import LyraError, TraceError, from_validation_error
from lyra_simpy.live.client import Api, Outcome, check_endpoint, engine_info, new_client, send
from lyra_simpy.live.limits import endpoint_limits, token_range, with_vocab
from lyra_simpy.live.workload import TokenIds
from lyra_simpy.machine import cpu_model
from lyra_simpy.metrics.io import atomic_write


class ProfileGrid(BaseModel):
    """What to measure (defaults suit a small model on a CPU)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prefill_tokens: list[PositiveInt] = [16, 64, 128, 256, 512]
    decode_batch: list[PositiveInt] = [1, 2, 4, 8]
    decode_context: list[PositiveInt] = [64, 256, 512]
    decode_steps: PositiveInt = 24
    mixed_batch: list[PositiveInt] = [1, 3, 7]
    """Decoders beside the probe: each must be below the server's slots (the probe
    needs one), else the probe waits and runs with the decoders gone (checked against
    llama.cpp's ``/props`` ``total_slots``)."""
    mixed_prompt_tokens: list[PositiveInt] = [64, 256]
    mixed_context: PositiveInt = 128
    repeats: PositiveInt = 3
    timeout_s: PositiveFloat = 120.0
    token_ids: TokenIds | None = None
    """Prompt id range (None: the default, fitted to the vocabulary)."""
    extra_body: dict[str, Any] = {}


def load_grid(path: Path) -> ProfileGrid:
    """A :class:`ProfileGrid` from YAML; errors are one line naming the field."""
    try:
        raw = yaml.safe_load(path.read_text()) or {}
        return ProfileGrid.model_validate(raw)
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise TraceError(f"{path}: not valid YAML ({exc})") from None
    except ValidationError as exc:
        raise TraceError(f"{path}: {from_validation_error(exc)}") from None


class _Prober:
    def __init__(
        self, url: str, api: Api, grid: ProfileGrid, ids: TokenIds, extra: dict[str, Any]
    ) -> None:
        self.url, self.api, self.grid, self.ids, self.extra = url, api, grid, ids, extra
        self.rng = np.random.Generator(np.random.PCG64(20260101))
        self.engine_timed: set[str] = set()

    def _prompt(self, n: int) -> list[int]:
        ids = self.ids
        return [int(x) for x in self.rng.integers(ids.low, ids.high, size=n)]

    async def _send(
        self, n_in: int, n_out: int, t0: float, first: asyncio.Event | None = None
    ) -> Outcome:
        client = new_client()
        try:
            out = await send(
                client,
                self.url,
                self.api,
                self._prompt(n_in),
                n_out,
                self.grid.timeout_s,
                t0,
                self.extra,
                first,
            )
        finally:
            await client.aclose()
        if out.error is not None:
            raise LyraError(f"profile: request ({n_in} in, {n_out} out) failed: {out.error}")
        return out

    def _prompt_ms(self, out: Outcome, phase: str) -> float:
        if out.timings and isinstance(out.timings.get("prompt_ms"), (int, float)):
            self.engine_timed.add(phase)
            return float(out.timings["prompt_ms"])
        return (out.chunk_s[0] - out.sent_s) * 1000.0

    async def prefill(self, p: int) -> float:
        return self._prompt_ms(await self._send(p, 1, time.perf_counter()), "prefill")

    async def decode(self, b: int, ctx: int) -> tuple[float, float]:
        t0 = time.perf_counter()
        steps = self.grid.decode_steps
        outs = await asyncio.gather(*(self._send(ctx, steps, t0) for _ in range(b)))
        gaps = np.concatenate([np.diff(o.chunk_s) for o in outs]) * 1000.0
        engine = [
            float(o.timings["predicted_per_token_ms"])
            for o in outs
            if o.timings and isinstance(o.timings.get("predicted_per_token_ms"), (int, float))
        ]
        return float(np.median(gaps)), statistics.mean(engine) if engine else float("nan")

    async def mixed(self, b: int, p: int) -> tuple[float, int]:
        t0 = time.perf_counter()
        ctx, steps = self.grid.mixed_context, self.grid.decode_steps

        firsts = [asyncio.Event() for _ in range(b)]
        decoders = [asyncio.create_task(self._send(ctx, steps * 2, t0, e)) for e in firsts]
        # The probe joins once every decoder's prompt is in (then each step is decodes).
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in firsts)), self.grid.timeout_s)
        await asyncio.sleep(0.02)
        probe = await self._send(p, 1, t0)
        outs = await asyncio.gather(*decoders)
        probe_at = probe.sent_s
        done_before = [sum(1 for s in o.chunk_s if s <= probe_at) for o in outs]
        return self._prompt_ms(probe, "mixed"), ctx + int(statistics.median(done_before))


def _cpu() -> str:
    """This machine's CPU model and core count (Linux), else the platform's word."""
    model = cpu_model()
    if model is not None:
        return f"{model} ({os.cpu_count()} cores)"
    return f"{platform.processor() or platform.machine()} CPU"


def _metadata(
    props: dict[str, Any],
    url: str,
    api: Api,
    hardware: str | None,
    flags: str,
    sources: dict[str, str],
) -> dict[str, Any]:
    info = engine_info(url, api, props)
    return {
        "engine": info["engine"],
        "version": info["version"],
        "model": Path(str(info["model"])).name,
        "hardware": hardware or _cpu(),
        "tp": 1,
        "date": dt.date.today().isoformat(),
        "flags": flags,
        "server_settings": info["flags"],
        "timing_source": sources,
        "measured_by": "lyra-simpy profile (lyra_simpy.live.profile)",
    }


def profile(
    url: str,
    api: Api,
    grid: ProfileGrid,
    out: Path,
    hardware: str | None = None,
    flags: str = "",
    vocab_size: int | None = None,
) -> tuple[int, str]:
    """Measure *grid* on the engine at *url*; write *out* (CSV) and its ``.yaml``.
    Returns (rows, a word on the timing source). The prompt ids fit the model's
    vocabulary (*vocab_size*, else what the endpoint reports; :mod:`.limits`)."""
    url = url.rstrip("/")
    props = check_endpoint(url)
    limits = with_vocab(endpoint_limits(url), vocab_size)
    ids = token_range(grid.token_ids, limits, "grid.token_ids")
    slots = props.get("total_slots")
    if isinstance(slots, int) and grid.mixed_batch and max(grid.mixed_batch) >= slots:
        raise LyraError(
            f"grid.mixed_batch: got {max(grid.mixed_batch)}, must be < the server's "
            f"{slots} slots (the probe needs a slot of its own beside the decoders)"
        )
    prober = _Prober(url, api, grid, ids, limits.body(grid.extra_body))
    rows: list[tuple[str, int, int, int, float, float]] = []

    def med(values: list[float]) -> float:
        return float(statistics.median(values))

    async def measure() -> None:
        await prober.prefill(8)  # warm-up
        for p in grid.prefill_tokens:
            lat = med([await prober.prefill(p) for _ in range(grid.repeats)])
            rows.append(("prefill", 1, p, 0, lat, float("nan")))
        for b in grid.decode_batch:
            for ctx in grid.decode_context:
                got = [await prober.decode(b, ctx) for _ in range(grid.repeats)]
                lat, eng = med([g[0] for g in got]), med([g[1] for g in got])
                rows.append(("decode", b, 0, ctx + grid.decode_steps // 2, lat, eng))
        for b in grid.mixed_batch:
            for p in grid.mixed_prompt_tokens:
                got2 = [await prober.mixed(b, p) for _ in range(grid.repeats)]
                rows.append(
                    (
                        "mixed",
                        b,
                        p,
                        int(med([g[1] for g in got2])),
                        med([g[0] for g in got2]),
                        float("nan"),
                    )
                )

    asyncio.run(measure())
    sources = {
        "prefill": "engine timings.prompt_ms"
        if "prefill" in prober.engine_timed
        else "client TTFT",
        "decode": "client median inter-chunk gap (engine predicted_per_token_ms in engine_ms)",
        "mixed": "engine timings.prompt_ms of the probe"
        if "mixed" in prober.engine_timed
        else "client TTFT of the probe",
    }

    def write_csv(tmp: Path) -> None:
        lines = ["phase,batch_size,input_tokens,context_len,latency_ms,engine_ms"]
        for ph, b, i, c, lat, eng in rows:
            lines.append(f"{ph},{b},{i},{c},{lat:.4f},{'' if eng != eng else f'{eng:.4f}'}")
        tmp.write_text("\n".join(lines) + "\n")

    meta = _metadata(props, url, api, hardware, flags, sources)
    atomic_write(out, write_csv)
    atomic_write(
        out.with_suffix(".yaml"), lambda tmp: tmp.write_text(yaml.safe_dump(meta, sort_keys=False))
    )
    word = "engine" if prober.engine_timed else "client"
    return len(rows), word
