"""What llama.cpp's server runs for each probe of ``lyra-simpy profile``: its knobs from the
launch flags, and per probe row the steps, forward passes, context checkpoints, passes
computing logits and attention cells (the extra columns of a llama.cpp profile,
:mod:`lyra_simpy.live.profile`), by the rules of :mod:`~lyra_simpy.policies.llamacpp`
and :mod:`~lyra_simpy.policies.ubatch`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lyra_simpy.errors import LyraError
from lyra_simpy.policies.llamacpp import LlamaCppConfig, prompt_chunk, step_attention_cells
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


def check_slots(grid: ProfileGrid, llama: LlamaCppConfig) -> None:
    need = max([*grid.decode_batch, *(2 * b - 1 for b in grid.fragmented_decode_batch)])
    if need > llama.n_parallel:
        raise LyraError(
            f"grid.decode_batch / fragmented_decode_batch: need {need} slots, the server "
            f"has {llama.n_parallel} (-np): requests pinned to a slot would wait"
        )


def probe_passes(
    llama: LlamaCppConfig, segments: list[tuple[int, int]], outputs: list[bool]
) -> tuple[int, int]:
    """(passes, passes computing logits) of one step of *segments* (slot, tokens)."""
    return pass_counts(segments, outputs, llama.batch_tokens, llama.ubatch_tokens, llama.kv_unified)


def prompt_steps(llama: LlamaCppConfig, prompt: int, decoders: int) -> tuple[int, int, int, int]:
    """(steps, passes, checkpoints, passes computing logits) llama.cpp runs for a prompt
    of *prompt* tokens in slot *decoders*, beside *decoders* sequences decoding in slots
    0..decoders−1 in each step (:mod:`~lyra_simpy.policies.llamacpp`)."""
    stops, nub = llama.checkpoint_stops, llama.ubatch_tokens
    done = steps = n_passes = checkpoints = n_outputs = 0
    while done < prompt:
        take = prompt_chunk(prompt - done, llama.batch_tokens - decoders, stops)
        segments = [(k, 1) for k in range(decoders)] + [(decoders, take)]
        n, out = probe_passes(llama, segments, [True] * decoders + [done + take == prompt])
        n_passes += n
        n_outputs += out
        if stops and done and prompt - done - take < nub:
            checkpoints += 1
        done += take
        steps += 1
    return steps, n_passes, checkpoints, n_outputs


def prompt_attention(llama: LlamaCppConfig, prompt: int, decoders: int, context: int) -> int:
    """The ``attention_cells`` of a probe row: Σ over the prompt's tokens of the KV cells
    each attends over (:func:`~lyra_simpy.policies.llamacpp.step_attention_cells`), for a
    prompt of *prompt* tokens beside *decoders* sequences of *context* tokens that each
    decode a token a step. Idle slots are taken to hold no cells: with ``-kvu`` the
    server's default prompt cache clears them when a probe starts (with ``--cache-ram 0``
    they keep an earlier probe's, which this does not count)."""
    stops = llama.checkpoint_stops
    done = total = step = 0
    while done < prompt:
        take = prompt_chunk(prompt - done, llama.batch_tokens - decoders, stops)
        held = decoders * (context + step) + done
        total += step_attention_cells(llama, decoders, [(done, take)], held)
        done += take
        step += 1
    return total


COUNT_COLUMNS = ("steps", "passes", "checkpoints", "output_passes", "attention_cells")
"""The extra columns :func:`row_counts` gives, in its order (``lyra-simpy profile``
writes them so)."""


def row_counts(
    llama: LlamaCppConfig, phase: str, batch: int, prompt: int, context: int, stride: int = 1
) -> tuple[int, int, int, int, int]:
    """The extra columns of one probe row — (steps, passes, checkpoints, output_passes,
    attention_cells) — as the server runs it: a ``decode`` row's *batch* decoders in
    every *stride*-th slot, one step whose every pass computes logits; a ``prefill`` or
    ``mixed`` row's prompt of *prompt* tokens beside *batch* decoders (mixed) of
    *context* tokens."""
    if phase == "decode":
        segments = [(k * stride, 1) for k in range(batch)]
        n_passes, logits = probe_passes(llama, segments, [True] * batch)
        return 1, n_passes, 0, logits, 0
    decoders = 0 if phase == "prefill" else batch
    cells = prompt_attention(llama, prompt, decoders, context)
    return (*prompt_steps(llama, prompt, decoders), cells)
