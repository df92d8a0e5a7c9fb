"""Sphinx configuration of the rendered book (built by `python -m rlbook.book`, which copies this folder, the
executed notebooks and the figures into build/site-src and runs sphinx-build into build/html).

Everything a page loads is served from build/html: MathJax (from the npm registry), plotly.js
(from the plotly package), the theme's scripts and styles, the search index. No page asks the network for anything.
"""
project = "rlbook: RL for LLMs, reproduced on a CPU"
author = "rlbook"
copyright = "rlbook authors"

extensions = ["myst_nb", "sphinx.ext.mathjax"]
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# notebooks arrive executed (papermill); never run them again, never load widget JS from a CDN
nb_execution_mode = "off"
nb_ipywidgets_js = {}
nb_merge_streams = True
nb_output_stderr = "remove"
# text/markdown outputs (verdict and score tables) are parsed as MyST, which has tables; CommonMark has none
nb_render_markdown_format = "myst"

html_theme = "sphinx_book_theme"
html_title = "rlbook"
html_static_path = ["_static"]
html_css_files = ["rlbook.css"]
html_js_files = ["plotly.min.js"]
html_theme_options = {
    "show_toc_level": 2,
    "show_navbar_depth": 1,
    "home_page_in_toc": True,
    "use_download_button": False,
    "use_fullscreen_button": True,
    "navigation_with_keys": True,
}
html_last_updated_fmt = None
html_copy_source = False

# MathJax 3 (npm package mathjax, copied into _static/mathjax by rlbook.book): SVG output, no web fonts to load
mathjax_path = "mathjax/tex-svg-full.js"
mathjax3_config = {"options": {"enableMenu": False}}


# Every "arXiv 2402.03300" the pages write (prose, tables, outputs) links to the paper's abstract page.
import re  # noqa: E402

from docutils import nodes  # noqa: E402
from sphinx.transforms import SphinxTransform  # noqa: E402

ARXIV = re.compile(r"arXiv:?\s*(\d{4}\.\d{4,5})")
NOT_PROSE = (nodes.reference, nodes.literal, nodes.literal_block, nodes.raw, nodes.math, nodes.math_block,
             nodes.comment)


class ArxivLinks(SphinxTransform):
    default_priority = 500

    def apply(self):
        for element in list(self.document.findall(nodes.TextElement)):  # "arXiv" and its number on two lines of
            joined = []                                                 # the source are two Text nodes: join them
            for child in element.children:
                if joined and isinstance(child, nodes.Text) and isinstance(joined[-1], nodes.Text):
                    joined[-1] = nodes.Text(str(joined[-1]) + str(child))
                else:
                    joined.append(child)
            if len(joined) < len(element.children):
                element.children = []
                element.extend(joined)
        for text in list(self.document.findall(nodes.Text)):
            parent = text.parent
            if parent is None or any(isinstance(node, NOT_PROSE) for node in _ancestors(parent)):
                continue
            source, pieces, start = str(text), [], 0
            for match in ARXIV.finditer(source):
                pieces.append(nodes.Text(source[start:match.start()]))
                pieces.append(nodes.reference(match[0], match[0], refuri=f"https://arxiv.org/abs/{match[1]}"))
                start = match.end()
            if pieces:
                pieces.append(nodes.Text(source[start:]))
                parent.replace(text, [piece for piece in pieces if piece.astext()])


def _ancestors(node):
    while node is not None:
        yield node
        node = node.parent


def setup(app):
    app.add_transform(ArxivLinks)
