"""In-page interactive figures of stored results: Plotly views of every choice of the controls.

In-page interactive figures that replay stored runs: every choice of the controls is computed here, in Python,
and stored in the page as a Plotly figure; a few lines of JavaScript (replay.js) show the figure of the chosen
values. The rendered book loads plotly.js from its own _static folder, so a reader moves a slider or a drop-down
with no kernel and no network. (In JupyterLab the ipywidgets explorers do the same and can also train.)"""
from __future__ import annotations

import html
import itertools
import json
import math
import uuid
from dataclasses import dataclass, field
from pathlib import Path

SCRIPT = (Path(__file__).parent / "replay.js").read_text()
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
    options: list
    kind: str = "select"  # or "slider"
    value: object = None  # the first view shown (default: the first option)
    labels: dict = field(default_factory=dict)  # what a drop-down shows for an option (default: the option)

    def html(self, uid: str) -> str:
        options = [str(o) for o in self.options]
        start = options.index(str(self.value)) if self.value is not None and str(self.value) in options else 0
        data = f'data-control="{self.name}" data-options="{html.escape(json.dumps(options))}"'
        if self.kind == "slider":
            return (f'<label>{html.escape(self.label)} <input type="range" {data} min="0" max="{len(options) - 1}" '
                    f'step="1" value="{start}"> <output data-for="{self.name}">{html.escape(options[start])}</output>'
                    "</label>")
        items = "".join(f'<option value="{html.escape(o)}"{" selected" if i == start else ""}>'
                        f"{html.escape(str(self.labels.get(o, o)))}</option>" for i, o in enumerate(options))
        return f"<label>{html.escape(self.label)} <select {data}>{items}</select></label>"


@dataclass
class Replay:
    """A figure with controls; `views` maps each choice (the option strings joined by "|") to {data, layout}."""
    title: str
    caption: str
    controls: list[Control]
    views: dict
    layout: dict = field(default_factory=dict)

    def _repr_html_(self) -> str:
        uid = f"replay-{uuid.uuid4().hex[:10]}"
        layout = {"font": FONT, "margin": {"t": 60, "l": 70, "r": 20, "b": 60}, "height": 460,
                  "legend": {"orientation": "h", "y": -0.22}, "template": None, **self.layout}
        spec = json.dumps(clean({"views": self.views, "layout": layout}), separators=(",", ":"))
        spec = spec.replace("</", "<\\/")  # no "</script>" inside the data
        return (f'<div class="rlbook-replay" id="{uid}"><div class="replay-title">{html.escape(self.title)}</div>'
                f'<div class="replay-controls">{"".join(c.html(uid) for c in self.controls)}</div>'
                f'<div class="replay-plot"></div><p class="replay-caption">{html.escape(self.caption)}</p>'
                f'<script type="application/json" class="replay-data">{spec}</script>'
                f"<script>{SCRIPT}</script></div>")


def build(title: str, caption: str, controls: list[Control], view, layout: dict | None = None) -> Replay:
    """A Replay whose view for each combination of the controls' options is `view(**choice)` (None: left out)."""
    views = {}
    for values in itertools.product(*(c.options for c in controls)):
        figure = view(**{c.name: v for c, v in zip(controls, values)})
        if figure is not None:
            views["|".join(str(v) for v in values)] = figure
    return Replay(title, caption, controls, views, layout or {})


def line(x, y, name: str, color: str | None = None, dash: str | None = None, markers: bool = False, **extra) -> dict:
    """A Plotly scatter trace as a plain dict (colours in any matplotlib notation: "tab:green", "C2", RGBA)."""
    from matplotlib.colors import to_hex

    style = {k: v for k, v in (("color", color and to_hex(color)), ("dash", dash)) if v}
    return {"type": "scatter", "x": list(x), "y": list(y), "name": name, "mode": "lines+markers" if markers
            else "lines", "line": {"width": 2.5, **style}, **extra}
