"""The fidelity table (bench/fidelity.py's computation) from the stored reference runs equals the golden, byte for
byte: sealing runs (bench/convert_store.py) changes no verdict, count or printed number.

The golden was computed from the store before any run was sealed. When a chapter's verdict definitions change on
purpose, regenerate it with one command and commit it with the change:

    .venv/bin/python bench/fidelity.py --golden tests/golden/fidelity.json
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import fidelity  # noqa: E402

from rlbook.runs import reference_root  # noqa: E402


def test_the_fidelity_table_from_the_stored_runs_equals_the_golden():
    golden = (ROOT / "tests" / "golden" / "fidelity.json").read_text()
    assert fidelity.golden_text(fidelity.tables(str(reference_root()))) == golden
