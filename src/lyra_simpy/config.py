"""The base of every scenario config model: closed, frozen, finite, no booleans as numbers.

Pydantic's lax mode, left to itself, takes ``max_num_seqs: true`` as 1 and
``rate_per_s: .inf`` (or ``--set path=1e400``) as infinity; both pass validation and
then give a wrong answer, a hang or a traceback deep in the run (issue 13). Every config
model derives from :class:`Closed`, so the rule is stated once rather than field by field:

* ``extra="forbid"``: an unknown (misspelt) field is an error;
* ``frozen=True``: a validated scenario cannot change under the engine;
* ``allow_inf_nan=False``: every float (and every number given for an int) is finite;
* a boolean is refused wherever the field does not itself take booleans — YAML's
  ``true`` is never a count or a rate.

Every model's validator is built when first used (``defer_build``), not when its class
is made: a scenario is validated by the root :class:`~lyra_simpy.scenario.Scenario`,
whose one validator holds every part, so building one per part model as well (about 80
of them, most never used alone) cost every command that loads the schema ~0.03 s.

A subclass's own ``model_config`` is merged with this one (pydantic merges configs
along the class hierarchy), so the models keep their explicit
``ConfigDict(extra="forbid", frozen=True)`` and inherit ``allow_inf_nan=False`` and
``defer_build``.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic_core import PydanticCustomError

from lyra_simpy.errors import BOOL_AS_NUMBER


def _admits_bool(tp: Any) -> bool:
    """Whether a value of annotation *tp* may be a boolean."""
    if tp is bool or tp is Any or tp is object:
        return True
    origin = get_origin(tp)
    if origin is Literal:
        return any(isinstance(arg, bool) for arg in get_args(tp))
    if origin is Annotated:
        return _admits_bool(get_args(tp)[0])
    if origin is Union or origin is types.UnionType:
        return any(_admits_bool(arg) for arg in get_args(tp))
    return False


def _takes_words(tp: Any) -> bool:
    """Whether a field of annotation *tp* takes only words (a ``Literal`` of strings,
    maybe beside None): a boolean there is left to pydantic's own error, which names the
    words (a boolean is most likely YAML's reading of an unquoted ``off`` or ``on``)."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _takes_words(get_args(tp)[0])
    if origin is Union or origin is types.UnionType:
        args = [arg for arg in get_args(tp) if arg is not type(None)]
        return len(args) == 1 and _takes_words(args[0])
    return origin is Literal and all(isinstance(arg, str) for arg in get_args(tp))


def _item_types(tp: Any) -> list[Any] | None:
    """The item annotations *tp* allows in a list/tuple/set value, or in a mapping's
    values (None: *tp* says nothing about items, e.g. ``Any``)."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _item_types(get_args(tp)[0])
    if origin is Union or origin is types.UnionType:
        found = [t for arg in get_args(tp) for t in (_item_types(arg) or [])]
        return found or None
    if origin in (list, tuple, set, frozenset):
        return [arg for arg in get_args(tp) if arg is not Ellipsis] or None
    if origin in (dict, Mapping) and len(get_args(tp)) == 2:
        return [get_args(tp)[1]]
    return None


def _misplaced_bool(tp: Any, value: Any) -> str | None:
    """Where in *value* a boolean stands that *tp* does not take ('' for *value*
    itself, ``[i]`` / ``[key]`` for an item), or None."""
    if isinstance(value, bool):
        return None if _admits_bool(tp) or _takes_words(tp) else ""
    if isinstance(value, (list, tuple, dict)):
        items = _item_types(tp)
        if items is None or any(_admits_bool(t) for t in items):
            return None
        pairs = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in pairs:
            if isinstance(item, bool):
                return f"[{key!r}]" if isinstance(value, dict) else f"[{key}]"
    return None


class Closed(BaseModel):
    """Base of the scenario's config models (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_as_number(cls, data: Any) -> Any:
        # A model validator, not a field one: pydantic forbids "before" validators on
        # the discriminator field ``name`` that a ``field_validator("*")`` would reach.
        if not isinstance(data, dict):
            return data
        for name, value in data.items():
            field = cls.model_fields.get(name) if isinstance(name, str) else None
            where = None if field is None else _misplaced_bool(field.annotation, value)
            if where is not None:
                raise PydanticCustomError(
                    BOOL_AS_NUMBER,
                    "{field}: got {value}, must be a number, not true/false",
                    {"field": f"{name}{where}", "value": repr(value)},
                )
        return data


__all__ = ["BOOL_AS_NUMBER", "Closed"]
