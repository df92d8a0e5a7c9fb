"""Interactive figures defined once, shown as an in-page Plotly figure (the book) or an ipywidget (JupyterLab).

An Explorer is its controls and a `view(**choice)` that returns one Plotly figure as a plain dict. In the page
(`_repr_html_`) every choice of the controls' options is computed here, in Python, and stored in the page; a few lines
of JavaScript (explorer.js) show the figure of the chosen values, so a reader moves a slider or a drop-down with no
kernel and no network (the book loads plotly.js from its own _static folder). In JupyterLab, `widget()` draws the
same view for each choice on demand, and a control may offer more options there (`Control.more`): the view computes
what is not stored, e.g. chapter 5's merge of a new setting.
"""
from __future__ import annotations

import html
import itertools
import json
import math
import os
import textwrap
import uuid
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

SCRIPT = (Path(__file__).parent / "explorer.js").read_text()
FONT = {"size": 15}


def clean(value):
    """JSON-safe: NaN and infinities become null, tuples lists, numpy scalars floats."""
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if hasattr(value, "tolist"):
        return clean(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@dataclass
class Control:
    name: str
    label: str
    options: list  # the options of the page (every one computed into it)
    kind: str = "select"  # or "slider"
    value: object = None  # the first view shown (default: the first option)
    labels: dict = field(default_factory=dict)  # what a drop-down shows for an option (default: the option)
    more: list = field(default_factory=list)  # options only the widget offers: their views are computed when chosen

    @property
    def in_page(self) -> bool:
        """Shown in the page: unless its one page option is fixed there and its others exist only in the widget."""
        return len(self.options) > 1 or not self.more

    def start(self) -> int:
        options = [str(o) for o in self.options]
        return options.index(str(self.value)) if self.value is not None and str(self.value) in options else 0

    def html(self) -> str:
        options, start = [str(o) for o in self.options], self.start()
        data = f'data-control="{self.name}" data-options="{html.escape(json.dumps(options))}"'
        if self.kind == "slider":
            return (f'<label>{html.escape(self.label)} <input type="range" {data} min="0" max="{len(options) - 1}" '
                    f'step="1" value="{start}"> <output data-for="{self.name}">{html.escape(options[start])}</output>'
                    "</label>")
        items = "".join(f'<option value="{html.escape(o)}"{" selected" if i == start else ""}>'
                        f"{html.escape(str(self.labels.get(o, o)))}</option>" for i, o in enumerate(options))
        return f"<label>{html.escape(self.label)} <select {data}>{items}</select></label>"

    def widget(self):
        import ipywidgets as w

        extra = [o for o in self.more if o not in self.options]
        options = sorted([*self.options, *extra]) if extra else list(self.options)  # `more`: numbers, in order
        value = self.options[self.start()]
        if self.kind == "slider":
            return w.SelectionSlider(options=options, value=value, description=self.label, continuous_update=False)
        return w.Dropdown(options=[(str(self.labels.get(str(o), o)), o) for o in options], value=value,
                          description=self.label)


TITLE_CHARACTERS = 60  # a Plotly title wider than the page column is cut at both ends, not wrapped


def wrap_title(figure: dict) -> dict:
    """The figure with its title broken into lines of at most TITLE_CHARACTERS (Plotly wraps only at <br>)."""
    text = figure.get("layout", {}).get("title", {}).get("text")
    if not text or len(text) <= TITLE_CHARACTERS:
        return figure
    title = {**figure["layout"]["title"], "text": "<br>".join(textwrap.wrap(text, TITLE_CHARACTERS))}
    return {**figure, "layout": {**figure["layout"], "title": title}}


@dataclass
class Explorer:
    """A figure with controls: `view(**choice)` is the Plotly figure ({data, layout}) of one choice, None when there
    is nothing to show for it."""
    title: str
    caption: str
    controls: list[Control]
    view: object
    layout: dict = field(default_factory=dict)

    @cached_property
    def views(self) -> dict:
        """The page's figures: each choice of the controls' page options -> its view, keyed by the options of the
        controls the page shows (`Control.in_page`) joined by "|"."""
        views = {}
        for values in itertools.product(*(c.options for c in self.controls)):
            figure = self.view(**{c.name: v for c, v in zip(self.controls, values)})
            if figure is not None:
                views["|".join(str(v) for c, v in zip(self.controls, values) if c.in_page)] = wrap_title(figure)
        return views

    def _layout(self) -> dict:
        return {"font": FONT, "margin": {"t": 84, "l": 70, "r": 20, "b": 90}, "height": 480,
                "legend": {"orientation": "h", "y": -0.3}, "template": None, **self.layout}

    def _repr_html_(self) -> str:
        """The in-page figure: every view stored in the page, shown by explorer.js as the controls move."""
        uid = f"explorer-{uuid.uuid4().hex[:10]}"
        spec = json.dumps(clean({"views": self.views, "layout": self._layout()}), separators=(",", ":"))
        spec = spec.replace("</", "<\\/")  # no "</script>" inside the data
        return (f'<div class="rlbook-explorer" id="{uid}"><div class="explorer-title">{html.escape(self.title)}</div>'
                f'<div class="explorer-controls">{"".join(c.html() for c in self.controls if c.in_page)}</div>'
                f'<div class="explorer-plot"></div><p class="explorer-caption">{html.escape(self.caption)}</p>'
                f'<script type="application/json" class="explorer-data">{spec}</script>'
                f"<script>{SCRIPT}</script></div>")

    def widget(self):
        """The JupyterLab explorer: the same controls (and their `more` options) over the same view, drawn on demand.
        In a headless run (RLBOOK_HEADLESS, set by rlbook.book.execute) nobody can move it: a line says where it
        lives, and the page's figure stands beside it."""
        import ipywidgets as w
        from IPython.display import HTML, display

        if os.environ.get("RLBOOK_HEADLESS"):
            return HTML(f"<i>{html.escape(self.title)}: an interactive explorer, in the notebook opened in JupyterLab"
                        "</i>")
        controls, out = {c.name: c.widget() for c in self.controls}, w.Output()

        def draw(_=None):
            with out:
                out.clear_output(wait=True)
                figure = self.view(**{name: control.value for name, control in controls.items()})
                if figure is None:
                    return print("nothing stored or computable for this choice")
                layout = {**self._layout(), **figure.get("layout", {})}
                display({"application/vnd.plotly.v1+json": clean({"data": figure["data"], "layout": layout}),
                         "text/plain": self.title}, raw=True)

        for control in controls.values():
            control.observe(draw, names="value")
        draw()
        return w.VBox([w.HTML(f"<b>{html.escape(self.title)}</b>"), w.HBox(list(controls.values())), out,
                       w.HTML(f"<i>{html.escape(self.caption)}</i>")])


def line(x, y, name: str, color: str | None = None, dash: str | None = None, markers: bool = False, **extra) -> dict:
    """A Plotly scatter trace as a plain dict (colours in any matplotlib notation: "tab:green", "C2", RGBA)."""
    from matplotlib.colors import to_hex

    style = {k: v for k, v in (("color", color and to_hex(color)), ("dash", dash)) if v}
    return {"type": "scatter", "x": list(x), "y": list(y), "name": name, "mode": "lines+markers" if markers
            else "lines", "line": {"width": 2.5, **style}, **extra}
