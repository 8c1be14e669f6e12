"""Notebooks are stored without outputs (STYLE §14): what they show comes from running them."""

import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).parents[2] / "notebooks").glob("*.ipynb"))


def test_the_notebooks_are_there():
    names = {p.name for p in NOTEBOOKS}
    assert {
        "01_quickstart.ipynb", "02_batching_and_goodput.ipynb", "03_calibration.ipynb",
        "04_capacity_planning.ipynb",
    } <= names  # fmt: skip


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_has_no_outputs(path):
    cells = json.loads(path.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert code, "a notebook without code cells shows nothing"
    for cell in code:
        assert cell["outputs"] == [], f"{path.name}: a cell has stored output"
        assert cell["execution_count"] is None, f"{path.name}: a cell has an execution count"
