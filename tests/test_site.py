"""The rendered book in a real browser (Debian's chromium, driven by Playwright): the book readers get (the notebooks
executed in the reference profile, replaying the stored reference runs) rendered by rlbook.book, every page opened
from disk with the network blocked.

Every page loads with no failed and no off-machine request, its formulas are typeset, no page shows a raw markdown
table, each chapter shows its verdict table as an HTML table with a verdict column, each interactive replay changes
its figure when a control moves, every figure in a chapter has a caption, every verdict the prose quotes is decided
by the stored runs, and a screenshot of each page is saved under build/screenshots/."""
import re
import os
import shutil
from pathlib import Path

import pytest

from rlbook import book

NOTEBOOKS = sorted(book.NOTEBOOKS.glob("*.ipynb"))
SCREENSHOTS = book.BUILD / "screenshots"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]


def chromium() -> str:
    path = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        if os.environ.get("CI"):
            pytest.fail("CI needs Debian's chromium (.ci/run installs it: apt-get install -y chromium)")
        pytest.skip("no chromium here (apt-get install -y chromium)")
    return path


@pytest.fixture(scope="session")  # built once a process (make test sends this file's tests to one: --dist loadfile)
def site(reference_book):
    pytest.importorskip("playwright")
    executed = [reference_book.execute(path) for path in NOTEBOOKS]
    return book.build_site(executed, reference_book.figures, book.BUILD / "test-site" / "html").parent


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=chromium(), args=CHROMIUM_FLAGS,
            headless=True, viewport={"width": 1280, "height": 900})
        yield context
        context.close()


RAW_TABLE = re.compile(r"\|\s*(-{3,}|—+)\s*\|")  # |---| or |—| in a page's text: a table that did not render


def pages(site: Path) -> list[Path]:
    return sorted(p for p in site.glob("*.html") if p.name not in ("genindex.html",))


class Visit:
    """One page opened with every off-machine request blocked and counted."""

    def __init__(self, context, path: Path):
        self.off_machine, self.failed, self.errors = [], [], []
        page = self.page = context.new_page()
        page.route("**/*", self.route)
        page.on("requestfailed", lambda request: self.failed.append(request.url))
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        page.goto(path.resolve().as_uri(), wait_until="load")
        page.wait_for_function("() => !window.MathJax || !window.MathJax.startup || "
                               "window.MathJax.startup.promise.then(() => true)", timeout=30_000)
        page.evaluate("() => window.MathJax && window.MathJax.startup ? window.MathJax.startup.promise : null")

    def route(self, route):
        if route.request.url.startswith(("file:", "data:", "blob:", "about:")):
            return route.continue_()
        self.off_machine.append(route.request.url)
        return route.abort()


def test_every_page_loads_offline_with_typeset_math(site, browser):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    names = [p.name for p in pages(site)]
    assert {"index.html", "references.html", "search.html"} <= set(names)
    assert {f"{p.stem}.html" for p in NOTEBOOKS} <= set(names)
    for path in pages(site):
        visit = Visit(browser, path)
        page = visit.page
        text = page.inner_text("main") if page.query_selector("main") else page.inner_text("body")
        assert not visit.off_machine, f"{path.name} asked the network for {visit.off_machine}"
        assert not visit.failed, f"{path.name}: failed requests {visit.failed}"
        assert not visit.errors, f"{path.name}: script errors {visit.errors}"
        assert "$$" not in text and "\\(" not in text and "\\[" not in text, f"{path.name}: raw TeX left"
        outputs = "\n".join(page.eval_on_selector_all(".cell_output", "cells => cells.map(c => c.innerText)"))
        assert "Warning" not in outputs and "it/s]" not in outputs, f"{path.name}: a warning or a progress bar"
        prose = page.evaluate("""() => { const main = (document.querySelector('main') || document.body).cloneNode(true);
                                  main.querySelectorAll('.cell_input, pre').forEach(e => e.remove());
                                  document.body.appendChild(main); const text = main.innerText; main.remove();
                                  return text; }""")  # what a reader reads: prose and outputs, not code
        assert not RAW_TABLE.search(prose), f"{path.name}: a markdown table left as text: {RAW_TABLE.search(prose)[0]!r}"
        if page.query_selector(".math"):
            assert page.query_selector_all("mjx-container svg"), f"{path.name}: formulas not typeset"
        page.screenshot(path=str(SCREENSHOTS / f"{path.stem}.png"), full_page=False)
        page.close()
    assert {f"{p.stem}.png" for p in NOTEBOOKS} <= {p.name for p in SCREENSHOTS.glob("*.png")}


def test_the_landing_page_links_every_chapter(site, browser):
    page = Visit(browser, site / "index.html").page
    links = set(page.eval_on_selector_all("a", "links => links.map(a => a.getAttribute('href'))"))
    assert {f"{p.stem}.html" for p in NOTEBOOKS} <= links and "references.html" in links
    assert all(img["complete"] and img["width"] > 0 for img in page.eval_on_selector_all(
        "table img", "imgs => imgs.map(i => ({complete: i.complete, width: i.naturalWidth}))"))
    page.close()


def test_search_finds_a_chapter_offline(site, browser):
    page = Visit(browser, site / "search.html").page
    page.goto((site / "search.html").resolve().as_uri() + "?q=staleness", wait_until="load")
    page.wait_for_selector("#search-results li", timeout=30_000)
    assert "02_staleness" in page.inner_html("#search-results")
    page.close()


def test_every_chapter_figure_has_a_caption(site, browser):
    for notebook in NOTEBOOKS:
        page = Visit(browser, site / f"{notebook.stem}.html").page
        figures = page.eval_on_selector_all(".cell_output img", "imgs => imgs.map(i => ({src: i.src, "
                                            "caption: (i.closest('figure')?.querySelector('figcaption')?.innerText "
                                            "|| '').trim()}))")
        assert figures, f"{notebook.stem}: no figure"
        assert all(len(f["caption"]) > 20 for f in figures), [f["src"] for f in figures if len(f["caption"]) <= 20]
        page.close()


def test_interactive_figures_change_when_a_control_moves(site, browser):
    replays = 0
    for notebook in NOTEBOOKS:
        page = Visit(browser, site / f"{notebook.stem}.html").page
        for i in range(len(page.query_selector_all(".rlbook-explorer"))):
            root = page.query_selector_all(".rlbook-explorer")[i]
            plot = root.query_selector(".explorer-plot")
            before = plot.evaluate("p => JSON.stringify(p.data)")
            assert before and before != "[]", f"{notebook.stem}: replay {i} draws nothing"
            for control in root.query_selector_all("[data-control]"):
                if control.evaluate("c => JSON.parse(c.dataset.options).length") < 2:
                    continue  # one choice: nothing to move
                control.evaluate("""c => { if (c.tagName === 'SELECT') c.selectedIndex = (c.selectedIndex + 1) %
                                   c.options.length; else c.value = (+c.value + 1) % (+c.max + 1);
                                   c.dispatchEvent(new Event('change')); }""")
                after = plot.evaluate("p => JSON.stringify(p.data)")
                name = control.get_attribute("data-control")
                assert after != before, f"{notebook.stem}: replay {i} did not change when {name} moved"
                before = after
            replays += 1
        page.close()
    assert replays >= 5, f"only {replays} interactive figures in the book"


def test_every_chapter_shows_its_verdict_table_as_a_table(site, browser):
    for notebook in NOTEBOOKS:
        page = Visit(browser, site / f"{notebook.stem}.html").page
        headers = page.eval_on_selector_all("main table", "tables => tables.map(t => Array.from("
                                            "t.querySelectorAll('th')).map(h => h.innerText.trim().toLowerCase()))")
        verdict_tables = [h for h in headers if "verdict" in h]
        assert verdict_tables, f"{notebook.stem}: no <table> with a verdict column (tables: {headers})"
        page.close()


def test_figures_read_at_the_body_text_size_in_a_1024_px_window(site, browser):
    """A projector's page: at 1,024 px wide, no chapter figure is shrunk so far that its smallest text (figures are
    laid out with none under style.MIN_FONT_PT, at figure.dpi pixels per inch) falls below the body text's size."""
    from rlbook.chapters import style

    for notebook in NOTEBOOKS:
        page = Visit(browser, site / f"{notebook.stem}.html").page
        page.set_viewport_size({"width": 1024, "height": 900})
        body = page.evaluate("() => parseFloat(getComputedStyle(document.querySelector('main p')).fontSize)")
        shown = page.eval_on_selector_all(".cell_output img", "imgs => imgs.map(i => ({src: i.src.slice(-40), "
                                          "scale: i.getBoundingClientRect().width / i.naturalWidth}))")
        smallest = style.MIN_FONT_PT * style.STYLE["figure.dpi"] / 72
        small = [(f["src"], round(smallest * f["scale"], 1)) for f in shown if smallest * f["scale"] < body]
        assert not small, f"{notebook.stem}: figure text below the body text's {body} px: {small}"
        page.close()


def test_every_verdict_the_prose_quotes_is_decided_by_the_stored_runs(site):
    """Every set a chapter quotes has stored runs (made by this code or older), so no glued verdict may read
    UNDECIDED: one that does quotes words no verdict row's claim holds (a misspelt or renamed claim)."""
    from rlbook.chapters.verdicts import UNDECIDED

    quoting_nothing = [notebook.stem for notebook in NOTEBOOKS
                       if UNDECIDED in (site / f"{notebook.stem}.html").read_text()]
    assert not quoting_nothing, f"pages quoting a verdict no stored run decides: {quoting_nothing}"
