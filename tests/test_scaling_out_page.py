"""The "Scaling out" appendix: every flag an export sets is in its concept map, and the worked examples name files
and values the exports really write."""
import re
from pathlib import Path

import yaml

from rlbook.experiments import grpo_from_scratch, router_run, stale_run
from rlbook.export import EXPORTERS, export

PAGE = Path(__file__).resolve().parent.parent / "book" / "scaling_out.md"
REPRESENTATIVE = [grpo_from_scratch("cpu", 0), stale_run("cpu", "m2po", 48), stale_run("cpu", "tis", 48),
                  stale_run("cpu", "gspo", 48), router_run("cpu", "grpo+r3"),
                  grpo_from_scratch("cpu", 0, objective_params={"dual_clip": 3.0})]


def test_every_exported_flag_is_in_the_concept_map():
    text = PAGE.read_text()
    fenced = re.findall(r"```.*?```", text, flags=re.S)  # code blocks, then the inline code of the prose
    spans = fenced + re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    named = {word for span in spans for word in re.findall(r"[A-Za-z_][\w.]*", span)}
    leaves = {name.rsplit(".", 1)[-1] for name in named}
    for engine, exporter in EXPORTERS.items():
        for config in REPRESENTATIVE:
            for key in exporter(config).values:
                assert key.rsplit(".", 1)[-1] in leaves, f"{engine}: {key} is exported but not in {PAGE.name}"


def test_worked_examples_name_real_files_and_values(tmp_path):
    text = PAGE.read_text()
    trl = [o.path for o in export("01_grpo", "trl", tmp_path)]
    areal = [o.path for o in export("02_staleness", "areal", tmp_path)]
    verl = [o.path for o in export("06_router_replay", "verl", tmp_path)]
    for path in (trl[0], *areal, *verl):
        assert path.parent == tmp_path
    names = {p.name for p in trl + areal + verl}
    for mentioned in re.findall(r"exports/([\w.+-]+\.(?:yaml|sh))", text):
        assert mentioned in names, mentioned
    m2po = yaml.safe_load((tmp_path / "02_staleness-m2po-s48-cpu.areal.yaml").read_text())
    for key, value in (("m2_threshold", m2po["actor"]["m2_threshold"]),
                       ("ppo_n_minibatches", m2po["actor"]["ppo_n_minibatches"]),
                       ("max_head_offpolicyness", m2po["rollout"]["max_head_offpolicyness"])):
        assert f"{key}: {value}`" in text, key
    r3 = (tmp_path / "06_router_replay-grpo+r3-cpu.verl.sh").read_text()
    for override in re.findall(r"`(actor_rollout_ref\.[\w.]+=\w+)`", text.split("R3 run on verl")[1]):
        assert override in r3, override
