"""What llama.cpp's server runs for each probe of ``lyra-simpy profile``: its knobs from the
launch flags, and per probe row the steps, forward passes, context checkpoints, passes
computing logits and attention cells (the extra columns of a llama.cpp profile,
:mod:`lyra_simpy.live.profile`), by the rules of :mod:`~lyra_simpy.policies.llamacpp`
and :mod:`~lyra_simpy.policies.ubatch`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from lyra_simpy.errors import LyraError
from lyra_simpy.policies.llamacpp import prompt_chunk
from lyra_simpy.policies.llamacpp_attention import step_attention
from lyra_simpy.policies.llamacpp_config import LlamaCppConfig
from lyra_simpy.policies.ubatch import pass_counts

if TYPE_CHECKING:
    from lyra_simpy.live.profile_grid import ProfileGrid


def llamacpp_config(flags: str, grid: ProfileGrid) -> LlamaCppConfig | None:
    """The llama.cpp server's scheduler knobs from its launch *flags* (None when they are
    not a llama.cpp launch line, e.g. empty)."""
    from lyra_simpy.presets import apply_engine

    if not flags.strip():
        return None
    raw: dict[str, Any] = {
        "engine": {"name": "llamacpp", "command": "llama-server " + flags},
        "scheduler": {"name": "llamacpp", "n_ctx_train": grid.n_ctx_train},
    }
    try:
        sched = apply_engine(raw)["scheduler"]
    except LyraError as exc:
        raise LyraError(f"profile --flags: {exc}") from None
    sched["sliding_window"] = grid.sliding_window and sched.get("sliding_window", True)
    return LlamaCppConfig.model_validate(sched)


def save_sizes(grid: ProfileGrid, llama: LlamaCppConfig | None) -> list[int]:
    """The sizes of ``grid.save_prompt_tokens`` the probe runs against a llama.cpp server
    with *llama*'s knobs: those whose prompt and output fit a slot, none where the server
    keeps no prompt cache (``--cache-ram 0`` or ``--no-cache-idle-slots``), has one slot,
    or is not llama.cpp (*llama* None). Sizes listed but none fitting is an error."""
    if llama is None or not grid.save_prompt_tokens:
        return []
    if llama.cache_ram_mib == 0 or not llama.cache_idle_slots or llama.n_parallel < 2:
        return []
    sizes = sorted({n for n in grid.save_prompt_tokens if n + 1 <= llama.slot_ctx})
    if not sizes:
        raise LyraError(
            f"grid.save_prompt_tokens: got {grid.save_prompt_tokens}, none fits a slot's "
            f"context ({llama.slot_ctx} tokens with one output): list smaller sizes, or [] "
            "for none"
        )
    return sizes


def fill_size(grid: ProfileGrid, llama: LlamaCppConfig | None, sizes: list[int]) -> int | None:
    """The prompt the cache fill sends (``grid.save_fill_prompts``) before the
    prompt-cache probe is taken again; None when there is no fill (none asked for, or
    no probe: *sizes* empty). A fill that cannot fill (``--cache-ram -1``) or a prompt
    that does not fit a slot is an error."""
    if not grid.save_fill_prompts or not sizes or llama is None:
        return None
    if llama.cache_ram_mib < 0:
        raise LyraError(
            f"grid.save_fill_prompts: got {grid.save_fill_prompts}, but the server's "
            "--cache-ram is -1 (no limit): its cache never fills; use 0"
        )
    size = grid.save_fill_tokens or max(sizes)
    if size + 1 > llama.slot_ctx:
        raise LyraError(
            f"grid.save_fill_tokens: got {size}, which with one output does not fit a "
            f"slot's context ({llama.slot_ctx} tokens): use at most {llama.slot_ctx - 1}"
        )
    return size


def check_slots(grid: ProfileGrid, llama: LlamaCppConfig) -> None:
    need = max(
        [
            *grid.decode_batch,
            *(2 * b - 1 for b in grid.fragmented_decode_batch),
            *(b + 1 for b in grid.split_decode_batch),
            *grid.prefill_together,
        ]
    )
    if need > llama.n_parallel:
        raise LyraError(
            "grid.decode_batch / fragmented_decode_batch / split_decode_batch / "
            "prefill_together: need "
            f"{need} slots, the server "
            f"has {llama.n_parallel} (-np): requests pinned to a slot would wait"
        )


def probe_passes(
    llama: LlamaCppConfig, segments: list[tuple[int, int]], outputs: list[bool]
) -> tuple[int, int]:
    """(passes, passes computing logits) of one step of *segments* (slot, tokens)."""
    n, out, _ = pass_counts(
        segments, outputs, llama.batch_tokens, llama.ubatch_tokens, llama.kv_unified
    )
    return n, out


class StepCounts(NamedTuple):
    """What one engine step of a probe runs (:func:`prompt_steps`)."""

    tokens: int
    """Prompt tokens computed in it."""
    passes: int
    checkpoints: int
    outputs: int
    """Passes computing logits."""
    spanned: int
    """Attention cells its prompt tokens span."""
    computed: int
    """(query row, KV cell) pairs of attention computed."""


def prompt_steps(
    llama: LlamaCppConfig, prompts: int, prompt: int, decoders: int, context: int
) -> list[StepCounts]:
    """The engine steps llama.cpp runs for *prompts* prompts of *prompt* tokens each,
    sent together to slots *decoders*, *decoders* + 1, ..., beside *decoders* sequences
    of *context* tokens in slots 0..decoders−1 that each decode a token a step
    (:mod:`~lyra_simpy.policies.llamacpp`: ``update_slots`` fills a step's ``n_batch``
    in slot order, each prompt's chunk stopping at its checkpoint stops;
    :func:`~lyra_simpy.policies.llamacpp_attention.step_attention`), in order. Idle slots are
    taken to hold no cells: with ``-kvu`` the server's default prompt cache clears them
    when a probe starts (with ``--cache-ram 0`` they keep an earlier probe's, which this
    does not count)."""
    stops = llama.checkpoint_stops
    done = [0] * prompts
    out: list[StepCounts] = []
    while min(done) < prompt:
        room = llama.batch_tokens - decoders
        chunks: list[tuple[int, int]] = []  # (tokens before, tokens added) of each prompt
        slots: list[int] = []
        checkpoints = 0
        for k in range(prompts):
            if room <= 0 or done[k] == prompt:
                continue
            take = prompt_chunk(prompt - done[k], room, stops)
            if llama.checkpoint_before(done[k], prompt - done[k] - take):
                checkpoints += 1
            chunks.append((done[k], take))
            slots.append(decoders + k)
            room -= take
        segments = [(k, 1) for k in range(decoders)] + [
            (slot, take) for slot, (_, take) in zip(slots, chunks, strict=True)
        ]
        ends = [True] * decoders + [before + take == prompt for before, take in chunks]
        n, logits = probe_passes(llama, segments, ends)
        held = decoders * (context + len(out)) + sum(done)
        counts = step_attention(llama, decoders, chunks, held)
        out.append(
            StepCounts(
                sum(take for _, take in chunks),
                n,
                checkpoints,
                logits,
                counts.spanned,
                counts.computed,
            )
        )
        for slot, (_, take) in zip(slots, chunks, strict=True):
            done[slot - decoders] += take
    return out


def prompt_counts(
    llama: LlamaCppConfig, prompts: int, prompt: int, decoders: int, context: int
) -> tuple[int, int, int, int, int, int]:
    """(steps, passes, checkpoints, passes computing logits, attention cells spanned,
    attention computed) over every step of :func:`prompt_steps`."""
    steps = prompt_steps(llama, prompts, prompt, decoders, context)
    return (
        len(steps),
        sum(s.passes for s in steps),
        sum(s.checkpoints for s in steps),
        sum(s.outputs for s in steps),
        sum(s.spanned for s in steps),
        sum(s.computed for s in steps),
    )


COUNT_COLUMNS = (
    "steps",
    "passes",
    "checkpoints",
    "output_passes",
    "attention_cells",
    "attention_computed",
)
"""The extra columns :func:`row_counts` gives, in its order (``lyra-simpy profile``
writes them so)."""


def row_counts(
    llama: LlamaCppConfig,
    phase: str,
    batch: int,
    prompt: int,
    context: int,
    slots: tuple[int, ...] | None = None,
    step: int | None = None,
) -> tuple[int, int, int, int, int, int]:
    """The extra columns of one probe row (:data:`COUNT_COLUMNS`) as the server runs it:
    a ``decode`` row's *batch* decoders in *slots* (None: 0..batch−1,
    :func:`~lyra_simpy.calibration.profiles.decode_slots`), one step whose every pass
    computes logits; a ``prefill`` row's *batch* prompts of *prompt* tokens sent
    together; a ``mixed`` row's prompt of *prompt* tokens beside *batch* decoders of
    *context* tokens, or with *step* only that step of it (``grid.mixed_timing:
    steps``)."""
    if step is not None:
        return (1, *prompt_steps(llama, 1, prompt, batch, context)[step][1:])
    if phase == "decode":
        segments = [(k, 1) for k in (slots or range(batch))]
        n_passes, logits = probe_passes(llama, segments, [True] * batch)
        return 1, n_passes, 0, logits, 0, 0
    if phase == "prefill":  # batch_size prompts sent together (grid.prefill_together)
        return prompt_counts(llama, batch, prompt, 0, 0)
    return prompt_counts(llama, 1, prompt, batch, context)
