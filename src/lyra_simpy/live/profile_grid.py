"""What ``lyra-simpy profile`` measures: the grid of probes (``--grid``, YAML)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationError,
)

from lyra_simpy.errors import TraceError, from_validation_error
from lyra_simpy.live.workload import TokenIds


class ProfileGrid(BaseModel):
    """What to measure (defaults suit a small model on a CPU)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prefill_tokens: list[PositiveInt] = [16, 64, 128, 256, 512]
    decode_batch: list[PositiveInt] = [1, 2, 4, 8]
    decode_context: list[PositiveInt] = [64, 256, 512]
    decode_steps: PositiveInt = 24
    decode_step: Literal["median", "mean"] = "median"
    """What a decode row's latency is. ``median`` (default): the median gap between
    chunks over the probe's streams, robust to a slow spell of the host inside the probe
    (issue 12: robust statistics, never a mean one slow episode moves). ``mean``: the
    mean step of the lock-step window, once every prompt is in until the first stream
    ends (:func:`~lyra_simpy.live.client.lockstep_step_ms`) — what a TPOT averages over,
    the slow steps included, but as many of them as the probe's few seconds caught. Both
    are written either way (extra columns ``median_gap_ms`` and ``mean_step_ms``; the
    validation matrices compare the two on the same probes: ``--resimulate`` with
    ``--decode-step mean`` for llama.cpp, the vLLM document's third column). A host's slow
    spells are modelled apart (``cost.jitter.spells``, fitted on runs)."""
    mixed_batch: list[PositiveInt] = [1, 3, 7]
    """Decoders beside the probe: each must be below the server's slots (the probe
    needs one), else the probe waits and runs with the decoders gone (checked against
    llama.cpp's ``/props`` ``total_slots``)."""
    mixed_prompt_tokens: list[PositiveInt] = [64, 256]
    mixed_context: PositiveInt | list[PositiveInt] = 128
    """The decoders' prompt in the mixed probes; a list: the mixed rows at each (with
    llama.cpp's ``-kvu`` a prompt beside longer decoders spans more cells for the same
    pairs computed: rows at two contexts let the fit tell the mask scan from the
    attention computed, ``docs/VALIDATION-llamacpp.md`` item 10)."""
    mixed_timing: Literal["auto", "prompt", "steps"] = "auto"
    """What a mixed row is. ``prompt``: the probe's whole prompt, timed by the engine as
    a ``prefill`` row is (llama.cpp's ``timings.prompt_ms``), whatever steps it ran in
    (llama.cpp with context checkpoints: two, the ``steps`` column). ``steps``: one row
    per engine step the prompt ran in, as DESIGN §4 defines a row, each timed by the gap
    its decoders' streams show around it (every decoder emits a token each step); its
    ``input_tokens`` are the prompt tokens computed in that step, and the extra columns
    ``prompt_tokens`` and ``prompt_step`` say which prompt and which of its steps
    (llama.cpp only: the engine model says how many steps a prompt runs). The split
    matters with checkpoints: a prompt's first step (its slot launched, its tokens but
    the last 4) and its last (4 tokens, a checkpoint copied, logits) cost differently,
    and a fit of whole-prompt rows cannot tell them apart — on the AMD host of
    ``docs/VALIDATION-llamacpp.md`` item 13 the real runs' first prompt steps ran 1.07-1.50x
    what such a fit priced them at, their checkpoint steps 0.90-1.28x. ``auto``
    (default): ``steps`` against llama.cpp, ``prompt`` elsewhere."""
    mixed_step_tries: PositiveInt = 3
    """How many times at most a ``steps`` mixed probe is run while its decoders' streams
    do not show the prompt's steps before its first token (the decoders' chunk nearest the
    probe's first token has fewer tokens before it than the prompt has steps; the likely
    cause: one step's tokens reach the client up to ~10 ms apart on a loaded host, so the
    nearest chunk can be the step before). After the last try the profile stops with one
    line; the metadata's ``mixed_step_retries`` counts the probes run again. A
    validation matrix's profile stopped so once in item 60, on a slow host
    (``validation/host_noise.py`` 48 ms, 41 when quiet); every earlier profile had passed
    (``docs/VALIDATION-llamacpp.md``)."""
    repeats: PositiveInt = 3
    speed_reference: Literal["off", "record", "scale"] = "off"
    """Time the host's speed beside every measurement: before each one, a lone request
    decodes (a prompt of ``speed_reference_context`` fresh tokens, ``decode_steps``
    outputs; its median chunk gap: the batch-1 step the validation matrices gate their
    real runs on, ``validation/speed_gate.py``). ``record``: the rows stay as measured;
    the metadata's ``speed_reference`` gives the typical step (the median of every
    reference: the speed the profile was taken at, to run or gate real loads at) and
    ``PROFILE.speed.csv`` every measurement beside its reference. ``scale``: besides,
    each measurement is scaled by the typical reference over the one beside it before
    the rounds' median, so that a row reads as the host at its typical speed (extra
    columns ``raw_latency_ms``, the median unscaled, and ``speed_factor``, the median of
    the row's reference over the typical one; both modes write them). Scaling helps only
    if the host's speed holds from the reference to the measurement, and if a slow
    moment slows every kind of step alike: on the 2-core AMD EPYC VM of
    ``docs/VALIDATION-llamacpp.md`` item 12 neither held (a measurement's deviation
    correlated +0.28 with its reference's, slope 0.31; consecutive references +0.19),
    and scaling widened the rows' spread over the rounds (1.14 -> 1.17 largest over
    smallest): check a host with ``validation/speed_reference.py`` before scaling. Off
    by default: it adds a lone decode to every measurement."""
    speed_reference_context: PositiveInt = 32
    """The reference request's prompt (tokens): the speed gate's lone request."""
    speed_reference_beside: tuple[PositiveInt, PositiveInt] | None = None
    """With ``speed_reference`` on, ``[B, N]``: also time a prompt of *N* fresh tokens
    beside *B* sequences decoding (a pair the grid's ``mixed_batch`` and
    ``mixed_prompt_tokens`` hold), as ``lyra-simpy speed --prompt N --beside B`` times it
    (:func:`~lyra_simpy.live.speed_prompt.beside_speed`: the prompt's steps summed, the
    decoders' prompts each of ``mixed_context`` in turn), before every
    ``speed_reference_beside_every``-th measurement, so that the reading has a reference
    taken through the profile's minutes (the metadata's ``speed_reference.beside``: the
    median of them all) instead of the two mixed rows of the pair, each the median of
    ``repeats`` probes taken at the same moments: on the llama.cpp matrix's 2-core host
    one such row ran 21 % above its twin (about 7 % of it the decoders' context) and the
    reading read 9 % low at every load of its point (docs/VALIDATION-llamacpp.md item 77);
    read against 26 such references the point ran again read 1.5 % low (item 78). None
    (default): off."""
    speed_reference_beside_every: PositiveInt = 4
    """How many of the grid's measurements apart the beside reference is taken (1:
    before every one)."""
    wander_s: NonNegativeFloat = 0.0
    """After the grid, this long (s) of lock-step decode streams timed step by step, for
    the host's wander (``cost.jitter.wander``): ``wander_batch`` requests of the smallest
    ``decode_context`` prompt and ``wander_outputs`` outputs each, sent again until the
    time is up; every step goes to ``PROFILE.wander.csv`` (a decode row each, as the
    grid's, and its ``end_s``), from which ``lyra-simpy calibrate`` fits the drift of
    the steps against the fit (``noise.wander``). The grid's rows are medians of short
    probes and cannot show a drift over seconds; a minute of steps of one shape does.
    0 (default): off."""
    wander_batch: PositiveInt | None = None
    """The wander probe's decoders (None: the largest ``decode_batch``, the steps a busy
    server runs)."""
    wander_outputs: PositiveInt = 512
    """Each wander stream's outputs: its steps between two prompts (a prompt's step is
    not a decode row and is left out). Prompt and outputs must fit a slot's context."""
    wake_gaps_s: list[PositiveFloat] = []
    """After the grid (and the wander probe), lone prompts of ``wake_prompt_tokens``
    each sent after this much idle (s) and back to back (gap 0), ``wake_repeats``
    rounds: each a row of ``PROFILE.wake.csv`` (its gap and time: the engine's own where
    it says, else the client's TTFT), from which ``lyra-simpy calibrate`` reads the
    engine's wake after idle (``cost.wake: fitted``,
    :func:`~lyra_simpy.cost.wake.fitted_wake`). The grid's probes run back to back and
    never see it. Empty (default): off."""
    wake_repeats: PositiveInt = 8
    """Rounds of the wake probe (each: ``wake_warmup`` prompts, then every gap once,
    back to back first)."""
    wake_warmup: PositiveInt = 2
    """Lone decode requests (a prompt of ``wake_prompt_tokens``, ``decode_steps``
    outputs) sent back to back and not recorded at the start of each round, so that the
    round's back-to-back prompt finds the engine busy, not still waking from the last
    round's longest gap (without them the first matrix point's probe read no wake:
    ``docs/VALIDATION-llamacpp.md`` item 33)."""
    wake_prompt_tokens: PositiveInt | None = None
    """The wake probe's prompt (None: the smallest ``prefill_tokens``)."""
    timeout_s: PositiveFloat = 120.0
    save_prompt_tokens: list[PositiveInt] = [32, 256, 512, 768]
    """llama.cpp with its prompt cache in RAM (``--cache-ram``, on by default, and
    ``--cache-idle-slots``): after the grid (and the wander probe), ``save_repeats``
    rounds of, for each size *N* that fits a slot's context, a prompt of *N* tokens and
    one output in slot 1, then, once it is done, a lone prompt of the smallest
    ``prefill_tokens`` in slot 0. When the server gives the lone one its slot it first
    copies every idle slot's state not yet in its cache — slot 1's *N* tokens — into host
    RAM, on the main loop, before its prompt starts (``tools/server/server-context.cpp``
    ``server_slot::prompt_save``, ``server-task.cpp`` ``server_prompt_cache::alloc``):
    its client TTFT less its ``timings.prompt_ms`` is the request path plus that copy.
    Each pair is a row of ``PROFILE.save.csv`` (*N*, that wait); ``lyra-simpy calibrate``
    fits the ms per token saved (``prompt_save`` in the fit file,
    :mod:`~lyra_simpy.calibration.savefit`), which the ``llamacpp`` engine model
    charges at every launch (:mod:`~lyra_simpy.policies.llamacpp_save`). The grid's
    probes keep few tokens in idle slots and never see it. Empty: off."""
    save_repeats: PositiveInt = 5
    """Rounds of the prompt-cache probe (``save_prompt_tokens``)."""
    save_fill_prompts: NonNegativeInt = 0
    """After the prompt-cache probe, fill the server's cache to its limit and take the
    probe again (0, default: not): this many lone prompts of ``save_fill_tokens``
    tokens and one output, one after another in slot 1, each with ids of its own, so
    that each launch copies the last one's state into the cache; once the cache holds
    ``--cache-ram`` it drops its oldest states to make room, and the probe taken again
    (``PROFILE.save_full.csv``) reads what a save costs into memory the cache held
    before (``prompt_save.reused_ms_per_token``;
    :mod:`~lyra_simpy.policies.llamacpp_save`). Enough prompts: ``cache_ram_mib`` over
    one state's size (``LlamaCppConfig.state_kib`` of the prompt with its checkpoint),
    plus a tenth — 548 of 512 tokens for 8192 MiB on Gemma 3 270M, about 6 minutes on
    the matrix's CPU. The server is left full, as a server that has run a while."""
    save_fill_tokens: PositiveInt | None = None
    """The fill's prompts (None: the largest ``save_prompt_tokens`` that fits a slot)."""
    fragmented_decode_batch: list[PositiveInt] = [2]
    """llama.cpp with per-slot KV: decode batches measured again in every other slot
    (module docstring); each needs 2B − 1 slots."""
    split_decode_batch: list[PositiveInt] = []
    """llama.cpp with per-slot KV: decode batches of *B* measured in slots 0..B−2 and B, a
    pass of B − 1 sequences beside a pass of one (a step whose passes differ in rows,
    which ``cost.decode_passes: each`` prices as lone steps of their rows:
    ``docs/VALIDATION-llamacpp.md`` item 54); each needs B + 1 slots. Empty (default): off."""
    prefill_together: list[PositiveInt] = []
    """llama.cpp: prefill rows of *B* prompts of each ``prefill_tokens`` length sent
    together (``batch_size`` *B*, pinned to slots 0..B−1), for each *B* listed. With
    ``-kvu`` they share forward passes, and its flash attention computes each prompt's
    own cells only, while its mask spans all of them (:mod:`~lyra_simpy.policies.llamacpp`):
    these rows let the fit tell the two apart (``per_computed_attention_ms``), which lone
    prompts cannot (how well, so far: ``docs/VALIDATION-llamacpp.md`` item 10). Each *B*
    needs *B* slots; 1 adds nothing (the lone prompts)."""
    checkpoint_prompt_tokens: list[PositiveInt] = [4, 8]
    """llama.cpp on a sliding-window model: extra prefill rows around the checkpoint stop."""
    sliding_window: bool = False
    """The model has sliding-window attention (Gemma 3): llama.cpp checkpoints prompts."""
    n_ctx_train: PositiveInt = 32768
    """The model's training context (for a server started with ``-c 0`` or without ``-c``)."""
    token_ids: TokenIds | None = None
    """Prompt id range (None: the default, fitted to the vocabulary)."""
    extra_body: dict[str, Any] = {}
    prompt_seed: int | None = None
    """Seed of the probes' random prompt ids (None: a fresh one each run, written to the
    metadata). Fresh by default: an engine with a prefix cache (vLLM's is on by default)
    keeps the last profile's prompts, and the same ids sent again would be served from
    it, pricing prompts far too cheap."""


def mixed_contexts(grid: ProfileGrid) -> list[int]:
    """``grid.mixed_context`` as a list."""
    ctx = grid.mixed_context
    return [ctx] if isinstance(ctx, int) else list(ctx)


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
