"""The "Scaling out" appendix: every key an export writes is in its concept map, the exports it shows are the ones the
exporters write now, and the check's counts it quotes are the last recorded run's (bench/results/check_exports/)."""
import json
import re
from pathlib import Path

from rlbook.experiments import grpo_from_scratch, lopti_run, router_run, stale_run
from rlbook.export import EXPORTERS, export

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "book" / "scaling_out.md"
REPRESENTATIVE = [grpo_from_scratch("cpu", 0), stale_run("cpu", "m2po", 48), stale_run("cpu", "tis", 48),
                  stale_run("cpu", "gspo", 48), stale_run("cpu", "m2po_areal", 48), router_run("cpu", "grpo+r3"),
                  lopti_run("cpu", "ar"), grpo_from_scratch("cpu", 0, objective_params={"dual_clip": 3.0})]


def test_every_exported_key_is_in_the_concept_map():
    text = PAGE.read_text()
    fenced = re.findall(r"```.*?```", text, flags=re.S)  # code blocks, then the inline code of the prose
    spans = fenced + re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    named = {word for span in spans for word in re.findall(r"[A-Za-z_][\w.]*", span)}
    leaves = {name.rsplit(".", 1)[-1] for name in named}
    for engine, exporter in EXPORTERS.items():
        for config in REPRESENTATIVE:
            for key in exporter(config).values:
                assert key.rsplit(".", 1)[-1] in leaves, f"{engine}: {key} is exported but not in {PAGE.name}"


def test_the_exports_shown_are_what_the_exporters_write(tmp_path):
    text = PAGE.read_text()
    for experiment, engine, name in (("01_grpo", "trl", "01_grpo-grpo-cpu.trl.yaml"),
                                     ("02_staleness", "verl", "02_staleness-m2po-s48-cpu.verl.sh"),
                                     ("02_staleness", "areal", "02_staleness-m2po-s48-cpu.areal.yaml")):
        export(experiment, engine, tmp_path)
        written = (tmp_path / name).read_text()
        block = text.split(f"`exports/{name}`")[1].split("```", 2)[1].split("\n", 1)[1]
        assert block == written, f"{name} on the page differs from the export: regenerate the page's copy"
        assert f"python -m rlbook export {experiment} --to {engine} --out exports/" in text
        assert f"python bench/check_exports.py --engines {engine} --experiments {experiment}" in text


def test_the_check_counts_are_the_last_recorded_run():
    folder = ROOT / "bench" / "results" / "check_exports"
    latest = max(folder.glob("check_exports-trl-verl-areal-*.json"), key=lambda p: p.stem.split("-")[-2:])
    results = json.loads(latest.read_text())["results"]
    text = PAGE.read_text()
    for engine, result in results.items():
        total = result["passed"] + result["failed"]
        assert result["failed"] == 0, (engine, [r for r in result["files"] if not r["ok"]][:1])
        refused = len(result["refused"])
        line = f"{engine}: {result['passed']} of {total} exports accepted by its own code, {refused} refused"
        assert line in text, line
