"""Dotted paths into nested mappings (``scheduler.max_num_seqs``): the one reader and
writer that ``--set``, variants, the engine presets, tables and figures share."""

from __future__ import annotations

from typing import Any

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
