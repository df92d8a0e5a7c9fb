"""A slide deck per chapter (reveal.js), written beside the book by `make book`: build/html/decks/<chapter>.html.

A deck is read off the chapter page it belongs to (the executed notebook, as rlbook.book.pages shows it) and off the
landing page, so it follows the chapter as the chapter changes: the question (the opening paragraph), the mechanism
(section 1's first paragraph and equation, and the page's first figure), the lead figure (the chapter's headline
figure on the landing page), the verdict table (each claim and its verdict on the slide; the paper's numbers and ours
in the speaker notes), what it means, and the first exercise. Captions and the verdict rule go to the speaker notes
(press `s` in a deck). reveal.js comes from the npm registry (rlbook.book.npm_files) and MathJax from the book's
own copy: a deck opens from disk with no network.
"""
from __future__ import annotations

import ast
import base64
import html
import re
from dataclasses import dataclass
from pathlib import Path

REVEAL = "reveal.js@6.0.2"
REVEAL_FILES = ("dist/reveal.js", "dist/reveal.css", "dist/theme/white.css", "dist/plugin/notes.js")
ROWS_PER_SLIDE = 7  # verdict rows on one slide; a longer table continues on the next
CHARACTERS_PER_SLIDE = 650  # "what it means" is cut between paragraphs (or sentences) into slides this long
MEANING_SLIDES = 2  # "what it means" takes at most this many slides; the rest goes to the speaker notes
HEADLINE = re.compile(r"```\{figure\} figures/(?P<figure>[\w/]+)\.png\n:target: (?P<stem>\w+)\.html")
GLUE = re.compile(r"\{glue(?::\w+)?\}`([^`]+)`")
ROLE = re.compile(r"\{[\w:-]+\}`([^`]*)`")
FENCE = re.compile(r"^```\{[^}]*\}.*?^```\n?", re.S | re.M)
CELL_SEPARATOR = re.compile(r"(?<!\\)\|")


@dataclass
class Slide:
    body: str  # HTML
    notes: str = ""  # HTML: what the lecturer says, with the numbers and caveats


def _math(content: str, options: dict) -> str:
    content = html.escape(content)
    return f"\\[{content}\\]" if options.get("display_mode") else f"\\({content}\\)"


def markdown(text: str) -> str:
    """MyST markdown of a chapter as slide HTML: directives dropped, roles as their text, math left to MathJax, links
    pointing back into the book."""
    from markdown_it import MarkdownIt
    from mdit_py_plugins.dollarmath import dollarmath_plugin

    text = ROLE.sub(r"\1", FENCE.sub("", text))
    rendered = MarkdownIt("commonmark").enable("table").use(dollarmath_plugin, renderer=_math).render(text)
    return re.sub(r'href="(?![a-z]+:|#)([^"#]*?)(?:\.ipynb|\.md)?(#[^"]*)?"',
                  lambda m: f'href="../{m[1]}.html{m[2] or ""}"', rendered)


def glue_values(notebook: dict) -> dict[str, str]:
    """The values a chapter's text quotes ({glue:text}`name`), as the executed notebook recorded them."""
    values = {}
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            name = output.get("metadata", {}).get("scrapbook", {}).get("name")
            plain = output.get("data", {}).get("application/papermill.record/text/plain")
            if name and plain is not None:
                try:
                    values[name] = str(ast.literal_eval("".join(plain)))
                except (ValueError, SyntaxError):
                    values[name] = "".join(plain)
    return values


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def _sections(notebook: dict, glue: dict) -> dict[str, str]:
    """The page's markdown by heading: {'title': ..., 'opening': ..., heading text: markdown under it}, glue filled."""
    sections, current = {"opening": ""}, "opening"
    for cell in notebook["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        for line in GLUE.sub(lambda m: glue.get(m[1], m[0]), _source(cell)).splitlines(keepends=True):
            if line.startswith("# "):
                sections["title"] = line[2:].strip()
            elif line.startswith("## "):
                current = re.sub(r"^\d+\.\s*", "", line[3:].strip())
                sections[current] = ""
            else:
                sections[current] += line
        sections[current] += "\n\n"
    return sections


def _paragraphs(text: str) -> list[str]:
    """Blocks of markdown separated by blank lines (a list item with its continuation lines is one block)."""
    blocks, block = [], []
    for line in FENCE.sub("", text).splitlines():
        starts_item = re.match(r"^(\d+\.|[-*]) ", line)
        if (not line.strip() or starts_item) and block:
            blocks.append("\n".join(block))
            block = []
        if line.strip():
            block.append(line)
    return blocks + (["\n".join(block)] if block else [])


def _section(sections: dict, *starts: str) -> tuple[str, str]:
    """(heading, text) of the first section whose heading starts with any of `starts` (('', '') where none does)."""
    return next(((heading, text) for heading, text in sections.items() if heading.lower().startswith(starts)),
                ("", ""))


def _images(notebook: dict) -> list[tuple[dict, bytes]]:
    """Every figure of the page, in order: (its cell, its PNG)."""
    return [(cell, base64.b64decode("".join(output["data"]["image/png"])))
            for cell in notebook["cells"] if cell["cell_type"] == "code"
            for output in cell.get("outputs", []) if "image/png" in output.get("data", {})]


def _caption(cell: dict) -> str:
    return cell.get("metadata", {}).get("mystnb", {}).get("figure", {}).get("caption", "")


def _row(line: str) -> list[str]:
    """The cells of one markdown table row (an escaped \\| stays inside its cell)."""
    return [cell.strip() for cell in CELL_SEPARATOR.split(line.strip())[1:-1]]


def verdict_table(notebook: dict) -> tuple[list[str], list[list[str]], str] | None:
    """The page's first verdict table (a markdown output with a 'verdict' column): (header, rows, the line above it
    naming its runs), or None."""
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            lines = "".join(output.get("data", {}).get("text/markdown", "")).splitlines()
            for i, line in enumerate(lines):
                if line.startswith("|") and "verdict" in [c.lower() for c in _row(line)]:
                    body = [_row(row) for row in lines[i + 2:]]
                    rows = body[:next((j for j, row in enumerate(lines[i + 2:]) if not row.startswith("|")),
                                      len(body))]
                    return [c.lower() for c in _row(line)], rows, " ".join(l for l in lines[:i] if l.strip())
    return None


def _column(header: list[str], *names: str) -> int | None:
    return next((i for i, h in enumerate(header) if any(h.startswith(n) for n in names)), None)


def _inline(text: str) -> str:
    """One table cell of markdown as inline HTML."""
    return re.sub(r"^<p>|</p>\n?$", "", markdown(text.replace("\\|", "|")))


def verdict_slides(table) -> list[Slide]:
    header, rows, above = table
    claim, verdict = 0, _column(header, "verdict")
    paper, seen = _column(header, "the paper reports"), _column(header, "we observe")
    slides = []
    for start in range(0, len(rows), ROWS_PER_SLIDE):
        part = rows[start:start + ROWS_PER_SLIDE]
        parts = -(-len(rows) // ROWS_PER_SLIDE)
        more = f" ({start // ROWS_PER_SLIDE + 1} of {parts})" if parts > 1 else ""
        body = "".join(f"<tr><td>{_inline(row[claim])}</td><td class='verdict'>{_inline(row[verdict])}</td></tr>"
                       for row in part)
        notes = "".join(f"<li>{_inline(row[claim])}: the paper reports "
                        f"{_inline(row[paper]) if paper is not None else '(not stated)'}; we observe "
                        f"{_inline(row[seen]) if seen is not None else '(see the page)'}; "
                        f"<b>{_inline(row[verdict])}</b></li>" for row in part)
        slides.append(Slide(f"<h2>The paper reports / we observe{more}</h2><table class='verdicts'><thead><tr>"
                            f"<th>claim</th><th>verdict</th></tr></thead><tbody>{body}</tbody></table>"
                            f"<p class='source'>{_inline(above)}</p>", f"<ul>{notes}</ul>"))
    return slides


def headline_figures(landing: str) -> dict[str, str]:
    """{chapter: figure path under figures/, without .png} of the landing page's headline figures."""
    return {m["stem"]: m["figure"] for m in HEADLINE.finditer(landing)}


SLIDE_FRAME = (1200, 700)  # the pixels a figure may take on a slide (reveal.js frame 1280 x 800, less the margins)
SAVED = re.compile(r'save_figure\(.*?"(?P<name>[\w.-]+)"')


def for_a_slide(page_png: Path) -> Path:
    """Of a figure's two saved layouts, the page column's (<name>.png: panels stacked) and the one it was drawn in
    (<name>.slide.png: side by side), the one whose text a slide's frame shows larger."""
    from PIL import Image

    def scale(path: Path) -> float:
        with Image.open(path) as image:
            return min(SLIDE_FRAME[0] / image.width, SLIDE_FRAME[1] / image.height)

    wide = page_png.with_suffix(".slide.png")
    return wide if wide.exists() and scale(wide) > scale(page_png) else page_png


def figure_slides(notebook: dict, lead: Path | None, folder: Path) -> list[Slide]:
    """The mechanism figure (the page's first, unless it is the lead figure) and the lead figure (`lead`, a saved
    figure's page PNG), copied into `folder` in the layout a slide shows larger (`for_a_slide`); captions in the
    notes."""
    images = _images(notebook)
    lead_cell = next((cell for cell, _ in images if lead and f'"{lead.stem}"' in _source(cell)), None)
    folder.mkdir(parents=True, exist_ok=True)
    shown = []
    if images and images[0][0] is not lead_cell:
        cell, png = images[0]
        saved = SAVED.search(_source(cell))
        page_png = lead.parent / f"{saved['name']}.png" if lead and saved else None
        (folder / "mechanism.png").write_bytes(for_a_slide(page_png).read_bytes() if page_png and page_png.exists()
                                               else png)
        shown.append(Slide(f"<img class='figure' src='{folder.name}/mechanism.png' alt='the mechanism'>",
                           html.escape(_caption(cell))))
    if lead is not None and lead.exists():
        (folder / "lead.png").write_bytes(for_a_slide(lead).read_bytes())
        shown.append(Slide(f"<img class='figure' src='{folder.name}/lead.png' alt='the lead figure'>",
                           html.escape(_caption(lead_cell) if lead_cell else "") + " Ask for a prediction first."))
    return shown


def _sentences(paragraph: str) -> list[str]:
    """A paragraph longer than CHARACTERS_PER_SLIDE cut between sentences into pieces of at most about that much."""
    pieces = []
    for sentence in re.split(r"(?<=[.?!])\s+(?=[A-Z*(])", paragraph):
        if pieces and len(pieces[-1]) + len(sentence) < CHARACTERS_PER_SLIDE:
            pieces[-1] += " " + sentence
        else:
            pieces.append(sentence)
    return pieces


def meaning_slides(text: str) -> list[Slide]:
    """"What it means" on at most MEANING_SLIDES slides of about CHARACTERS_PER_SLIDE, cut between paragraphs; what
    does not fit goes to the last one's notes."""
    parts = []
    for block in (chunk for paragraph in _paragraphs(text) for chunk in _sentences(paragraph)):
        if parts and sum(map(len, parts[-1])) + len(block) <= CHARACTERS_PER_SLIDE:
            parts[-1].append(block)
        else:
            parts.append([block])
    shown = [Slide("<h2>What it means</h2>" + markdown("\n\n".join(part)), "The verdicts quoted here are the "
                   "table's; the chapter page has the figures behind them.") for part in parts[:MEANING_SLIDES]]
    if shown:
        shown[-1].notes += markdown("\n\n".join(block for part in parts[MEANING_SLIDES:] for block in part))
    return shown


def slides(notebook: dict, stem: str, lead: Path | None, folder: Path) -> list[Slide]:
    """The deck of one chapter page, its figures copied into `folder` (the deck's own)."""
    sections = _sections(notebook, glue_values(notebook))
    title = html.escape(sections.get("title", stem))
    question = next(iter(_paragraphs(sections["opening"])), "")
    deck = [Slide(f"<h1>{title}</h1>{markdown(question)}", "Ask the room for a prediction before the first figure.")]
    heading, mechanism = next(((k, v) for k, v in sections.items() if k not in ("opening", "title")), ("", ""))
    first, *rest = _paragraphs(mechanism) or [""]
    equations = [b for b in rest if b.startswith("$$")][:1]
    deck.append(Slide(f"<h2>{html.escape(heading)}</h2>{markdown(first)}{markdown(''.join(equations))}",
                      markdown("\n\n".join(b for b in rest if b not in equations)[:1500])))
    deck += figure_slides(notebook, lead, folder)
    table = verdict_table(notebook)
    if table:
        deck += verdict_slides(table)
        deck[-1].notes += markdown(_section(sections, "the paper reports")[1])
    deck += meaning_slides(_section(sections, "what it means")[1])
    exercises = [b for b in _paragraphs(_section(sections, "exercises")[1]) if re.match(r"^\d+\.", b)]
    if exercises:
        deck.append(Slide("<h2>Exercise</h2>" + markdown(exercises[0]), "Run it live; ask for the prediction "
                          "first. The others:" + markdown("\n\n".join(exercises[1:]))))
    deck.append(Slide(f"<h2>More</h2><p>The chapter: <a href='../{stem}.html'>{title}</a></p><p>The notebook: "
                      f"<code>notebooks/{stem}.ipynb</code> (JupyterLab)</p><p>The lecture plan: "
                      f"<a href='../teaching.html#lecture-{stem}'>teaching</a></p>"))
    return deck


STYLE = """
.reveal { font-size: 34px; }
.reveal h1, .reveal h2 { text-transform: none; }
.reveal h1 { font-size: 1.5em; } .reveal h2 { font-size: 1.15em; }
.reveal p, .reveal li { text-align: left; line-height: 1.35; }
.reveal img.figure { max-height: 740px; max-width: 100%; margin: 0; }
.reveal table.verdicts { font-size: 0.8em; width: 100%; }
.reveal table.verdicts td.verdict { font-weight: bold; white-space: nowrap; }
.reveal p.source { font-size: 0.55em; color: #555; }
.reveal code { font-size: 0.85em; }
"""


def page(title: str, deck: list[Slide]) -> str:
    sections = "".join(f"<section>{s.body}<aside class='notes'>{s.notes}</aside></section>\n" for s in deck)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}: slides</title>
<link rel="stylesheet" href="../_static/reveal/dist/reveal.css">
<link rel="stylesheet" href="../_static/reveal/dist/theme/white.css">
<style>{STYLE}</style></head>
<body><div class="reveal"><div class="slides">
{sections}</div></div>
<script>window.MathJax = {{options: {{enableMenu: false}}}};</script>
<script src="../_static/mathjax/tex-svg-full.js"></script>
<script src="../_static/reveal/dist/reveal.js"></script>
<script src="../_static/reveal/dist/plugin/notes.js"></script>
<script>Reveal.initialize({{hash: true, width: 1280, height: 800, margin: 0.04, plugins: [RevealNotes]}});</script>
</body></html>
"""


def write_decks(chapter_pages: dict[str, dict], landing: str, figures: Path, out: Path) -> list[Path]:
    """One deck per chapter page ({stem: page notebook}) into out/decks/; returns their paths."""
    folder = out / "decks"
    leads = headline_figures(landing)
    written = []
    for stem, notebook in chapter_pages.items():
        lead = figures / f"{leads[stem]}.png" if stem in leads else None
        deck = slides(notebook, stem, lead, folder / stem)
        path = folder / f"{stem}.html"
        path.write_text(page(_sections(notebook, {}).get("title", stem), deck))
        written.append(path)
    return written
