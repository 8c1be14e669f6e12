"""The probes of ``lyra-simpy profile`` against one endpoint: a lone prompt, a decode batch,
a prompt beside decoders, each timed by the engine where it says (llama.cpp's ``timings``,
vLLM's ``/metrics``) and by the client otherwise (:mod:`lyra_simpy.live.profile`)."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np

from lyra_simpy.errors import LyraError
from lyra_simpy.live.client import (
    Api,
    Outcome,
    lockstep_step_ms,
    median_gap_ms,
    new_client,
    send,
    shared_tls,
)
from lyra_simpy.live.limits import endpoint_limits, token_range, with_vocab
from lyra_simpy.live.vllm_cpu import parse_counters
from lyra_simpy.live.workload import TokenIds

if TYPE_CHECKING:
    from lyra_simpy.live.profile_grid import ProfileGrid

METRICS_WAIT_S = 2.0
"""How long a probe waits for vLLM's ``/metrics`` to count the request that just
finished (it is counted when the server has processed its last output)."""


class Prober:
    """The probes of one profile against one endpoint (the module docstring of
    :mod:`lyra_simpy.live.profile` says what each measures and how it is timed)."""

    def __init__(
        self,
        url: str,
        api: Api,
        grid: ProfileGrid,
        ids: TokenIds,
        extra: dict[str, Any],
        seed: int,
    ) -> None:
        self.url, self.api, self.grid, self.ids, self.extra = url, api, grid, ids, extra
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self.timed_by: dict[str, str] = {}
        """Phase → which engine figure timed its prompts."""
        self.path_ms: dict[int, list[float]] = {}
        """Prompt size → lone prefills' client TTFT less the engine's prompt time."""
        self.metrics: bool | None = None
        """Whether the endpoint has vLLM's prefill-time metric (None: not asked yet)."""
        self.pin = False
        """Pin requests to llama.cpp slots (``id_slot``)."""
        self.mixed_retries = 0
        """Mixed probes run again because their streams did not show the prompt's steps
        (``grid.mixed_step_tries``)."""

    @classmethod
    def for_endpoint(
        cls,
        url: str,
        api: Api,
        grid: ProfileGrid,
        seed: int,
        vocab_size: int | None = None,
    ) -> Prober:
        """The probes of *grid* against *url*: prompt ids within the model's vocabulary
        (*vocab_size*, else what the endpoint reports; :mod:`.limits`) and the request
        fields the grid and the served model need."""
        limits = with_vocab(endpoint_limits(url), vocab_size)
        ids = token_range(grid.token_ids, limits, "grid.token_ids")
        return cls(url, api, grid, ids, limits.body(grid.extra_body), seed)

    def _prompt(self, n: int) -> list[int]:
        ids = self.ids
        return [int(x) for x in self.rng.integers(ids.low, ids.high, size=n)]

    async def _send(
        self,
        n_in: int,
        n_out: int,
        t0: float,
        first: asyncio.Event | None = None,
        slot: int | None = None,
    ) -> Outcome:
        client = new_client()
        extra = self.extra if slot is None or not self.pin else {**self.extra, "id_slot": slot}
        try:
            out = await send(
                client,
                self.url,
                self.api,
                self._prompt(n_in),
                n_out,
                self.grid.timeout_s,
                t0,
                extra,
                first,
            )
        finally:
            await client.aclose()
        if out.error is not None:
            raise LyraError(f"profile: request ({n_in} in, {n_out} out) failed: {out.error}")
        return out

    def _prompt_ms(
        self, out: Outcome, phase: str, engine_ms: float | None = None, prompt: int = 0
    ) -> float:
        """The engine's time for *out*'s prompt where it tells it (llama.cpp's
        ``timings.prompt_ms``, else *engine_ms* from vLLM's ``/metrics``), else the
        client's TTFT. A lone prefill's TTFT less the engine's time is one sample of
        the request path (``workload.request_path_ms``), kept by *prompt* size."""
        ttft_ms = (out.chunk_s[0] - out.sent_s) * 1000.0
        if out.timings and isinstance(out.timings.get("prompt_ms"), (int, float)):
            engine_ms = float(out.timings["prompt_ms"])
            self.timed_by[phase] = "engine timings.prompt_ms"
        elif engine_ms is not None:
            self.timed_by[phase] = "engine /metrics vllm:request_prefill_time_seconds"
        else:
            return ttft_ms
        if phase == "prefill":
            self.path_ms.setdefault(prompt, []).append(ttft_ms - engine_ms)
        return engine_ms

    async def _prefill_seconds(self) -> tuple[float, float] | None:
        """vLLM's histogram of finished requests' prefill times: (sum in s, count), or
        None when the endpoint has no such metric (not vLLM, or ``/metrics`` off)."""
        if self.metrics is False:
            return None
        try:
            async with httpx.AsyncClient(timeout=5.0, verify=shared_tls()) as client:
                resp = await client.get(self.url + "/metrics")
        except httpx.HTTPError:
            resp = None
        got = parse_counters(resp.text) if resp is not None and resp.status_code == 200 else {}
        if "prefill_time_count" not in got:
            self.metrics = False
            return None
        self.metrics = True
        return got.get("prefill_time_s", 0.0), got["prefill_time_count"]

    async def _engine_prefill_ms(self, before: tuple[float, float] | None) -> float | None:
        """The prefill time of the one request that finished since *before* (vLLM's
        ``/metrics``, which counts a request when it finishes: read until it has, for
        at most :data:`METRICS_WAIT_S`); None without the metric or when the count
        did not move by exactly one."""
        if before is None:
            return None
        deadline = time.perf_counter() + METRICS_WAIT_S
        while True:
            now = await self._prefill_seconds()
            if now is None or now[1] > before[1] + 1:
                return None
            if now[1] == before[1] + 1:
                return (now[0] - before[0]) * 1000.0
            if time.perf_counter() > deadline:
                return None
            await asyncio.sleep(0.01)

    async def prefill(self, p: int) -> float:
        before = await self._prefill_seconds()
        out = await self._send(p, 1, time.perf_counter(), slot=0)
        return self._prompt_ms(out, "prefill", await self._engine_prefill_ms(before), p)

    async def prompt_after(self, p: int, gap_s: float) -> float:
        """A lone prompt of *p* tokens sent after *gap_s* of idle (the wake probe): the
        engine's prompt time where it says (llama.cpp's ``timings.prompt_ms``), else the
        client's TTFT; not a sample of the request path."""
        await asyncio.sleep(gap_s)
        return self._prompt_ms(await self._send(p, 1, time.perf_counter(), slot=0), "wake")

    async def save_probe(
        self, sizes: list[int], repeats: int, p: int
    ) -> list[tuple[int, float]] | None:
        """The prompt-cache probe: *repeats* rounds of :meth:`save_wait` at each of *sizes*
        with a lone prompt of *p* tokens; (size, wait in ms) each, in the order taken.
        None when the endpoint does not give ``timings.prompt_ms`` (nothing to tell the
        wait by; the first pair tells)."""
        rows: list[tuple[int, float]] = []
        for _ in range(repeats):
            for n in sizes:
                ms = await self.save_wait(n, p)
                if ms is None:
                    return None
                rows.append((n, ms))
        return rows

    async def fill_cache(self, prompts: int, n: int) -> None:
        """*prompts* lone prompts of *n* tokens (one output each, ids of their own) one
        after another in slot 1: each launch copies the last one's state into the
        prompt cache (``grid.save_fill_prompts``)."""
        for _ in range(prompts):
            await self._send(n, 1, time.perf_counter(), slot=1)

    async def save_wait(self, n: int, p: int) -> float | None:
        """A prompt of *n* tokens (one output) in slot 1, then, once it is done, a lone
        prompt of *p* tokens in slot 0 (the prompt-cache probe, ``grid.save_prompt_tokens``):
        the second's client TTFT less its ``timings.prompt_ms`` (ms), the request path plus
        the copy of slot 1's *n* tokens into the cache at its launch; None without
        ``timings.prompt_ms``."""
        await self._send(n, 1, time.perf_counter(), slot=1)
        out = await self._send(p, 1, time.perf_counter(), slot=0)
        ms = out.timings.get("prompt_ms") if out.timings else None
        if not isinstance(ms, (int, float)):
            return None
        return (out.chunk_s[0] - out.sent_s) * 1000.0 - float(ms)

    async def prefill_together(self, b: int, p: int) -> float:
        """*b* prompts of *p* tokens sent at once to slots 0..b−1 (llama.cpp): the engine's
        time from the first prompt's start to the last one's end — each request's first
        token (client clock) less its ``timings.prompt_ms`` is its start."""
        t0 = time.perf_counter()
        outs = await asyncio.gather(*(self._send(p, 1, t0, slot=k) for k in range(b)))
        ends, starts = [], []
        for o in outs:
            ms = o.timings.get("prompt_ms") if o.timings else None
            if not isinstance(ms, (int, float)):
                raise LyraError(
                    "profile: grid.prefill_together needs the engine's timings.prompt_ms "
                    "(llama.cpp's /completion); this endpoint gave none"
                )
            ends.append(o.chunk_s[0])
            starts.append(o.chunk_s[0] - float(ms) / 1000.0)
        self.timed_by["prefill"] = "engine timings.prompt_ms"
        return (max(ends) - min(starts)) * 1000.0

    async def decode(
        self, b: int, ctx: int, slots: tuple[int, ...] | None = None
    ) -> tuple[float, float, float]:
        """*b* requests of *ctx* prompt tokens decoding together, pinned to *slots* (None:
        0..b−1): (the median chunk gap, the lock-step window's mean step, the engine's
        mean ``predicted_per_token_ms`` or NaN)."""
        t0 = time.perf_counter()
        steps = self.grid.decode_steps
        outs = await asyncio.gather(
            *(self._send(ctx, steps, t0, slot=k) for k in (slots or range(b)))
        )
        engine = [
            float(o.timings["predicted_per_token_ms"])
            for o in outs
            if o.timings and isinstance(o.timings.get("predicted_per_token_ms"), (int, float))
        ]
        gap = median_gap_ms(outs)
        mean = lockstep_step_ms(outs, gap)
        return gap, mean, statistics.mean(engine) if engine else float("nan")

    async def lockstep_ends(self, b: int, ctx: int, n_out: int, t0: float) -> list[float]:
        """*b* requests of *ctx* prompt tokens and *n_out* outputs decoding in lock-step
        (slots 0..b−1): when each step that emitted a token ended, s from *t0*, read on
        the stream whose first token came last — from that token on every stream decodes
        (with per-slot KV or context checkpoints the prompts can take steps of their own,
        so the streams' first tokens need not share a step) — up to the step the first
        stream ended in. The first ends a prompt's step; each one after it, a decode step of *b*."""
        outs = await asyncio.gather(*(self._send(ctx, n_out, t0, slot=k) for k in range(b)))
        last = max(outs, key=lambda o: o.chunk_s[0])
        # the step the first stream ended in: its last chunk, give or take half a step
        # (one step's chunks reach the client a little apart)
        half = float(np.median(np.diff(last.chunk_s))) / 2 if len(last.chunk_s) > 1 else 0.0
        end = min(o.chunk_s[-1] for o in outs) + half
        return [float(t) for t in last.chunk_s if t <= end]

    async def mixed(
        self, b: int, p: int, ctx: int, steps: int = 0
    ) -> tuple[float, int, list[float]]:
        """A prompt of *p* tokens beside *b* decoders of *ctx* prompt tokens: (its prompt
        time, the decoders' context when it joined, and with *steps* > 0 the time of each
        of the last *steps* engine steps up to its first token, in order:
        :func:`prompt_step_gaps`, the whole probe run again up to
        ``grid.mixed_step_tries`` times while the streams do not show them)."""
        tries = self.grid.mixed_step_tries
        for _ in range(tries - 1):
            with contextlib.suppress(StepsNotSeenError):
                return await self._mixed_once(b, p, ctx, steps)
            self.mixed_retries += 1
        try:
            return await self._mixed_once(b, p, ctx, steps)
        except StepsNotSeenError as err:
            raise LyraError(f"{err} (grid.mixed_step_tries: {tries} tries)") from None

    async def _mixed_once(
        self, b: int, p: int, ctx: int, steps: int
    ) -> tuple[float, int, list[float]]:
        """One try of :meth:`mixed`."""
        t0 = time.perf_counter()
        n_out = self.grid.decode_steps

        firsts = [asyncio.Event() for _ in range(b)]
        decoders = [
            asyncio.create_task(self._send(ctx, n_out * 2, t0, e, slot=k))
            for k, e in enumerate(firsts)
        ]
        # The probe joins once every decoder's prompt is in (then each step is decodes).
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in firsts)), self.grid.timeout_s)
        await asyncio.sleep(0.02)
        before = await self._prefill_seconds()
        probe = await self._send(p, 1, t0, slot=b)
        engine_ms = await self._engine_prefill_ms(before)  # the decoders run on
        outs = await asyncio.gather(*decoders)
        probe_at = probe.sent_s
        done_before = [sum(1 for s in o.chunk_s if s <= probe_at) for o in outs]
        gaps = prompt_step_gaps(outs, probe.chunk_s[0], steps) if steps else []
        return (
            self._prompt_ms(probe, "mixed", engine_ms),
            ctx + int(statistics.median(done_before)),
            gaps,
        )


class StepsNotSeenError(LyraError):
    """A mixed probe's decoders' streams do not show its prompt's steps
    (:func:`prompt_step_gaps`)."""


def prompt_step_gaps(decoders: list[Outcome], first_s: float, steps: int) -> list[float]:
    """The last *steps* engine steps up to a probe's first token (at *first_s*), in order
    (ms), from its *decoders*' streams: each decoder gets a token every step, the probe's
    first comes out of the step that ran its prompt's last tokens, so the chunk of each
    decoder nearest *first_s* ends that step and the gaps before it are the steps
    before; each step's time is the median over the decoders."""
    per: list[list[float]] = []
    for out in decoders:
        chunks = np.asarray(out.chunk_s)
        i = int(np.argmin(np.abs(chunks - first_s)))
        if i < steps:
            raise StepsNotSeenError(
                f"profile: a mixed probe's decoder had {i} steps before the probe's first "
                f"token, {steps} needed"
            )
        per.append((np.diff(chunks[i - steps : i + 1]) * 1000.0).tolist())
    return [float(statistics.median(col)) for col in zip(*per, strict=True)]
