"""Exceptions that reach the user as one line.

A bad scenario must fail before anything is simulated, with one message naming the field
path, the value and what is allowed (DESIGN §6), e.g.
``scheduler.max_num_seqs: got 0, must be > 0``. :func:`from_validation_error` turns a
pydantic ``ValidationError`` into that shape.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (pydantic is imported by what raises one: --help need not load it)
    from pydantic import ValidationError


BOOL_AS_NUMBER = "bool_as_number"
"""Error type of a boolean given for a number (raised by :class:`lyra_simpy.config.Closed`;
:func:`from_validation_error` puts the field into the path)."""


class LyraError(Exception):
    """Base class of every error this package raises on purpose."""


class ScenarioError(LyraError):
    """An invalid scenario: the message is one line, ``field.path: got X, must be Y``."""


class TraceError(LyraError):
    """A trace or profile file that is missing or malformed."""


class SimulationError(LyraError):
    """A modelling invariant broke during a run (a bug in a policy or the engine)."""


#: Names pydantic puts in an error's location for the member of a union it tried.
_UNION_MEMBERS = {"int", "float", "str", "bool", "none", "list", "dict"}


def _loc(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif (
            "[" in item
            or item.startswith(("function-", "constrained-"))
            or item in _UNION_MEMBERS
            or (item[:1].isupper() and item.endswith("Config"))  # a model in a union
        ):
            continue
        else:
            parts.append(("." if parts else "") + item)
    return "".join(parts) or "<root>"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def from_validation_error(exc: ValidationError, prefix: str = "") -> ScenarioError:
    """Condense a pydantic error to its first problem, as one line."""
    err = exc.errors(include_url=False)[0]
    path = _loc(tuple(err["loc"]))
    if prefix:
        path = f"{prefix}.{path}" if path != "<root>" else prefix
    msg = err["msg"]
    kind = err["type"]
    if kind == "extra_forbidden":
        return ScenarioError(f"{path}: unknown field (check the spelling; see `lyra-simpy schema`)")
    if kind == "missing":
        return ScenarioError(f"{path}: required field is missing")
    if kind == "union_tag_invalid":
        ctx = err.get("ctx", {})
        return ScenarioError(
            f"{path}: got {ctx.get('tag')!r}, must be one of {ctx.get('expected_tags')}"
        )
    if kind == BOOL_AS_NUMBER:  # raised by the model, so the field joins the path here
        ctx = err.get("ctx", {})
        field = f"{path}.{ctx['field']}" if path != "<root>" else ctx["field"]
        return ScenarioError(f"{field}: got {ctx['value']}, must be a number, not true/false")
    if kind == "union_tag_not_found":
        return ScenarioError(f"{path}: needs a 'name' field choosing the kind")
    msg = msg.removeprefix("Value error, ")
    for prefix_word in ("Input should be ", "Value should be "):
        if msg.startswith(prefix_word):
            msg = "must be " + msg[len(prefix_word) :]
    if kind == "literal_error" and isinstance(err.get("input"), bool):
        # YAML 1.1, which PyYAML reads, takes an unquoted off/on/yes/no for false/true
        msg += ' (YAML reads an unquoted off, on, yes or no as true/false: quote it, "off")'
    if "input" in err and not isinstance(err["input"], dict):
        return ScenarioError(f"{path}: got {_short(err['input'])}, {msg}")
    return ScenarioError(f"{path}: {msg}")
