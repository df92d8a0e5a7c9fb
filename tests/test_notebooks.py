"""Every chapter notebook: committed without outputs, with a parameters cell, no algorithm of its own, and it executes
top to bottom in the smoke profile (fresh RunStore, as in CI)."""
import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def code_cells(path):
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def test_there_are_notebooks():
    assert any(p.stem.startswith("01_") for p in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_structure(path):
    notebook = json.loads(path.read_text())
    assert notebook["metadata"]["kernelspec"]["name"] == "python3"
    cells = code_cells(path)
    assert all(not c["outputs"] and c["execution_count"] is None for c in cells), "commit notebooks without outputs"
    parameters = [c for c in cells if "parameters" in c["metadata"].get("tags", [])]
    assert len(parameters) == 1 and "PROFILE" in "".join(parameters[0]["source"])
    assert 'PROFILE = "reference"' in "".join(parameters[0]["source"]), "a notebook replays by default, never trains"
    for cell in cells:  # notebooks call rlbook; algorithms live in the package
        source = "".join(cell["source"])
        assert not re.search(r"^\s*(def|class) ", source, re.M), f"a notebook defines code:\n{source[:200]}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes_in_smoke_profile(path, smoke_book):
    executed = json.loads(smoke_book.execute(path).read_text())
    errors = [o for c in executed["cells"] if c["cell_type"] == "code" for o in c["outputs"] if o["output_type"] == "error"]
    assert not errors
    assert list(smoke_book.figures.glob("*/*.png")), "a chapter draws and saves at least one figure"
