"""Build the book: execute the notebooks, then render them as a static site.

Every notebook runs top to bottom with papermill; a Sphinx site (myst-nb, sphinx-book-theme) renders them that
works opened from disk with no network: build/html/index.html. Figures land in build/figures/<chapter>/.

    python -m rlbook.book [--profile reference|smoke|cpu|auto|standard|paper] [--only 01_grpo_from_scratch]
                          [--render-only]

The default profile, `reference`, replays the stored reference runs (data/runs) and trains no reference run
(chapter 5 trains a tiny demonstration trajectory once, then replays it): the book readers get, on any machine.
Any other profile trains what is not stored (each notebook prints its plan first).

Each chapter notebook becomes its chapter page and, where cells are tagged `companion`, a companion page holding
what the chapter's story leaves out; each chapter page also gets a slide deck (rlbook.deck, build/html/decks/). A
chapter whose notebook is missing or failed is never published: the build stops and names it.

The site's sources are book/ (Sphinx configuration, landing page, lecture plans, references, styles). MathJax 3 and
reveal.js come from the npm registry (`npm pack`, once, kept in build/vendor) and plotly.js from the plotly package;
all are copied into the site.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from .profiles import PROFILES, REFERENCE

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS, BOOK, BUILD = ROOT / "notebooks", ROOT / "book", ROOT / "build"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
MATHJAX = "mathjax@3.2.2"
MATHJAX_FILE = "es5/tex-svg-full.js"  # one file, glyphs as SVG paths (no web fonts to load from disk)


# Seconds: a cell of the smoke or reference profile (CI, `make book`) that runs longer is a hang, not work (CI must not
# stall; the reference profile only replays, and its slowest cell is a demonstration warm start of about a minute). The longest smoke cell took
# 55 s with the 2 cores shared (04_lopti). The limit also bounds a known client stall (jupyter/nbclient issue 312:
# the kernel's reply to a cell that displays ipywidgets sometimes reaches the client only at the timeout): seen once
# in 02_staleness, it cost the full 600 s the limit used to be.
CELL_TIMEOUT = 240
BOUNDED = ("smoke", REFERENCE)  # the profiles whose cells have a time limit


HEADLESS_ENVIRONMENT = {"TQDM_DISABLE": "1", "RLBOOK_HEADLESS": "1"}


def kernel_sockets(folder: Path) -> dict:
    """Where the kernel and papermill talk: Unix sockets in a folder of this execution's own, where there are any.
    Over TCP, two processes that start kernels at once (the tests run on two) can pick the same free port; over Unix
    sockets at the default path (kernel-ipc-<n> in the working directory) they can pick the same file. Either way the
    kernel that loses never answers."""
    if os.name != "posix":
        return {}
    return {"KernelManager": {"transport": "ipc", "ip": str(folder / "kernel")}}


def execute(notebook: Path, out: Path, profile: str) -> float:
    """Run one notebook top to bottom into `out` (papermill, parameter PROFILE); returns the seconds it took.

    The kernel runs without progress bars (TQDM_DISABLE): nobody watches a headless run, the page drops them anyway,
    and each bar is a stream of widget messages to a client that has no use for them. It also builds no ipywidgets
    explorer (HEADLESS, rlbook.chapters.explorer): a page has no kernel to drive one, and a cell that displays
    ipywidgets sometimes gets its reply only at the cell time limit (jupyter/nbclient issue 312), minutes of CI.
    """
    import papermill
    from traitlets.config import Config

    tic = time.time()
    out.parent.mkdir(parents=True, exist_ok=True)
    previous = {key: os.environ.get(key) for key in HEADLESS_ENVIRONMENT}
    os.environ.update(HEADLESS_ENVIRONMENT)  # the kernel inherits this environment
    try:
        with tempfile.TemporaryDirectory(prefix="rlbook-kernel-") as sockets:
            papermill.execute_notebook(str(notebook), str(out), parameters={"PROFILE": profile}, cwd=str(NOTEBOOKS),
                                       kernel_name="python3", progress_bar=False,
                                       execution_timeout=CELL_TIMEOUT if profile in BOUNDED else None,
                                       config=Config(kernel_sockets(Path(sockets))))
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key)
            else:
                os.environ[key] = value
    return time.time() - tic


def for_the_page(notebook: dict) -> dict:
    """An executed notebook as the book shows it: no stderr (progress bars, warnings), no ipywidgets views (a page
    has no kernel: each explorer's in-page replay and static figure stand beside it), papermill's injected cell
    hidden, and a number "mean ± error" in a table never broken across lines."""
    notebook = copy.deepcopy(notebook)
    notebook["metadata"].pop("widgets", None)
    for cell in notebook["cells"]:
        tags = cell.setdefault("metadata", {}).setdefault("tags", [])
        if "injected-parameters" in tags:
            tags.append("remove-cell")
        if cell["cell_type"] != "code":
            continue
        cell["outputs"] = [o for o in cell["outputs"] if not (o["output_type"] == "stream" and o["name"] == "stderr")
                           and WIDGET_VIEW not in o.get("data", {})]
        for output in cell["outputs"]:
            if "text/markdown" in output.get("data", {}):
                text = "".join(output["data"]["text/markdown"])
                output["data"]["text/markdown"] = re.sub(r"(\S) ± (\S)", "\\1\u00a0±\u00a0\\2", text)
    return notebook


COMPANION = "companion"  # a cell tag: the cell stands on its chapter's companion page, not on the chapter page


def title(notebook: dict) -> str:
    """A notebook's title: the text of its first markdown heading of level 1."""
    for cell in notebook["cells"]:
        for line in "".join(cell["source"]).splitlines():
            if cell["cell_type"] == "markdown" and line.startswith("# "):
                return line[2:].strip()
    raise ValueError("the notebook has no title (a markdown line starting '# ')")


def markdown_cell(text: str, cell_id: str) -> dict:
    return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": text}


def pages(notebook: dict, stem: str) -> dict[str, dict]:
    """The book's pages of one executed chapter notebook, {page name: notebook}: the chapter page, under its title a
    line linking its slide deck, its lecture plan and its companion page; and, where cells are tagged COMPANION, the
    companion page <stem>_companion: those cells (the first holds its title) and the hidden cells whose output the
    text quotes (glue), under a line linking back to the chapter."""
    page = for_the_page(notebook)
    tagged = lambda cell: COMPANION in cell["metadata"].get("tags", [])
    hidden = lambda cell: "remove-cell" in cell["metadata"].get("tags", [])
    companion = [cell for cell in page["cells"] if tagged(cell)]
    links = [f'<a href="decks/{stem}.html">slides</a>', f'<a href="teaching.html#lecture-{stem}">lecture plan</a>']
    if companion:
        links.append(f'<a href="{stem}_companion.html">companion page</a> (more runs and figures)')
    chapter = {**page, "cells": [cell for cell in page["cells"] if not tagged(cell)]}
    chapter["cells"].insert(1, markdown_cell(f'<p class="rlbook-teaching">For teaching: {" · ".join(links)}</p>',
                                                 "rlbook-teaching-links"))
    if not companion:
        return {stem: chapter}
    back = markdown_cell(f'<p class="rlbook-teaching">The companion page of <a href="{stem}.html">{title(page)}</a>: '
                         "what the chapter page leaves out of its story.</p>", "rlbook-companion-of")
    rest = [cell for cell in page["cells"] if hidden(cell) and not tagged(cell)]
    return {stem: chapter, f"{stem}_companion": {**page, "cells": [companion[0], back, *companion[1:], *rest]}}


def npm_files(package: str, members: tuple[str, ...]) -> Path:
    """Files of an npm package (`npm pack package@version`, once) under build/vendor/<package>/; returns that folder."""
    folder = BUILD / "vendor" / package
    if not all((folder / member).exists() for member in members):
        folder.mkdir(parents=True, exist_ok=True)
        try:
            name = subprocess.run(["npm", "pack", package, "--silent", "--pack-destination", str(folder)],
                                  check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        except (OSError, subprocess.CalledProcessError) as error:
            raise SystemExit(f"the book takes {package} from the npm registry; `npm pack` failed ({error}): install "
                             f"Node.js and npm, or copy {', '.join(members)} of that package into {folder}") from None
        with tarfile.open(folder / name) as archive:
            for member in members:
                (folder / member).parent.mkdir(parents=True, exist_ok=True)
                (folder / member).write_bytes(archive.extractfile(f"package/{member}").read())
        (folder / name).unlink()
    return folder


def static_assets(static: Path) -> None:
    """MathJax, plotly.js and reveal.js (the decks) into the site's _static/: every script a page loads is on disk."""
    import plotly

    from .deck import REVEAL, REVEAL_FILES

    (static / "mathjax").mkdir(parents=True, exist_ok=True)
    shutil.copy2(npm_files(MATHJAX, (MATHJAX_FILE,)) / MATHJAX_FILE, static / "mathjax" / "tex-svg-full.js")
    shutil.copy2(Path(plotly.__file__).parent / "package_data" / "plotly.min.js", static / "plotly.min.js")
    reveal = npm_files(REVEAL, REVEAL_FILES)
    for member in REVEAL_FILES:
        (static / "reveal" / member).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(reveal / member, static / "reveal" / member)


class NotPublished(RuntimeError):
    """A chapter the book refuses to publish: its executed notebook is missing, or one of its cells failed."""


def failure(path: Path) -> str | None:
    """Why the executed notebook at `path` cannot be a page (missing, or a cell that raised: its error), or None."""
    if not path.exists():
        return f"{path.stem}: not executed (no {path})"
    notebook = json.loads(path.read_text())
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            if output["output_type"] == "error":
                return (f"{path.stem}: cell {cell.get('execution_count')} raised {output['ename']}: "
                        f"{output['evalue']}".strip())
    if notebook["metadata"].get("papermill", {}).get("exception"):
        return f"{path.stem}: its execution stopped with an error (papermill), see {path}"
    return None


def build_site(executed: list[Path], figures: Path, out: Path | None = None) -> Path:
    """Render executed notebooks, book/ and the figures into a static site; returns its index.html. A chapter whose
    executed notebook is missing or holds an error is never published: NotPublished names it, and nothing is
    written."""
    from sphinx.cmd.build import build_main

    from .deck import write_decks

    failures = [reason for reason in map(failure, executed) if reason]
    if failures:
        raise NotPublished("; ".join(failures))
    out = out or BUILD / "html"
    source = out.parent / "site-src"
    shutil.rmtree(source, ignore_errors=True)
    shutil.copytree(BOOK, source)
    static_assets(source / "_static")
    if figures.exists():
        shutil.copytree(figures, source / "figures", ignore=shutil.ignore_patterns("*.svg"))
    shutil.copytree(ROOT / "rlbook", source / "rlbook", ignore=shutil.ignore_patterns("__pycache__"))  # literalinclude
    chapters = {}
    for path in executed:
        for name, page in pages(json.loads(path.read_text()), path.stem).items():
            (source / f"{name}.ipynb").write_text(json.dumps(page, indent=1))
            chapters.setdefault(path.stem, page)  # the chapter page comes first
    shutil.rmtree(out, ignore_errors=True)
    if build_main(["-b", "html", "-q", "-j", "1", str(source), str(out)]) != 0:
        raise RuntimeError(f"sphinx-build failed for {source}")
    write_decks(chapters, (BOOK / "index.md").read_text(), figures, out)
    return out / "index.html"


def main(argv: list[str] | None = None) -> int:
    from papermill.exceptions import PapermillExecutionError

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default=REFERENCE, choices=[REFERENCE, "auto", *PROFILES],
                        help="reference (default): replay the stored reference runs, train nothing; any other profile "
                             "trains what is not stored")
    parser.add_argument("--only", nargs="*", default=None, help="notebook names (without .ipynb)")
    parser.add_argument("--render-only", action="store_true", help="render the notebooks already in build/executed")
    args = parser.parse_args(argv)
    profile = args.profile
    notebooks = sorted(p for p in NOTEBOOKS.glob("*.ipynb") if args.only is None or p.stem in args.only)
    if not notebooks:
        raise SystemExit(f"no notebooks matched {args.only}; available: {[p.stem for p in NOTEBOOKS.glob('*.ipynb')]}")
    executed = [BUILD / "executed" / p.name for p in notebooks]
    for i, (notebook, out) in enumerate(zip(notebooks, executed), 1):
        if args.render_only:
            continue
        print(f"[{i}/{len(notebooks)}] {notebook.stem} (profile {profile}) ...", flush=True)
        try:
            seconds = execute(notebook, out, profile)
        except PapermillExecutionError as error:
            raise SystemExit(f"book not published: chapter {notebook.stem} failed at cell {error.exec_count}: "
                             f"{error.ename}: {error.evalue} (the executed notebook: {out})") from None
        print(f"[{i}/{len(notebooks)}] {notebook.stem} done in {seconds:.0f} s", flush=True)
    tic = time.time()
    try:
        index = build_site(executed, BUILD / "figures")
    except NotPublished as error:
        raise SystemExit(f"book not published: {error}") from None
    print(f"book: {index} (rendered in {time.time() - tic:.0f} s), figures in {BUILD / 'figures'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
