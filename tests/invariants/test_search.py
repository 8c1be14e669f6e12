"""``tox -e invariants`` (search.py): it counts what ran and reports every violation
instead of stopping at the first."""

from __future__ import annotations

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("search", Path(__file__).with_name("search.py"))
assert spec is not None
assert spec.loader is not None
search = importlib.util.module_from_spec(spec)
spec.loader.exec_module(search)


def test_search_counts_runs_and_violations(monkeypatch, capsys):
    assert search.main(["--examples", "3"]) == 0
    assert capsys.readouterr().out.startswith("invariants: 3 random scenarios ran, 0 violated")

    def broken(raw):
        assert raw["seed"] < 0, "always fails"

    monkeypatch.setattr(search.inv, "check_full_run", broken)
    monkeypatch.setattr(search.inv, "check_until_run", broken)
    assert search.main(["--examples", "4"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("invariants: 4 random scenarios ran, 4 violated")
    assert "VIOLATED" in out
