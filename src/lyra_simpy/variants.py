"""Labelled changes of a scenario: a :class:`Variant` (dotted path → value) and a
:class:`Grid` of one path over values (crossed with series), each expanding into one
resolved scenario (:meth:`lyra_simpy.scenario.Scenario.expand`).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field

from lyra_simpy.config import Closed


class Variant(Closed):
    """A labelled change of the base scenario: dotted path → value."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str
    set: dict[str, Any] = Field(default_factory=dict)


class Grid(Closed):
    """One variant per value of *path*, labelled ``<label_prefix><value>``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    values: Annotated[list[Any], Field(min_length=1)]
    label_prefix: str = ""
    also_set: list[str] = Field(default_factory=list)
    """Other paths set to the same value (e.g. a padding width following the batch)."""
    series: list[Variant] = Field(default_factory=list)
    """Crossed with the values: one variant per (value, series), labelled
    ``<series label>_<label_prefix><value>`` (e.g. admission off and on at every rate)."""

    def variants(self) -> list[Variant]:
        """One variant per value (per value and series when there are series)."""
        out = []
        for value in self.values:
            sets = {self.path: value, **dict.fromkeys(self.also_set, value)}
            label = f"{self.label_prefix}{value}"
            if not self.series:
                out.append(Variant(label=label, set=sets))
            for s in self.series:
                out.append(Variant(label=f"{s.label}_{label}", set={**s.set, **sets}))
        return out
