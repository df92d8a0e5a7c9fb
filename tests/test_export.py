"""Exports to TRL, verl and AReaL: every chapter's experiment exports to each engine or is refused in one line; each
key cites the engine file it lives in; the header states precision, length unit, what the reader sets, what the engine
lacks or computes differently; the fixes of issue 39 hold (the engines' own code reads them in
tests/test_engine_exports.py); an export never overwrites a file that differs."""
import re
import subprocess

import pytest
import yaml

from rlbook import cli
from rlbook.experiments import SWEEPS, grpo_from_scratch, router_run, semi_online_run, stale_run, sweep
from rlbook.export import (AREAL_VERSION, FRAMEWORKS, NOT_EXPORTABLE, VERL_VERSION, Refused, configs_of, export,
                           export_text)
from rlbook.runs import RunStore
from rlbook.trl_backend import TRL_VERSION

VERSIONS = {"trl": f"TRL {TRL_VERSION}", "verl": f"verl {VERL_VERSION}", "areal": f"AReaL {AREAL_VERSION}"}


def settings(text: str, engine: str) -> dict:
    """The exported keys and values, flattened to dotted keys (verl: the Hydra overrides of its bash array)."""
    if engine == "verl":
        body = text.split("RLBOOK_ARGS=(\n")[1].split("\n)")[0]
        return dict(line.split("  # ")[0].strip().lstrip("+").split("=", 1) for line in body.splitlines())
    flat = {}

    def walk(node, prefix):
        for key, value in node.items():
            if isinstance(value, dict) and key not in ("reward_norm", "rejection_sampling"):
                walk(value, f"{prefix}{key}.")
            else:
                flat[prefix + key] = value
    walk(yaml.safe_load(text), "")
    return flat


def header(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if line.startswith("# "))


@pytest.mark.parametrize("engine", FRAMEWORKS)
def test_every_experiment_exports_or_is_refused_in_one_line(engine, tmp_path):
    experiments = sorted({c.experiment for name in SWEEPS for c in sweep(name, "cpu")} - set(NOT_EXPORTABLE))
    for experiment in experiments:
        outcomes = export(experiment, engine, tmp_path / experiment)
        assert outcomes, experiment
        for outcome in outcomes:
            if outcome.status == "refused":
                assert "\n" not in outcome.reason and outcome.reason.startswith("objective='dpo'")
                assert not outcome.path.exists()
                continue
            text = outcome.path.read_text()
            assert VERSIONS[engine] in text.splitlines()[0 if engine != "verl" else 1]
            keys = [line for line in text.splitlines() if not line.startswith(("#", "set ", "python3", "RLBOOK", ")"))
                    and "=" in line or re.match(r"^\s*\w+: \S", line)]
            assert keys and all(re.search(r"  # (trl|transformers|verl|areal|rlbook)/", line) for line in keys), \
                outcome.path
            for needed in ("precision: rlbook trains in float32", "yours to set:", "lacks:", "computed differently"):
                assert needed in header(text), (outcome.path, needed)
            settings(text, engine)  # parses
            if engine == "verl":
                assert subprocess.run(["bash", "-n", str(outcome.path)]).returncode == 0


@pytest.mark.parametrize("engine", FRAMEWORKS)
def test_online_dpo_is_refused_with_the_reason(engine, tmp_path):
    config = semi_online_run("cpu", "dpo", 10)
    with pytest.raises(Refused, match=r"^objective='dpo' \(online DPO on the best and worst of 8 samples"):
        export_text(config, engine)
    grpo = semi_online_run("cpu", "grpo", 10)
    assert "sync_every=10" in header(export_text(grpo, engine))


def test_trl_is_one_flat_yaml_without_bf16_each_key_citing_its_dataclass():
    text = export_text(grpo_from_scratch("cpu", 0), "trl")
    values = yaml.safe_load(text)
    assert not any(isinstance(v, dict) for v in values.values())  # TrlParser reads flat keys
    assert values["bf16"] is False and values["dtype"] == "float32"
    assert (values["use_peft"], values["lora_r"], values["lora_alpha"]) == (True, 16, 32)
    assert isinstance(values["lora_alpha"], int)
    cited = dict(re.findall(r"^(\w+): .*  # (\S+)", text, flags=re.M))
    assert cited["learning_rate"] == "trl/trainer/grpo_config.py"  # GRPOConfig redefines it
    assert cited["max_steps"] == cited["seed"] == "transformers/training_args.py"
    assert cited["lora_r"] == "trl/trainer/model_config.py"
    assert "bf16: false" in text and "dataset_name" in header(text) and "reward_funcs" in header(text)


def test_verl_writes_what_its_validation_needs():
    values = settings(export_text(grpo_from_scratch("cpu", 0), "verl"), "verl")
    assert values["actor_rollout_ref.model.lora_alpha"] == "32"  # an integer, as HFModelConfig types it
    assert values["actor_rollout_ref.rollout.name"] == "sglang"
    assert values["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == \
        values["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"] == str(32 * 8)
    assert values["actor_rollout_ref.actor.fsdp_config.dtype"] == values["actor_rollout_ref.rollout.dtype"] == "float32"


def test_verl_runs_rlbooks_m2po_and_ar_through_its_registry():
    values = settings(export_text(stale_run("cpu", "m2po", 48, objective_params={"tau": 0.02}), "verl"), "verl")
    assert values["actor_rollout_ref.actor.policy_loss.loss_mode"] == "rlbook_m2po"
    assert values["actor_rollout_ref.actor.policy_loss._target_"] == \
        "rlbook.engine_plugins.verl_losses.RlbookPolicyLossConfig"
    assert values["actor_rollout_ref.actor.policy_loss.tau"] == "0.02"
    assert values["actor_rollout_ref.model.external_lib"] == "rlbook.engine_plugins.verl_losses"


def test_areal_normalises_rewards_per_group_and_keeps_behaviour_logprobs():
    grpo = settings(export_text(stale_run("cpu", "grpo", 48), "areal"), "areal")
    assert grpo["actor.reward_norm"] == {"mean_level": "group", "std_level": "group", "group_size": 8, "eps": 1e-06}
    assert grpo["actor.adv_norm"] is None
    assert grpo["actor.recompute_logprob"] is False and grpo["actor.use_decoupled_loss"] is False
    assert grpo["rollout.use_lora"] and grpo["sglang.enable_lora"] and grpo["vllm.enable_lora"]
    assert grpo["sglang.max_lora_rank"] == grpo["actor.lora_rank"] == 16
    m2po = settings(export_text(stale_run("cpu", "m2po", 48), "areal"), "areal")
    assert m2po["actor.m2_threshold"] == 0.04 and m2po["actor.use_decoupled_loss"] is True
    assert m2po["actor.recompute_logprob"] is True
    assert m2po["actor.rejection_sampling"]["action"] == "clamp"  # AReaL applies pi_prox / pi_behave only through it
    assert m2po["rollout.max_head_offpolicyness"] == 48 // 4 and m2po["actor.ppo_n_minibatches"] == 4
    differs = header(export_text(stale_run("cpu", "m2po", 48), "areal")).split("computed differently")[1]
    assert "every response token" in differs and "FIFO" in differs and "on rlbook's toy batch" in differs
    assert "on rlbook's toy batch" in header(export_text(stale_run("cpu", "gspo", 48), "areal"))


def test_trl_and_verl_list_what_they_lack():
    config = stale_run("cpu", "m2po", 48)
    trl = header(export_text(config, "trl")).split("computed differently")[0]
    assert "objective='m2po'" in trl and "staleness=48" in trl and "M2POTrainer" in trl
    verl = header(export_text(config, "verl")).split("computed differently")[0]
    assert "staleness=48" in verl and "objective='m2po'" not in verl  # rlbook's own loss runs in verl


def test_router_replay_maps_to_verl_r3_and_is_missing_elsewhere():
    config = router_run("cpu", "grpo+r3")
    verl = export_text(config, "verl")
    values = settings(verl, "verl")
    assert values["actor_rollout_ref.actor.megatron.router_replay.mode"] == "R3"
    assert values["actor_rollout_ref.rollout.enable_rollout_routing_replay"] == "true"
    assert "--config-name ppo_megatron_trainer" in verl and "Megatron actor trains in bfloat16" in header(verl)
    for engine in ("trl", "areal"):
        assert "router_replay=True" in header(export_text(config, engine)).split("computed differently")[0]


def test_lengths_are_stated_in_their_unit():
    for engine in FRAMEWORKS:
        assert "character tokens" in header(export_text(grpo_from_scratch("cpu", 0), engine)), engine


def test_small_floats_read_back_as_numbers():
    config = grpo_from_scratch("cpu", 0, lr=1e-06)
    values = settings(export_text(config, "areal"), "areal")
    assert values["actor.optimizer.lr"] == 1e-06 and values["actor.reward_norm"]["eps"] == 1e-06
    assert yaml.safe_load(export_text(config, "trl"))["learning_rate"] == 1e-06


def test_grpo_without_dual_clip_disables_verls_always_on_dual_clip():
    values = settings(export_text(grpo_from_scratch("cpu", 0), "verl"), "verl")
    assert float(values["actor_rollout_ref.actor.clip_ratio_c"]) >= 1e6
    dual = grpo_from_scratch("cpu", 0, objective_params={"dual_clip": 3.0})
    assert settings(export_text(dual, "verl"), "verl")["actor_rollout_ref.actor.clip_ratio_c"] == "3.0"


def test_a_non_integer_lora_alpha_is_refused():
    with pytest.raises(Refused, match="lora_alpha=16.5: verl takes an integer LoRA alpha"):
        export_text(grpo_from_scratch("cpu", 0, lora_alpha=16.5), "verl")


def test_what_cannot_be_exported_says_why():
    with pytest.raises(ValueError, match="05_merging cannot be exported: chapter 5 averages checkpoints"):
        configs_of("05_merging", "cpu")
    with pytest.raises(ValueError, match="not a run directory, a sweep or an experiment.*02_staleness"):
        configs_of("02_stale", "cpu")
    with pytest.raises(ValueError, match="choose one of: trl, verl, areal"):
        export_text(grpo_from_scratch("cpu", 0), "deepspeed")


def test_an_export_never_overwrites_a_file_that_differs(tmp_path):
    first = export("01_grpo", "areal", tmp_path)
    assert [o.status for o in first] == ["written"]
    assert [o.status for o in export("01_grpo", "areal", tmp_path)] == ["unchanged"]
    path = first[0].path
    edited = path.read_text() + "# my edit\n"
    path.write_text(edited)
    with pytest.raises(ValueError, match=r"1 file\(s\) .* differ from this export .*01_grpo-grpo-cpu.areal.yaml; "
                                         r"nothing was written: pass --overwrite"):
        export("01_grpo", "areal", tmp_path)
    assert path.read_text() == edited
    assert [o.status for o in export("01_grpo", "areal", tmp_path, overwrite=True)] == ["replaced"]
    assert path.read_text() != edited


def test_cli_exports_says_what_it_did(tmp_path, capsys):
    config = grpo_from_scratch("smoke", 1)
    run = RunStore(tmp_path / "runs").create(config)
    out = str(tmp_path / "out")
    assert cli.main(["export", str(run.path), "--to", "areal", "--out", out]) == 0
    status, path = capsys.readouterr().out.split()
    assert status == "written" and "seeds 1)" in open(path).read()
    open(path, "a").write("# edited\n")
    assert cli.main(["export", str(run.path), "--to", "areal", "--out", out]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert cli.main(["export", str(run.path), "--to", "areal", "--out", out, "--overwrite"]) == 0
    assert capsys.readouterr().out.split()[0] == "replaced"
    refused = [o for o in export("07_semi_online", "verl", tmp_path / "direct") if o.status == "refused"]
    assert refused and all("-dpo-" in o.path.name for o in refused)  # verl has no DPO: each DPO setting is refused
    assert cli.main(["export", "07_semi_online", "--to", "verl", "--out", out]) == 0
    assert sum(line.startswith("refused ") for line in capsys.readouterr().out.splitlines()) == len(refused)
    with pytest.raises(SystemExit) as stop:
        cli.main(["export", str(run.path), "--to", "deepspeed"])
    assert stop.value.code == 2 and "invalid choice: 'deepspeed'" in capsys.readouterr().err
