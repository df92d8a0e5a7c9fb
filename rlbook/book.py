"""Build the book: execute every notebook with papermill into build/, render HTML, figures land in build/figures/.

    python -m rlbook.book [--profile auto|smoke|standard|paper] [--only 01_grpo_from_scratch]
"""
from __future__ import annotations

import argparse
import html
import time
from pathlib import Path

from .profiles import resolve_profile

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS, BUILD = ROOT / "notebooks", ROOT / "build"


def execute(notebook: Path, out: Path, profile: str) -> None:
    import papermill

    papermill.execute_notebook(str(notebook), str(out), parameters={"PROFILE": profile}, cwd=str(NOTEBOOKS),
                               kernel_name="python3", progress_bar=False)


def render_html(executed: Path, out: Path) -> None:
    import nbformat
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter().from_notebook_node(nbformat.read(executed, as_version=4))
    out.write_text(body)


def write_index(chapters: list[tuple[str, float]], profile: str) -> None:
    items = "".join(f'<li><a href="{html.escape(n)}.html">{html.escape(n)}</a> ({t:.0f} s)</li>' for n, t in chapters)
    (BUILD / "html" / "index.html").write_text(
        f"<html><body><h1>rlbook</h1><p>Executed in the {profile} profile.</p><ol>{items}</ol>"
        f"<p>Figures: build/figures/&lt;chapter&gt;/ (PNG and SVG).</p></body></html>")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="auto")
    parser.add_argument("--only", nargs="*", default=None, help="notebook names (without .ipynb)")
    args = parser.parse_args(argv)
    profile = resolve_profile(args.profile)
    notebooks = sorted(p for p in NOTEBOOKS.glob("*.ipynb") if args.only is None or p.stem in args.only)
    if not notebooks:
        raise SystemExit(f"no notebooks matched {args.only}; available: {[p.stem for p in NOTEBOOKS.glob('*.ipynb')]}")
    (BUILD / "html").mkdir(parents=True, exist_ok=True)
    done = []
    for i, notebook in enumerate(notebooks, 1):
        print(f"[{i}/{len(notebooks)}] {notebook.stem} (profile {profile}) ...", flush=True)
        tic = time.time()
        executed = BUILD / notebook.name
        execute(notebook, executed, profile)
        render_html(executed, BUILD / "html" / f"{notebook.stem}.html")
        done.append((notebook.stem, time.time() - tic))
        print(f"[{i}/{len(notebooks)}] {notebook.stem} done in {done[-1][1]:.0f} s", flush=True)
    write_index(done, profile)
    print(f"book: {BUILD / 'html' / 'index.html'}, figures in {BUILD / 'figures'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
