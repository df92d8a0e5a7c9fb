"""The training loop resolves the RunConfig once (rlbook.trainer.train); nothing below the loop receives one.

By inspection: no function, method or class of a module below the loop takes a parameter named `config` or annotated
RunConfig, and no such module imports rlbook.config.
"""
import ast
import importlib
import inspect
from pathlib import Path

import pytest

BELOW_THE_LOOP = ("advantages", "evaluate", "objectives", "objective_inputs", "token_stats", "staleness",
                  "semi_online", "losspath", "rollout")


def config_parameters(module) -> list[str]:
    """'function(parameter)' for every parameter named config or annotated RunConfig in the module's own code."""
    found = []
    for name, member in vars(module).items():
        if getattr(member, "__module__", None) != module.__name__:
            continue  # imported from elsewhere
        callables = [member] if inspect.isfunction(member) else []
        if inspect.isclass(member):
            callables = [f for f in vars(member).values() if inspect.isfunction(f)]
        for function in callables:
            for parameter in inspect.signature(function).parameters.values():
                if parameter.name == "config" or "RunConfig" in str(parameter.annotation):
                    found.append(f"{function.__qualname__}({parameter.name})")
    return found


def imports_config(module) -> bool:
    tree = ast.parse(inspect.getsource(module))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] == "config":
            return True
        if isinstance(node, ast.Import) and any(alias.name == "rlbook.config" for alias in node.names):
            return True
    return False


@pytest.mark.parametrize("name", BELOW_THE_LOOP)
def test_no_module_below_the_loop_takes_a_run_config(name):
    module = importlib.import_module(f"rlbook.{name}")
    assert config_parameters(module) == [], f"rlbook.{name} takes a RunConfig"
    assert not imports_config(module), f"rlbook.{name} imports rlbook.config"


def test_the_inspection_finds_a_config_parameter():
    """The check can fail: the trainer, above the loop, takes the config."""
    import rlbook.trainer

    assert "train(config)" in config_parameters(rlbook.trainer)


def test_the_loop_chapter_1_shows_is_between_its_markers_in_two_screens():
    """Chapter 1 includes rlbook/trainer.py after `loop-begin` and before `loop-end` (literalinclude start-after /
    end-before find a marker's first occurrence in the file): each marker once in the file, in train, around every
    stage of the update."""
    import rlbook.trainer

    text, source = Path(rlbook.trainer.__file__).read_text(), inspect.getsource(rlbook.trainer.train)
    assert text.count("loop-begin") == text.count("loop-end") == 1
    assert source.count("# loop-begin\n") == 1 and source.count("# loop-end\n") == 1
    loop = source.split("# loop-begin\n")[1].split("# loop-end\n")[0]
    assert len(loop.splitlines()) <= 60
    for stage in ("queue.next_batch(", "group_advantages(", "train_update(", "run.append(", "save_state("):
        assert stage in loop, stage
