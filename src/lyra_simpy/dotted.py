"""Dotted paths into nested mappings (``scheduler.max_num_seqs``): the one reader and
writer that ``--set``, variants, the engine presets, tables and figures share; a
``--set path=value`` override parsed, and one mapping merged into another (``quick:``,
sweeps)."""

from __future__ import annotations

import copy
import re
from typing import Any

import yaml

from lyra_simpy.errors import ScenarioError

MISSING: Any = object()
"""What :func:`get_path` returns for an absent path when asked to tell it from None."""


def get_path(data: Any, path: str, default: Any = None) -> Any:
    """The value at dotted *path* in nested mappings (*default* when absent)."""
    node = data
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node


def set_path(raw: dict[str, Any], path: str, value: Any, where: str = "--set") -> None:
    """Set the dotted *path* of *raw* to *value*, creating mappings on the way; a path
    through a value that is not a mapping is refused in one line naming *where*."""
    keys = path.split(".")
    if not all(keys):
        raise ScenarioError(
            f"{where}: got {path!r}, must be a dotted path like scheduler.max_num_seqs"
        )
    node = raw
    for key in keys[:-1]:
        nxt = node.setdefault(key, {})
        if not isinstance(nxt, dict):
            raise ScenarioError(f"{where}: {path}: {key!r} is {nxt!r}, not a mapping")
        node = nxt
    node[keys[-1]] = value


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """*base* with *extra* merged in (mappings merge, everything else replaces)."""
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


_EXPONENT_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+$")


def parse_override(text: str) -> tuple[str, Any]:
    """``path=value`` with *value* read as YAML (``64`` → int, ``[1, 2]`` → list)."""
    path, sep, value = text.partition("=")
    if not sep or not path.strip():
        raise ScenarioError(f"--set: got {text!r}, must be path=value")
    try:
        parsed = yaml.safe_load(value)
        if isinstance(parsed, str) and _EXPONENT_NUMBER.match(parsed):
            parsed = float(parsed)  # YAML 1.1 reads 2.5e2 (no dot) as a string
        return path.strip(), parsed
    except yaml.YAMLError as exc:
        raise ScenarioError(f"--set {path.strip()}: value {value!r} is not valid YAML") from exc
