"""The chapters' analysis, figures and explorers, one module per chapter, above the core package.

`run_groups` groups stored runs and draws them for every chapter, `papers` holds the numbers the papers report,
`tables` the markdown tables, `verdicts` the paper reports / we observe / verdict rows, `style` the look of every
figure and `explorer` the interactive figures (an ipywidget in JupyterLab, an in-page Plotly figure in the book).

The core package (tasks, models, rollout, objectives, trainer, runs, ops) never imports from here.
"""
