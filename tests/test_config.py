"""RunConfig validation: every wrong key or value is a ValueError naming it (and the choices); hashing; round trip."""
import json
from dataclasses import fields

import pytest

from rlbook.config import RunConfig
from rlbook.models import PRESETS
from rlbook.objectives import OBJECTIVES
from rlbook.tasks import TASKS


def error_of(**values) -> str:
    with pytest.raises(ValueError) as error:
        RunConfig(**values)
    return str(error.value)


def test_defaults_are_valid():
    config = RunConfig()
    assert (config.preset, config.task, config.objective, config.finetune) == ("nano-small", "arithmetic", "grpo", "lora")
    assert config.staleness == 0 and config.group_size == 8


def test_valid_non_defaults():
    config = RunConfig(preset="nano-tiny", task="knights_knaves", task_params={"num_people": 3},
                       objective="m2po", objective_params={"tau": 0.08}, staleness=8, updates_per_step=4,
                       ar_alpha=1.0, lopti_eta=-0.5, fused_ratio="off", finetune="full", group_size=2)
    assert config.objective_params == {"tau": 0.08} and config.staleness == 8


def test_unknown_key_lists_valid_keys():
    with pytest.raises(ValueError) as error:
        RunConfig.from_dict({"stalenes": 4})
    message = str(error.value)
    assert "stalenes" in message
    assert all(f.name in message for f in fields(RunConfig))
    with pytest.raises(ValueError, match="stalenes"):
        RunConfig().replace(stalenes=4)


@pytest.mark.parametrize(
    "field, value, choices",
    [
        ("preset", "nano-huge", list(PRESETS)),
        ("task", "chess", list(TASKS)),
        ("objective", "ppo", list(OBJECTIVES)),
        ("finetune", "qlora", ["lora", "full"]),
        ("fused_ratio", "yes", ["auto", "on", "off"]),
    ],
)
def test_bad_choice_names_value_and_choices(field, value, choices):
    message = error_of(**{field: value})
    assert field in message and repr(value) in message
    assert all(choice in message for choice in choices)


def test_bad_task_params():
    message = error_of(task_params={"digits": 0})
    assert "digits=0" in message
    message = error_of(task="knights_knaves", task_params={"num_people": 9})
    assert "9" in message and "num_people" in message
    assert "colour" in error_of(task_params={"colour": "red"})


@pytest.mark.parametrize(
    "values, named",
    [
        ({"staleness": -1}, "staleness=-1"),
        ({"staleness": 3, "updates_per_step": 2}, "staleness=3"),
        ({"staleness": 6, "updates_per_step": 4}, "updates_per_step=4"),
        ({"group_size": 1}, "group_size=1"),
        ({"group_size": 0}, "group_size=0"),
        ({"prompts_per_step": 6, "updates_per_step": 4}, "prompts_per_step=6"),
        ({"ar_alpha": 1.5}, "ar_alpha=1.5"),
        ({"ar_alpha": -0.1}, "ar_alpha=-0.1"),
        ({"lopti_eta": 1.0}, "lopti_eta=1.0"),
        ({"lopti_eta": -1.0}, "lopti_eta=-1.0"),
        ({"lr": 0.0}, "lr=0.0"),
        ({"total_updates": 0}, "total_updates=0"),
        ({"lora_rank": 0}, "lora_rank=0"),
        ({"temperature": -1.0}, "-1.0"),
        ({"max_grad_norm": 0.0}, "max_grad_norm"),
        ({"init": ""}, "init"),
    ],
)
def test_bad_values_are_named(values, named):
    assert named in error_of(**values)


def test_staleness_multiple_of_updates_per_step():
    assert RunConfig(staleness=8, updates_per_step=4).staleness == 8
    assert RunConfig(staleness=0, updates_per_step=4).staleness == 0
    message = error_of(staleness=2, updates_per_step=4)
    assert "multiple" in message and "updates_per_step=4" in message


def test_staleness_counts_every_update_of_a_batch():
    # a rollout batch feeds updates_per_step x epochs updates
    assert RunConfig(staleness=4, updates_per_step=2, epochs=2).staleness == 4
    message = error_of(staleness=2, updates_per_step=2, epochs=2)
    assert "staleness=2" in message


def test_staleness_message_names_epochs():
    message = error_of(staleness=2, updates_per_step=2, epochs=2)
    assert "epochs" in message and "updates_per_step=4" not in message


@pytest.mark.parametrize("objective, params, bad", [("grpo", {"tau": 0.04}, "tau"),
                                                     ("m2po", {"eps_low": 0.2}, "eps_low"),
                                                     ("no_clip", {"eps_high": 0.3}, "eps_high")])
def test_objective_params_must_apply(objective, params, bad):
    message = error_of(objective=objective, objective_params=params)
    assert bad in message and repr(objective) in message


def test_hash_ignores_name_not_seed():
    base = RunConfig(seed=1, name="a", experiment="x")
    assert len(base.hash()) == 10 and all(c in "0123456789abcdef" for c in base.hash())
    assert base.replace(name="b").hash() == base.hash()
    assert base.replace(experiment="y").hash() == base.hash()
    assert base.replace(seed=2).hash() != base.hash()
    assert base.replace(staleness=4).hash() != base.hash()
    assert base.replace(objective_params={"eps_low": 0.3}).hash() != base.hash()
    assert RunConfig(seed=1).hash() == base.hash()  # stable: a function of the values only
    one = RunConfig(task_params={"digits": (2, 3), "ops": "+*"})
    other = RunConfig(task_params={"ops": "+*", "digits": [2, 3]})  # key order and tuple/list do not matter
    assert one.hash() == other.hash() != RunConfig(task_params={"digits": [2, 4], "ops": "+*"}).hash()


def test_dict_round_trip_through_json():
    config = RunConfig(name="r", seed=7, task="arithmetic", task_params={"digits": [2, 3], "ops": "+*"},
                       objective="tis", objective_params={"tis_cap": 3.0}, staleness=4, updates_per_step=2)
    values = config.to_dict()
    assert values["task_params"] == {"digits": [2, 3], "ops": "+*"} and values["staleness"] == 4
    again = RunConfig.from_dict(json.loads(json.dumps(values)))
    assert again == config and again.hash() == config.hash()
    assert set(values) == {f.name for f in fields(RunConfig)}


def test_replace_validates_and_copies():
    config = RunConfig()
    changed = config.replace(group_size=4)
    assert changed.group_size == 4 and config.group_size == 8
    with pytest.raises(ValueError, match="group_size=1"):
        config.replace(group_size=1)


@pytest.mark.parametrize("values, named", [({"group_size": "8"}, "group_size"), ({"lr": "1e-3"}, "lr"),
                                           ({"task_params": None}, "task_params"), ({"group_size": 2.5}, "group_size"),
                                           ({"objective": "m2po", "objective_params": {"tau": -1.0}}, "tau")])
def test_wrong_types_and_objective_values_are_named(values, named):
    assert named in error_of(**values)


def test_the_modules_config_imports_never_take_a_run_config():
    """A config is checked in one place, rlbook.config: no module it imports imports it back, and the engines, online
    DPO, router replay and the identity rule give it plain facts (no function of theirs takes a config)."""
    import ast
    import importlib
    from pathlib import Path

    import rlbook.config

    def tree(module):
        return ast.parse(Path(module.__file__).read_text())

    imports = [node for node in ast.walk(tree(rlbook.config)) if isinstance(node, ast.ImportFrom) and node.level == 1]
    imported = {node.module or alias.name for node in imports for alias in node.names}
    assert {"engines", "dpo", "router_replay", "identity"} <= imported
    for name in imported:
        module = tree(importlib.import_module(f"rlbook.{name}"))
        back = [node.module for node in ast.walk(module) if isinstance(node, ast.ImportFrom) and node.level
                and (node.module == "config" or any(alias.name in ("config", "RunConfig") for alias in node.names))]
        assert not back, f"rlbook.{name} imports rlbook.config"
    for name in ("engines", "dpo", "router_replay", "identity"):
        functions = [f for f in ast.walk(tree(importlib.import_module(f"rlbook.{name}")))
                     if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
        taking = [f.name for f in functions if "config" in {a.arg for a in f.args.args + f.args.kwonlyargs}]
        assert not taking, f"rlbook.{name}: {taking} take a config"
