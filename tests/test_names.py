"""Every module, attribute, file and command-line flag that the README, the book's pages, the package's docstrings and
comments, and the command line's --help name exists (a renamed module or flag leaves no stale name behind)."""
import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from check_exports import ENGINES_DIR  # noqa: E402

if ENGINES_DIR.is_dir():  # rlbook.engine_plugins.verl_losses, which pages name, imports verl (make setup)
    sys.path.append(str(ENGINES_DIR))
DOTTED = re.compile(r"\brlbook(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
PATH = re.compile(r"(?<![\w./-])((?:rlbook|bench|data|book|tests|notebooks|\.ci)/[\w./*<>-]*[\w*>])")
FILE = re.compile(r"(?<![\w./-])([a-z_][a-z0-9_]*\.py)\b")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]+)")


def texts() -> dict[str, str]:
    """README, book pages, the package's and benches' sources, and the command line's --help."""
    found = {"README.md": (ROOT / "README.md").read_text()}
    found.update({str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT / "book").glob("*.md"))})
    found.update({str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT / "rlbook").rglob("*.py"))})
    for command in (["-m", "rlbook", "--help"], ["-m", "rlbook", "train", "--help"], ["-m", "rlbook", "sweep", "--help"],
                    ["-m", "rlbook", "runs", "--help"], ["-m", "rlbook.book", "--help"]):
        out = subprocess.run([sys.executable, *command], capture_output=True, text=True, cwd=ROOT)
        assert out.returncode == 0, out.stderr
        found[" ".join(command)] = out.stdout
    return found


def resolves(dotted: str) -> bool:
    """rlbook.a.b.C: the longest importable module prefix, then attributes."""
    parts = dotted.rstrip(".").split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(value, name):
                return False
            value = getattr(value, name)
        return True
    return False


def path_exists(text: str) -> bool:
    text = re.sub(r"<[^>]*>", "*", text)
    return bool(list(ROOT.glob(text))) or (ROOT / text).exists()


def known_files() -> set[str]:
    return {p.name for p in ROOT.rglob("*.py") if ".venv" not in p.parts and "build" not in p.parts}


def known_flags() -> set[str]:
    """Flags some parser of the project defines: argparse add_argument strings and RunConfig fields (rlbook.cli)."""
    from dataclasses import fields

    from rlbook.config import RunConfig

    flags = {f"--{f.name.replace('_', '-')}" for f in fields(RunConfig)}
    for path in [*ROOT.glob("rlbook/**/*.py"), *ROOT.glob("bench/*.py"), *ROOT.glob("tests/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("--"):
                flags.add(node.value)
    return flags | {"--help", "--profile", "--only", "--render-only"} | FOREIGN_FLAGS


FOREIGN_FLAGS = {"--logdir", "--no-index", "--find-links"}  # other programs' flags shown in their command lines (tensorboard, pip)
TEXTS = texts()


@pytest.mark.parametrize("source", sorted(TEXTS))
def test_named_modules_and_attributes_exist(source):
    stale = sorted({name for name in DOTTED.findall(TEXTS[source]) if not resolves(name)})
    assert not stale, f"{source} names what does not exist: {stale}"


@pytest.mark.parametrize("source", sorted(TEXTS))
def test_named_files_exist(source):
    text = TEXTS[source]
    missing = sorted({p for p in PATH.findall(text) if not path_exists(p)})
    files = known_files()
    missing += sorted({f for f in FILE.findall(text) if f not in files and f != "setup.py"})
    assert not missing, f"{source} names files that do not exist: {missing}"


@pytest.mark.parametrize("source", [s for s in sorted(TEXTS) if s == "README.md" or s.startswith(("book/", "-m"))])
def test_named_flags_exist(source):
    flags = known_flags()
    unknown = sorted({f for f in FLAG.findall(TEXTS[source]) if f not in flags})
    assert not unknown, f"{source} names flags no parser defines: {unknown}"
