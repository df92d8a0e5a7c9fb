"""Build the book: execute the notebooks, then render them as a static site.

Every notebook runs top to bottom with papermill; a Sphinx site (myst-nb, sphinx-book-theme) renders them that
works opened from disk with no network: build/html/index.html. Figures land in build/figures/<chapter>/.

    python -m rlbook.book [--profile reference|smoke|cpu|auto|standard|paper] [--only 01_grpo_from_scratch]
                          [--render-only]

The default profile, `reference`, replays the stored reference runs (data/runs) and trains no reference run
(chapter 5 trains a tiny demonstration trajectory once, then replays it): the book readers get, on any machine.
Any other profile trains what is not stored (each notebook prints its plan first).

The site's sources are book/ (Sphinx configuration, landing page, references, styles, the explorers' script). MathJax
3 comes from the npm registry (`npm pack`, once, kept in build/vendor) and plotly.js from the plotly package; both
are copied into the site.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
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
MATHJAX = "mathjax@3.2.2"  # es5/tex-svg-full.js: one file, glyphs as SVG paths (no web fonts to load from disk)


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
    hidden."""
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
    return notebook


def mathjax() -> Path:
    """MathJax's single-file TeX-to-SVG bundle, fetched once from the npm registry into build/vendor."""
    target = BUILD / "vendor" / MATHJAX / "tex-svg-full.js"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            name = subprocess.run(["npm", "pack", MATHJAX, "--silent", "--pack-destination", str(target.parent)],
                                  check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        except (OSError, subprocess.CalledProcessError) as error:
            raise SystemExit(f"the book typesets math with {MATHJAX} from the npm registry; `npm pack` failed "
                             f"({error}): install Node.js and npm, or copy tex-svg-full.js to {target}") from None
        with tarfile.open(target.parent / name) as archive:
            target.write_bytes(archive.extractfile("package/es5/tex-svg-full.js").read())
        (target.parent / name).unlink()
    return target


def static_assets(static: Path) -> None:
    """MathJax and plotly.js into the site's _static/: every script a page loads is on disk."""
    import plotly

    (static / "mathjax").mkdir(parents=True, exist_ok=True)
    shutil.copy2(mathjax(), static / "mathjax" / "tex-svg-full.js")
    shutil.copy2(Path(plotly.__file__).parent / "package_data" / "plotly.min.js", static / "plotly.min.js")


def build_site(executed: list[Path], figures: Path, out: Path | None = None) -> Path:
    """Render executed notebooks, book/ and the figures into a static site; returns its index.html."""
    from sphinx.cmd.build import build_main

    out = out or BUILD / "html"
    source = out.parent / "site-src"
    shutil.rmtree(source, ignore_errors=True)
    shutil.copytree(BOOK, source)
    static_assets(source / "_static")
    if figures.exists():
        shutil.copytree(figures, source / "figures", ignore=shutil.ignore_patterns("*.svg"))
    shutil.copytree(ROOT / "rlbook", source / "rlbook", ignore=shutil.ignore_patterns("__pycache__"))  # literalinclude
    for path in executed:
        (source / path.name).write_text(json.dumps(for_the_page(json.loads(path.read_text())), indent=1))
    shutil.rmtree(out, ignore_errors=True)
    if build_main(["-b", "html", "-q", "-j", "1", str(source), str(out)]) != 0:
        raise RuntimeError(f"sphinx-build failed for {source}")
    return out / "index.html"


def main(argv: list[str] | None = None) -> int:
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
        print(f"[{i}/{len(notebooks)}] {notebook.stem} done in {execute(notebook, out, profile):.0f} s", flush=True)
    tic = time.time()
    index = build_site([p for p in executed if p.exists()], BUILD / "figures")
    print(f"book: {index} (rendered in {time.time() - tic:.0f} s), figures in {BUILD / 'figures'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
