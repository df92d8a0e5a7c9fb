"""The recorded pilots that chose chapter 4's 2-person setting replay: each set still builds the configs its records
name, though experiments.lopti_kk_run has since moved to the settings they chose."""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import pilots  # noqa: E402

RECORDS = ROOT / "bench" / "results" / "pilots"


@pytest.mark.parametrize("name", ["kk-2people-knobs", "kk-2people-select", "kk-2people-select-budget"])
def test_a_recorded_pilot_set_builds_the_runs_its_records_name(name):
    records = [json.loads(f.read_text()) for f in RECORDS.glob(f"pilots-{name}-part*.json")]
    recorded = {pilot["run"] for record in records for pilot in record["pilots"]}
    configs = [config.replace(experiment=f"pilots-{name}") for _, config in pilots.SETS[name]()]
    assert recorded and recorded == {f"{c.name}-{c.hash()}" for c in configs}
