"""Run the command line as `python -m rlbook` (rlbook.cli)."""
import sys

from .cli import main

sys.exit(main())
