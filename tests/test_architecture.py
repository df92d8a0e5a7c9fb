"""The package's layers: the core (tasks, models, rollout, objectives, trainer, runs, ops, ...) never imports a
chapter module, the RunStore never reaches the trainer, no module imports itself through others (an import circle,
even through an import inside a function), and every module states its one job in its docstring's first line."""
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "rlbook"
ABOVE_THE_CORE = {"rlbook.book", "rlbook.obtain", "rlbook.cli", "rlbook.__main__"}  # may join core and chapters


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p) for p in PACKAGE.rglob("*.py")}


def imports(path: Path) -> set[str]:
    """Every rlbook module that `path` imports, at the top or inside a function."""
    name, found = module_name(path), set()
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("rlbook")}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            if target.startswith("rlbook"):  # `from . import trainer` names a module; `from .runs import Run` a name
                found |= {f"{target}.{a.name}" if f"{target}.{a.name}" in MODULES else target for a in node.names}
    return {m for m in found if m in MODULES}


GRAPH = {module_name(p): imports(p) for p in PACKAGE.rglob("*.py")}


def reachable(start: str, graph: dict = GRAPH) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_graph_sees_imports():
    assert "rlbook.trainer" in GRAPH["rlbook.obtain"] and "rlbook.runs" in GRAPH["rlbook.trainer"]
    assert "rlbook.chapters.run_groups" in GRAPH["rlbook.chapters.staleness"]


def test_the_core_never_imports_a_chapter():
    core = [m for m in GRAPH if not m.startswith("rlbook.chapters") and m not in ABOVE_THE_CORE]
    assert "rlbook.trainer" in core and "rlbook.runs" in core
    offenders = {m: sorted(c for c in reachable(m) if c.startswith("rlbook.chapters")) for m in core}
    assert not {m: c for m, c in offenders.items() if c}


def circles(graph: dict) -> set[frozenset]:
    """The import circles of a module graph: each set of modules that all reach one another."""
    reach = {m: reachable(m, graph) for m in graph}
    return {frozenset(n for n in reach[m] if m in reach[n]) for m in graph if m in reach[m]}


def test_no_import_circle():
    assert circles(GRAPH) == set()


def test_an_import_circle_is_found():
    graph = {**GRAPH, "rlbook.runs": GRAPH["rlbook.runs"] | {"rlbook.trainer"}}  # trainer imports runs
    found = circles(graph)
    assert len(found) == 1 and {"rlbook.runs", "rlbook.trainer"} <= next(iter(found))


def test_the_run_store_does_not_reach_the_trainer():
    assert "rlbook.trainer" not in reachable("rlbook.runs")


def first_line(path: Path) -> str | None:
    """The first line of a module's docstring when it is a paragraph of its own (None when there is no such line)."""
    doc = ast.get_docstring(ast.parse(path.read_text()), clean=False)
    lines = (doc or "").split("\n")
    return lines[0].strip() if lines[0].strip() and (len(lines) == 1 or not lines[1].strip()) else None


def test_every_module_states_its_one_job_in_its_first_line():
    """A module has one job, said in its docstring's first line: present, not empty, a paragraph of one line."""
    lacking = {str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*.py") if first_line(p) is None}
    assert not lacking, lacking


def test_a_wrapped_or_missing_first_line_is_found(tmp_path):
    cases = {'"""Two lines\nof summary."""\n': None, "x = 1\n": None, '""""""\n': None,
             '"""One job.\n\nMore."""\n': "One job.", '"""One job."""\n': "One job."}
    for number, (text, expected) in enumerate(cases.items()):
        (tmp_path / f"m{number}.py").write_text(text)
        assert first_line(tmp_path / f"m{number}.py") == expected, text


def test_nothing_points_at_files_the_project_does_not_ship():
    root = PACKAGE.parent
    unshipped = ["PAPERS" + ".md", "DESIGN" + ".md", "../" + "shared"]
    files = [root / "README.md", root / "Makefile", *root.glob("book/**/*.*"), *root.glob("notebooks/*.ipynb"),
             *PACKAGE.rglob("*.py"), *root.glob("bench/*.py"), *root.glob("tests/*.py")]
    hits = [f"{p.relative_to(root)}: {name}" for p in files if p.is_file() for name in unshipped
            if name in p.read_text(errors="ignore")]
    assert not hits
