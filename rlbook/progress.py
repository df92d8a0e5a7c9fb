"""Progress bars (tqdm.auto): shown unless the caller passes progress=False or the environment sets TQDM_DISABLE=1.

`rlbook.book` sets TQDM_DISABLE for the kernels that execute the notebooks headless: nobody watches those bars,
the rendered page drops them, and each one is a stream of widget messages to a client with no use for them.
"""
from __future__ import annotations

import os

from tqdm.auto import tqdm


def progress_bar(iterable=None, progress: bool = True, **kwargs):
    return tqdm(iterable, disable=not progress or os.environ.get("TQDM_DISABLE") == "1", **kwargs)
