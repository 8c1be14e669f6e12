"""What the engine presets share: the knob record, the engine block, catalog look-ups."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from lyra_simpy.config import Closed
from lyra_simpy.cost.catalog import hardware_catalog
from lyra_simpy.errors import ScenarioError


@dataclass(frozen=True)
class Knob:
    """One scenario value a preset sets: *value*, and the flag it came from (None when
    it is the engine's default for a flag left out)."""

    value: Any
    flag: str | None = None
    flag_value: Any = None


Knobs = dict[str, Knob]
"""Dotted scenario path (``scheduler.max_num_seqs``) → knob."""


class EngineBlock(Closed):
    """Base of the ``engine`` blocks as the resolved scenario keeps them: ``name``, the
    normalised ``flags`` (underscores; what ``command`` held merged in) and the
    ``command`` line as given."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Flags(Closed):
    """Base of the flag models: every flag optional (None: the engine's default)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def knob(flags: BaseModel, name: str, value: Any) -> Knob:
    """A knob from flag *name* of *flags* (given: tied to it; left out: a default)."""
    given = getattr(flags, name)
    return Knob(value, name, given) if given is not None else Knob(value)


def cost_of(raw: dict[str, Any]) -> dict[str, Any]:
    cost = raw.get("cost")
    return cost if isinstance(cost, dict) else {}


def gpu_memory_gib(raw: dict[str, Any]) -> float | None:
    """Device memory of the roofline cost's hardware (None for other cost models:
    the engine's defaults for an unknown device are used then)."""
    cost = cost_of(raw)
    hw = hardware_catalog().get(str(cost.get("hardware")))
    return None if cost.get("name") != "roofline" or hw is None else float(hw.memory_gib)


def roofline_only(
    raw: dict[str, Any], flag: str, value: Any, knobs: Knobs, path: str, to: Any
) -> None:
    """Set roofline ``cost.<path>`` from *flag*; with another cost model a value other
    than the neutral one is an error (the knob exists only in the roofline)."""
    cost = cost_of(raw)
    if cost.get("name") == "roofline":
        knobs[f"cost.{path}"] = Knob(to, flag, value) if value is not None else Knob(to)
    elif value is not None and to != _NEUTRAL[path]:
        raise ScenarioError(
            f"engine.flags.{flag}: got {value!r}, which only the roofline cost model can "
            f"simulate (cost.{path}); cost.name is {cost.get('name')!r}: remove the flag or "
            "use cost.name: roofline"
        )


_NEUTRAL = {"kv_dtype": "bf16", "weight_dtype": "bf16", "tp": 1}


def fp8_or_bf16(flag: str, value: str | None, fp8: tuple[str, ...], bf16: tuple[str, ...]) -> str:
    """The roofline dtype of a dtype flag (``fp8_e4m3`` → fp8, ``auto`` → bf16)."""
    if value is None or value in bf16:
        return "bf16"
    if value in fp8:
        return "fp8"
    raise ScenarioError(
        f"engine.flags.{flag}: got {value!r}, must be one of {list(bf16 + fp8)} "
        "(other formats are not in the cost model)"
    )


def memory_knobs(
    raw: dict[str, Any],
    flag: str,
    fraction: float | None,
    default: float,
    reserve_gib: float | None,
    pool: Knob | None = None,
) -> Knobs:
    """``kv_cache.num_blocks: auto`` with the engine's memory fraction, unless the
    scenario gives a number of blocks itself (then the fraction is not used, and giving
    the flag as well is an error), or a flag caps the pool (*pool*: its blocks)."""
    if pool is not None:
        return {"kv_cache.num_blocks": pool}
    kv = raw.get("kv_cache")
    blocks = kv.get("num_blocks", "auto") if isinstance(kv, dict) else "auto"
    if blocks != "auto":
        if fraction is not None:
            raise ScenarioError(
                f"kv_cache.num_blocks: got {blocks!r}, but engine.flags.{flag}: {fraction!r} "
                "sizes the KV pool from memory (num_blocks: auto); remove one of them"
            )
        return {}
    cost = cost_of(raw).get("name")
    if cost != "roofline":
        if fraction is not None:
            raise ScenarioError(
                f"engine.flags.{flag}: got {fraction!r}, sizes the KV pool from device memory, "
                f"which only the roofline cost model knows (cost.name is {cost!r}); remove the "
                "flag and give kv_cache.num_blocks (the engine logs it at start-up)"
            )
        raise ScenarioError(
            f"kv_cache.num_blocks: required with engine and cost {cost!r} (the engine sizes "
            "the KV pool from device memory, which only cost.name: roofline knows); give the "
            "number of blocks the engine logs at start-up"
        )
    out = {
        "kv_cache.num_blocks": Knob("auto"),
        "kv_cache.mem_fraction": Knob(fraction, flag, fraction)
        if fraction is not None
        else Knob(default),
    }
    if reserve_gib is not None:
        out["kv_cache.activation_reserve_gib"] = Knob(reserve_gib)
    return out


def speculative_knobs(raw: dict[str, Any], flag: str, algorithm: str, steps: Knob) -> Knobs:
    """The ``speculative`` block's algorithm and draft length from an engine's flags.
    Acceptance is not a launch flag but a property of model and traffic: the scenario's
    own ``speculative`` block must give it (else one line naming *flag*)."""
    block = raw.get("speculative")
    if not isinstance(block, dict) or not (
        "mean_accepted_tokens" in block or "acceptance_rates" in block
    ):
        raise ScenarioError(
            f"engine.flags.{flag}: got {algorithm!r}; acceptance is not a launch flag: "
            "set speculative.mean_accepted_tokens (or speculative.acceptance_rates) in the "
            "scenario"
        )
    return {
        "speculative.algorithm": Knob(algorithm, flag, algorithm),
        "speculative.num_steps": steps,
    }
