"""Engine presets: a real engine's launch flags → the simulator's knobs.

A scenario may carry ``engine: {name: sglang|vllm|llamacpp, flags: {...}}`` and/or
``command: "python -m sglang.launch_server --max-running-requests 64 ..."`` (parsed
with :mod:`shlex`; ``\\``-continued lines are fine). Flags are spelt as on the command
line or with underscores (``--chunked-prefill-size``, ``chunked-prefill-size`` and
``chunked_prefill_size`` are the same flag; a key without a value, ``{enable-mixed-chunk:
}``, is a bare switch: true). ``flags`` are edits on top of the pasted
``command``: a flag in both takes its ``flags`` value, which is what ``--set
engine.flags.X=…`` and variants rely on.

:func:`apply_engine` is one pure step run before validation (raw mapping → raw mapping):
each engine's function in ``ENGINES`` (:mod:`.sglang`, :mod:`.vllm`, :mod:`.llamacpp`)
turns the flags into scenario knobs (``scheduler``, ``kv_cache``, ``prefix_cache``,
``cost.padding``, ``cost.kv_dtype``, ``cost.tp``, ``cost.weight_dtype``), using the
engine's own default for every flag left out. So the resolved scenario, and the
manifest, show both the ``engine`` block as given and every knob it produced.

Precedence (a modelling-free rule, stated once):

* a knob the scenario sets itself wins over one that comes from an engine *default*
  (a flag left out): ``engine: vllm`` with ``kv_cache: {num_blocks: 4000}`` keeps the
  4000 blocks;
* a knob the scenario sets to a different value than a flag *given* in the engine block
  is an error (one line naming both), as is a ``scheduler.name`` other than the one the
  engine runs: there is no silent winner between two things the user wrote;
* sweeps over a preset scenario vary ``engine.flags.X`` (variants re-run the step).

Only the scenario's own replica is set; ``cluster.groups`` entries are left as written.
Flags that do not change what is simulated (``host``, ``port``, ``model_path``, ...)
are accepted and ignored (each engine's ``NO_EFFECT``); any other unknown flag is an
error listing the known ones. Speculative decoding flags are known but not modelled
yet (issue 4): they fail with one line instead of being ignored.
"""

from __future__ import annotations

import copy
import shlex
from collections.abc import Callable
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, Field, ValidationError

from lyra_simpy.dotted import MISSING, get_path, set_path
from lyra_simpy.errors import ScenarioError, from_validation_error
from lyra_simpy.presets import llamacpp, sglang, vllm
from lyra_simpy.presets.common import Knob, Knobs
from lyra_simpy.presets.llamacpp import LlamaCppEngine
from lyra_simpy.presets.sglang import SGLangEngine
from lyra_simpy.presets.vllm import VLLMEngine

EngineConfig = Annotated[SGLangEngine | VLLMEngine | LlamaCppEngine, Field(discriminator="name")]

_Spec = tuple[
    type[BaseModel], Callable[[Any, dict[str, Any]], Knobs], frozenset[str], dict[str, str]
]

ENGINES: dict[str, _Spec] = {
    "sglang": (sglang.SGLangFlags, sglang.knobs, sglang.NO_EFFECT, sglang.ALIASES),
    "vllm": (vllm.VLLMFlags, vllm.knobs, vllm.NO_EFFECT, vllm.ALIASES),
    "llamacpp": (llamacpp.LlamaCppFlags, llamacpp.knobs, llamacpp.NO_EFFECT, llamacpp.ALIASES),
}
"""Engine name → (flag model, flags → knobs function, ignored flags, flag aliases)."""

_BLOCK_KEYS = ("name", "flags", "command")


def flag_key(text: str) -> str:
    """``--chunked-prefill-size`` / ``chunked-prefill-size`` → ``chunked_prefill_size``."""
    return text.lstrip("-").replace("-", "_")


def parse_command(command: str) -> dict[str, Any]:
    """The ``--flag value`` pairs of a launch command line (values read as YAML).

    Words before the first flag (``python -m sglang.launch_server``, ``vllm serve
    MODEL``, ``VAR=1``) are skipped; short flags such as ``-tp 2`` count. A flag without
    a value is ``true``; a ``--no-X`` flag without a value is ``X: false`` (argparse
    ``BooleanOptionalAction``); a flag followed by several values (``--cuda-graph-bs 1
    2 4``) is a list.
    """
    try:
        words = shlex.split(command.replace("\\\n", " "), comments=True)
    except ValueError as exc:
        raise ScenarioError(f"engine.command: cannot be parsed as a shell line ({exc})") from None
    out: dict[str, Any] = {}
    key: str | None = None
    values: list[Any] = []

    def close() -> None:
        if key is None:
            return
        if not values and key.startswith("no_"):
            _put(out, key[3:], False, "engine.command")
        else:
            value = True if not values else values[0] if len(values) == 1 else list(values)
            _put(out, key, value, "engine.command")

    skip = False
    for word in words:
        if skip or (key is None and word == "-m"):  # python -m MODULE: the program
            skip = not skip
            continue
        if _is_flag(word):
            close()
            name, eq, value = word.partition("=")
            key, values = flag_key(name), []
            if eq:
                values.append(_scalar(value))
        elif key is not None:
            values.append(_scalar(word))
    close()
    return out


def _is_flag(word: str) -> bool:
    """``--flag``, ``--flag=value`` or a short ``-tp`` (``-1`` is a value)."""
    if word.startswith("--"):
        return True
    return len(word) > 1 and word[0] == "-" and not isinstance(_scalar(word), (int, float))


def _scalar(text: str) -> Any:
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return value if isinstance(value, (bool, int, float, str)) else text


def _put(out: dict[str, Any], key: str, value: Any, where: str) -> None:
    if key in out and out[key] != value:
        raise ScenarioError(f"{where}: flag {key} given twice ({out[key]!r} and {value!r})")
    out[key] = value


def _flags_of(block: dict[str, Any], aliases: dict[str, str]) -> dict[str, Any]:
    flags: dict[str, Any] = {}
    command = block.get("command")
    if command is not None:
        if not isinstance(command, str):
            raise ScenarioError(f"engine.command: got {command!r}, must be a launch command line")
        for key, value in parse_command(command).items():
            _put(flags, aliases.get(key, key), value, "engine.command")
    given = block.get("flags") or {}
    if not isinstance(given, dict):
        raise ScenarioError(f"engine.flags: got {given!r}, must be a mapping of flag: value")
    mine: dict[str, str] = {}
    for raw_key, value in given.items():
        key = flag_key(str(raw_key))
        key = aliases.get(key, key)
        if key in mine:
            raise ScenarioError(f"engine.flags.{key}: given twice (as {mine[key]} and {raw_key})")
        mine[key] = raw_key
        # flags are edits on top of the pasted command; a bare key is a bare switch
        flags[key] = True if value is None else value
    return flags


def _merge(raw: dict[str, Any], knobs: Knobs, engine: str) -> None:
    """Write *knobs* into *raw* under the precedence rule of the module docstring."""
    for path, knob in knobs.items():
        mine = get_path(raw, path, MISSING)
        if mine is MISSING:
            set_path(raw, path, copy.deepcopy(knob.value), where=engine)
            continue
        if path == "scheduler.name" and mine != knob.value:
            why = f" with {knob.flag}: {knob.flag_value!r}" if knob.flag else ""
            raise ScenarioError(
                f"scheduler.name: got {mine!r}, engine {engine}{why} runs {knob.value!r}; "
                "remove scheduler.name (or change the engine flags)"
            )
        if knob.flag is not None and mine != knob.value:
            raise ScenarioError(
                f"{path}: got {mine!r}, but engine.flags.{knob.flag}: {knob.flag_value!r} "
                f"sets it to {knob.value!r}; remove one of them"
            )


def apply_engine(raw: dict[str, Any]) -> dict[str, Any]:
    """*raw* with the knobs of its ``engine`` block filled in (a copy; *raw* without one
    is returned as it is). The ``engine`` block is rewritten to its normalised flags."""
    block = raw.get("engine")
    if block is None:
        return raw
    if not isinstance(block, dict):
        raise ScenarioError(f"engine: got {block!r}, must be a mapping with name and flags")
    name = block.get("name")
    if name not in ENGINES:
        raise ScenarioError(f"engine.name: got {name!r}, must be one of {sorted(ENGINES)}")
    extra = sorted(set(block) - set(_BLOCK_KEYS))
    if extra:
        raise ScenarioError(f"engine.{extra[0]}: unknown field, must be one of {_BLOCK_KEYS}")
    model, derive, no_effect, aliases = ENGINES[name]
    flags = _flags_of(block, aliases)
    known = set(model.model_fields)
    for key in flags:
        if key not in known and key not in no_effect:
            raise ScenarioError(
                f"engine.flags.{key}: unknown {name} flag; known: {', '.join(sorted(known))} "
                f"(ignored, no effect on the simulation: {', '.join(sorted(no_effect))})"
            )
    typed = {k: v for k, v in flags.items() if k in known}
    try:
        parsed = model.model_validate(typed)
    except ValidationError as exc:
        raise from_validation_error(exc, "engine.flags") from None
    out = copy.deepcopy(raw)
    _merge(out, derive(parsed, out), name)
    out["engine"] = {"name": name, "flags": flags}
    if block.get("command") is not None:
        out["engine"]["command"] = block["command"]
    return out


__all__ = ["ENGINES", "EngineConfig", "Knob", "apply_engine", "flag_key", "parse_command"]
