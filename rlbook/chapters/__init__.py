"""The chapters' analysis and figures: one module per chapter (chapters 2 and 3 share `m2po`), `style` for the
look of every figure, `widgets` for the JupyterLab explorers and `interactive` for the book's in-page figures.

The core package (tasks, models, rollout, objectives, trainer, runs, ops) never imports from here.
"""
