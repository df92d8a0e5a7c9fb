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


# A number in a chapter's prose is a setting (a literal of the notebook's code or of the package: 0.2 for the clip,
# tau = 0.04, a ratio in a by-hand example), a paper's published number on a line that cites it, or a result glued
# from a cell (myst-nb `{glue}`, which is not prose). A decimal or a percentage that is none of these was typed by
# hand from a run, and goes stale when the runs are retrained.
PROSE_NUMBER = re.compile(r"(?<![\w.\\{^_])(\d+\.\d+(?:e-?\d+)?|\d+(?:\.\d+)?(?=\s?%))(?![\w.])")
CITES_A_PAPER = re.compile(r"arXiv|[Pp]aper|Qwen|Llama|published|reports|\| signature \|")


def literals(source: str) -> set[float]:
    import ast

    values = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            values.add(round(float(node.value), 10))
    return values


def package_literals() -> set[float]:
    root = Path(__file__).resolve().parent.parent / "rlbook"
    return set().union(*(literals(p.read_text()) for p in root.rglob("*.py")))


def prose(markdown: str) -> str:
    """A markdown cell without math, code and directives (their numbers are formulas, code and settings)."""
    for pattern in (r"```.*?```", r"\$\$.*?\$\$", r"\$[^$\n]*\$", r"`[^`\n]*`", r"\{glue[^}]*\}`[^`]*`"):
        markdown = re.sub(pattern, "", markdown, flags=re.S)
    return markdown


def sentences(markdown: str) -> list[str]:
    """A markdown cell's sentences; a markdown table whose header names the paper counts as one citing sentence."""
    out, table = [], []
    for block in re.split(r"\n\s*\n", markdown):
        lines = block.splitlines()
        rows = [line for line in lines if line.lstrip().startswith("|")]
        if rows and CITES_A_PAPER.search(rows[0]):
            out.append(" ".join(rows) + " (paper)")
        text = " ".join(line for line in lines if line not in rows or not CITES_A_PAPER.search(rows[0]))
        out += re.split(r"(?<=[.!?])\s+(?=[A-Z*(])", text)
    return out


def hand_typed_numbers(path: Path, settings: set[float]) -> list[str]:
    notebook = json.loads(path.read_text())
    code = "\n".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code")
    known = settings | literals(code)
    found = []
    for cell in notebook["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        for sentence in sentences(prose("".join(cell["source"]))):
            if CITES_A_PAPER.search(sentence):
                continue
            for number in PROSE_NUMBER.findall(sentence):
                value = float(number)
                if not {round(value, 10), round(value / 100, 10)} & known:
                    found.append(f"{number} in: {sentence.strip()[:100]}")
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_prose_holds_no_hand_typed_result(path):
    assert not hand_typed_numbers(path, package_literals()), hand_typed_numbers(path, package_literals())


def test_the_prose_check_catches_a_typed_result(tmp_path):
    notebook = {"cells": [{"cell_type": "code", "source": ["tau = 0.04\n"]},
                          {"cell_type": "markdown", "source": ["With tau = 0.04 M2PO scored 0.613 over five seeds.\n",
                                                               "The paper (arXiv 2510.01161) reports 36.6.\n"]}]}
    path = tmp_path / "x.ipynb"
    path.write_text(json.dumps(notebook))
    assert [hit.split()[0] for hit in hand_typed_numbers(path, set())] == ["0.613"]


def test_kernels_started_at_once_each_answer_their_own_client(tmp_path):
    """Four notebooks executed at once by four processes (CI runs the tests on two): each kernel talks to its own
    client (rlbook.book.kernel_sockets). Sockets at a shared default path, or racing for TCP ports, left a kernel that
    never answered, or answered another client with the wrong key."""
    import subprocess
    import sys

    import nbformat

    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("PROFILE = 'smoke'\nprint(PROFILE * 2)")])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, tmp_path / "tiny.ipynb")
    script = "import sys; from pathlib import Path; from rlbook.book import execute; " \
             "execute(Path(sys.argv[1]), Path(sys.argv[2]), 'smoke')"
    processes = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "tiny.ipynb"),
                                   str(tmp_path / f"out{i}.ipynb")], stderr=subprocess.PIPE, text=True)
                 for i in range(4)]
    for process in processes:
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr[-2000:]
    for i in range(4):
        outputs = nbformat.read(tmp_path / f"out{i}.ipynb", as_version=4).cells[-1].outputs
        assert outputs[0]["text"] == "smokesmoke\n"
