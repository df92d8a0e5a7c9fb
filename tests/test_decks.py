"""The slide decks (rlbook.deck) and the split of a chapter notebook into its pages (rlbook.book.pages), on a small
executed notebook written here: what each slide is read from, and what it must never lose (the verdicts, the numbers
in the notes, the quoted values). tests/test_site.py steps through the real decks in a browser."""
import base64
import io

import pytest

from rlbook import book, deck

TABLE = """Runs: seeds 0-4; all 5 runs made by this code.

| the paper found | the paper reports | we observe | verdict |
|---|---|---|---|
| GRPO raises accuracy | MATH-500 15.2% -> 47.4% | 0.460 -> 0.719 | reproduced |
| entropy rises with \\|r-1\\| | Fig. 4 | slope 0.3 ± 0.1 | within noise |
"""


def png() -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (4, 3), "white").save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def code(source, outputs=(), tags=(), caption=None):
    metadata = {"tags": list(tags)}
    if caption:
        metadata["mystnb"] = {"figure": {"caption": caption}}
    return {"cell_type": "code", "id": source[:8], "metadata": metadata, "source": source, "outputs": list(outputs),
            "execution_count": 1}


def markdown(source, tags=()):
    return {"cell_type": "markdown", "id": source[:8], "metadata": {"tags": list(tags)}, "source": source}


def glue(name, value):
    return {"output_type": "display_data", "metadata": {"scrapbook": {"name": name, "mime_prefix": "x/"}},
            "data": {"application/papermill.record/text/plain": repr(value)}}


def figure():
    return {"output_type": "display_data", "metadata": {}, "data": {"image/png": png()}}


@pytest.fixture
def chapter():
    return {"metadata": {}, "nbformat": 4, "nbformat_minor": 5, "cells": [
        markdown("# Chapter 9. A test\n\n**The question.** Does it learn?\n\nMore words."),
        markdown("## 1. The mechanism\n\nAdvantages on tiny tensors.\n\n$$A_i = R_i - \\bar R$$\n\nThe rest."),
        code('save_figure(fig, "09", "mechanism")', [figure()], caption="the mechanism, by hand"),
        markdown("## 2. The runs"),
        code('save_figure(fig, "09", "lead")', [figure()], caption="the runs, over updates"),
        markdown("## 3. The paper reports / we observe\n\nTwo standard errors over seeds."),
        code("display(table)", [{"output_type": "display_data", "metadata": {}, "data": {"text/markdown": TABLE}}]),
        code("glue('learns', ...)", [glue("learns", "reproduced")], tags=["remove-cell"]),
        markdown("## What it means\n\nThat it learns is **{glue:text}`learns`** (see [the appendix](appendix_x))."),
        markdown("## Exercises\n\n1. **First.** Predict, then run.\n2. **Second.** Another one."),
        markdown("# Chapter 9, companion: more\n\nThe rest.", tags=["companion"]),
        code("print(1)", [{"output_type": "stream", "name": "stdout", "text": "1\n"}], tags=["companion"]),
    ]}


def test_a_chapter_with_companion_cells_becomes_two_pages_linked_both_ways(chapter):
    pages = book.pages(chapter, "09_test")
    assert list(pages) == ["09_test", "09_test_companion"]
    main, companion = pages["09_test"], pages["09_test_companion"]
    text = lambda page: "\n".join("".join(c["source"]) for c in page["cells"])
    assert "companion: more" not in text(main) and 'href="09_test_companion.html"' in text(main)
    assert 'href="decks/09_test.html"' in text(main) and 'href="teaching.html#lecture-09_test"' in text(main)
    assert text(companion).startswith("# Chapter 9, companion") and 'href="09_test.html"' in text(companion)
    assert any("glue(" in "".join(c["source"]) for c in companion["cells"]), "the quoted values' cell is kept"
    without = {**chapter, "cells": chapter["cells"][:-2]}
    assert list(book.pages(without, "09_test")) == ["09_test"]


def test_the_deck_reads_the_question_mechanism_figures_verdicts_meaning_and_an_exercise(chapter, tmp_path):
    page = book.pages(chapter, "09_test")["09_test"]
    (tmp_path / "lead.png").write_bytes(base64.b64decode(png()))
    slides = deck.slides(page, "09_test", tmp_path / "lead.png", tmp_path / "09_test")
    bodies = [s.body for s in slides]
    assert "Chapter 9. A test" in bodies[0] and "Does it learn?" in bodies[0] and "More words" not in bodies[0]
    assert "The mechanism" in bodies[1] and "\\[A_i = R_i - \\bar R\\]" in bodies[1]
    assert "09_test/mechanism.png" in bodies[2] and "the mechanism, by hand" in slides[2].notes
    assert "09_test/lead.png" in bodies[3] and "the runs, over updates" in slides[3].notes
    verdicts = next(s for s in slides if "The paper reports" in s.body)
    assert "reproduced" in verdicts.body and "within noise" in verdicts.body and "|r-1|" in verdicts.body
    assert "0.460 -&gt; 0.719" in verdicts.notes or "0.460 -> 0.719" in verdicts.notes
    assert "15.2%" in verdicts.notes and "Two standard errors" in verdicts.notes
    meaning = next(s for s in slides if "What it means" in s.body)
    assert "<strong>reproduced</strong>" in meaning.body and 'href="../appendix_x.html"' in meaning.body
    exercise = next(s for s in slides if "Exercise" in s.body)
    assert "First." in exercise.body and "Second." in exercise.notes
    assert (tmp_path / "09_test" / "mechanism.png").exists() and (tmp_path / "09_test" / "lead.png").exists()


def test_a_long_verdict_table_continues_on_more_slides():
    rows = [[f"claim {i}", "paper", f"ours {i}.5", "reproduced"] for i in range(deck.ROWS_PER_SLIDE + 2)]
    slides = deck.verdict_slides((["the paper found", "the paper reports", "we observe", "verdict"], rows, ""))
    assert len(slides) == 2 and "(2 of 2)" in slides[1].body
    assert all(f"claim {i}<" in "".join(s.body for s in slides) for i in range(len(rows)))


def test_the_landing_page_names_each_chapters_lead_figure():
    leads = deck.headline_figures((book.BOOK / "index.md").read_text())
    assert set(leads) == {p.stem for p in book.NOTEBOOKS.glob("*.ipynb")}, leads


def test_what_it_means_fills_at_most_two_slides_and_the_rest_goes_to_the_notes():
    sentence = "The merge lowers the loss by **{:d}** nats, within noise of the annealed twin. "
    text = "".join(sentence.format(i) for i in range(40))  # one long paragraph
    slides = deck.meaning_slides(text)
    assert len(slides) == deck.MEANING_SLIDES
    assert all(len(s.body) < 2 * deck.CHARACTERS_PER_SLIDE for s in slides)
    assert "<strong>39</strong>" in slides[-1].notes and "<strong>0</strong>" in slides[0].body
