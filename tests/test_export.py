"""Exports to TRL, verl and AReaL: every chapter's experiment exports to each engine (or says why not); the TRL export
loads with TRL's own config classes; each flag cites the engine file it was read from; the header lists what the
engine lacks or computes differently."""
import re
import subprocess

import pytest
import yaml

from rlbook import cli
from rlbook.experiments import SWEEPS, grpo_from_scratch, router_run, stale_run, sweep
from rlbook.export import (AREAL_VERSION, ENGINES, NOT_EXPORTABLE, VERL_VERSION, configs_of, export, export_text)
from rlbook.runs import RunStore
from rlbook.trl_backend import TRL_VERSION

VERSIONS = {"trl": f"TRL {TRL_VERSION}", "verl": f"verl {VERL_VERSION}", "areal": f"AReaL {AREAL_VERSION}"}


def settings(text: str, engine: str) -> dict:
    """The exported keys and values, flattened to dotted keys (verl: the Hydra overrides of its bash array)."""
    if engine == "verl":
        body = text.split("RLBOOK_ARGS=(\n")[1].split("\n)")[0]
        return dict(line.split("#")[0].strip().split("=", 1) for line in body.splitlines())
    flat = {}

    def walk(node, prefix):
        for key, value in node.items():
            if isinstance(value, dict) and key not in ("adv_norm", "rejection_sampling"):
                walk(value, f"{prefix}{key}.")
            else:
                flat[prefix + key] = value
    walk(yaml.safe_load(text), "")
    return flat


def header(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if line.startswith("# "))


@pytest.mark.parametrize("engine", ENGINES)
def test_every_experiment_exports_with_a_source_per_flag(engine, tmp_path):
    experiments = sorted({c.experiment for name in SWEEPS for c in sweep(name, "cpu")})
    for experiment in experiments:
        paths = export(experiment, engine, tmp_path / experiment)
        assert paths, experiment
        for path in paths:
            text = path.read_text()
            assert VERSIONS[engine] in text.splitlines()[0 if engine != "verl" else 1]
            keys = [line for line in text.splitlines() if not line.startswith(("#", "set ", "python3", "RLBOOK", ")"))
                    and "=" in line or re.match(r"^\s*\w+: \S", line)]
            assert keys and all(re.search(r"  # (trl|transformers|peft|verl|areal)/", line) for line in keys), path
            settings(text, engine)  # parses
            if engine == "verl":
                assert subprocess.run(["bash", "-n", str(path)]).returncode == 0


def test_trl_export_loads_with_trls_config_classes():
    from peft import LoraConfig
    from trl import GRPOConfig

    config = grpo_from_scratch("cpu", 0)
    exported = yaml.safe_load(export_text(config, "trl"))
    args = GRPOConfig(output_dir="unused", use_cpu=True, **exported["grpo_config"])
    lora = LoraConfig(**exported["lora_config"])
    assert (args.learning_rate, args.num_generations, args.max_steps) == (config.lr, config.group_size,
                                                                           config.total_updates)
    assert args.per_device_train_batch_size == config.prompts_per_step * config.group_size
    assert (args.loss_type, args.beta, args.epsilon) == ("dapo", 0.0, 0.2)
    assert (lora.r, lora.lora_alpha) == (config.lora_rank, config.lora_alpha)


def test_m2po_and_staleness_map_to_areal_and_are_listed_where_missing():
    config = stale_run("cpu", "m2po", 48)
    areal = export_text(config, "areal")
    values = settings(areal, "areal")
    assert values["actor.m2_threshold"] == 0.04 and values["actor.use_decoupled_loss"] is True
    assert values["rollout.max_head_offpolicyness"] == 48 // 4 and values["actor.ppo_n_minibatches"] == 4
    assert "every response token" in header(areal) and "FIFO" in header(areal)
    for engine in ("trl", "verl"):
        lacks = header(export_text(config, engine)).split("computed differently")[0]
        assert "objective='m2po'" in lacks and "staleness=48" in lacks, engine
    areal_variant = settings(export_text(config.replace(objective="m2po_areal"), "areal"), "areal")
    assert areal_variant["actor.m2_threshold"] == 0.04 and areal_variant["actor.eps_clip"] == 0.2
    assert "denominator" not in header(export_text(config.replace(objective="m2po_areal"), "areal"))
    tested = config.replace(objective="m2po_areal", objective_params={"masked_in_denominator": True})
    assert "masked tokens in the denominator" in header(export_text(tested, "areal")).split("computed differently")[1]


def test_router_replay_maps_to_verl_r3_and_is_missing_elsewhere():
    config = router_run("cpu", "grpo+r3")
    verl = export_text(config, "verl")
    values = settings(verl, "verl")
    assert values["actor_rollout_ref.actor.megatron.router_replay.mode"] == "R3"
    assert values["actor_rollout_ref.rollout.enable_rollout_routing_replay"] == "true"
    assert "--config-name ppo_megatron_trainer" in verl
    for engine in ("trl", "areal"):
        assert "router_replay=True" in header(export_text(config, engine)).split("computed differently")[0]


def test_small_floats_read_back_as_numbers():
    config = grpo_from_scratch("cpu", 0, lr=1e-06)
    values = settings(export_text(config, "areal"), "areal")
    assert values["actor.optimizer.lr"] == 1e-06 and values["actor.adv_norm"]["eps"] == 1e-06
    assert yaml.safe_load(export_text(config, "trl"))["grpo_config"]["learning_rate"] == 1e-06


def test_grpo_without_dual_clip_disables_verls_always_on_dual_clip():
    values = settings(export_text(grpo_from_scratch("cpu", 0), "verl"), "verl")
    assert float(values["actor_rollout_ref.actor.clip_ratio_c"]) >= 1e6
    dual = grpo_from_scratch("cpu", 0, objective_params={"dual_clip": 3.0})
    assert settings(export_text(dual, "verl"), "verl")["actor_rollout_ref.actor.clip_ratio_c"] == "3.0"


def test_what_cannot_be_exported_says_why():
    with pytest.raises(ValueError, match="05_merging cannot be exported: chapter 5 averages checkpoints"):
        configs_of("05_merging", "cpu")
    assert "05_merging" in NOT_EXPORTABLE
    with pytest.raises(ValueError, match="not a run directory, a sweep or an experiment.*02_staleness"):
        configs_of("02_stale", "cpu")


def test_cli_exports_a_run_directory(tmp_path, capsys):
    config = grpo_from_scratch("smoke", 1)
    run = RunStore(tmp_path / "runs").create(config)
    assert cli.main(["export", str(run.path), "--to", "areal", "--out", str(tmp_path / "out")]) == 0
    written = capsys.readouterr().out.split()
    assert len(written) == 1 and "seeds 1)" in open(written[0]).read()
    with pytest.raises(SystemExit) as stop:
        cli.main(["export", str(run.path), "--to", "deepspeed"])
    assert stop.value.code == 2 and "invalid choice: 'deepspeed'" in capsys.readouterr().err
