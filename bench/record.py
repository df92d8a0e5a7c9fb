"""A benchmark's record: its result goes to bench/results/<benchmark>/<benchmark>-<tag>-<commit>-<time>.json with the
command that made it and the machine it ran on (rlbook.storage.environment); `--set key=value` settings are read as
JSON values (parse_setting)."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from rlbook.storage import environment, write_json

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/summary.py, when imported from elsewhere
import summary  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def save_result(benchmark: str, tag: str, payload: dict) -> Path:
    """Write one result of `benchmark` (its folder under bench/results/) and say where."""
    env = environment()
    out = RESULTS / benchmark / f"{benchmark}-{tag}-{env['git_commit']}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    write_json(out, {"command": " ".join(sys.argv), "environment": env, **payload})
    (RESULTS.parent / "README.md").write_text(summary.readme(RESULTS))  # the latest figures, now with this one
    print(f"wrote {out} and {RESULTS.parent / 'README.md'}")
    return out


def parse_setting(text: str):
    key, _, value = text.partition("=")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value
