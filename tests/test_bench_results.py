"""bench/results/ holds one folder per benchmark, and bench/README.md is what those results give (bench/summary.py)."""
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import record  # noqa: E402
import summary  # noqa: E402


def test_every_result_is_in_its_benchmarks_folder():
    assert not list((BENCH / "results").glob("*.json"))
    for path in (BENCH / "results").glob("*/*.json"):
        assert path.name.startswith(f"{path.parent.name}-"), path
        assert "command" in json.loads(path.read_text()), path


def test_the_readme_is_what_the_results_give():
    assert summary.README.read_text() == summary.readme(), "run: python bench/summary.py"


def test_a_result_goes_to_its_folder_and_the_readme_shows_it(tmp_path, monkeypatch):
    monkeypatch.setattr(record, "RESULTS", tmp_path / "results")
    path = record.save_result("gpu_check", "cuda", {"measurements": {"fused kernel": {"ms": 1.5, "rows": [1]}}})
    assert path.parent == tmp_path / "results" / "gpu_check"
    text = (tmp_path / "README.md").read_text()  # rewritten by save_result
    assert f"[{path.name}](results/gpu_check/{path.name})" in text and "- fused kernel: ms 1.5\n" in text
