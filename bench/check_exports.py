"""Read every chapter experiment's exports with each framework's own code, and print how many each framework accepts.

    make setup       # verl and AReaL without their dependencies in .venv/engines (requirements-engines.txt)
    python bench/check_exports.py [--frameworks trl verl areal] [--experiments 01_grpo 02_staleness ...]

TRL: each YAML is parsed by TrlParser with the dataclasses of `trl grpo` (trl/scripts/grpo.py make_parser), unknown
keys refused, and every key must land with its value in the dataclass its comment cites. verl: each bash script runs
with `python3` replaced by a stub that records its arguments; the arguments are composed with verl's Hydra config
tree, every override must land with its value, verl.utils.config.validate_config runs as main_ppo runs it, the
rollout, model (HFModelConfig, on a nano model saved here), algorithm and actor dataclasses are built, and the policy
loss is looked up in verl's registry. AReaL: each YAML is read by areal.api.cli_args.load_expr_config into its
GRPOConfig with the names and paths the header leaves to the reader filled in, every key must land with its value.
For verl and AReaL the leaf of each key must occur in the file its comment cites. A refused export (one line: why)
counts as refused, not as failed. Writes bench/results/check_exports/check_exports-<frameworks>-<commit>-<time>.json;
exit status 1 when any export fails.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.machinery
import json
import operator
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/record.py, when run as a script

ROOT = Path(__file__).resolve().parent.parent
ENGINES_DIR = Path(os.environ.get("RLBOOK_ENGINES", ROOT / ".venv" / "engines"))
# AReaL's stats logger (areal/utils/stats_logger.py) imports three experiment trackers at module level, which
# areal.api.cli_args.load_expr_config and areal.trainer.ppo.actor import; their config and loss code never calls
# them, so they are not installed and empty modules stand in for them while AReaL is imported
TRACKERS = ("wandb", "swanlab", "trackio")


def use_engines() -> None:
    """verl and AReaL importable: their folder (make setup) at the end of sys.path, after rlbook's own packages."""
    if not (ENGINES_DIR / "verl").is_dir():
        raise SystemExit(f"no verl in {ENGINES_DIR}: run `make setup` (pip install --no-deps --target {ENGINES_DIR} "
                         "-r requirements-engines.txt)")
    if str(ENGINES_DIR) not in sys.path:
        sys.path.append(str(ENGINES_DIR))


def import_areal(module: str):
    """An AReaL module, imported with empty stand-ins for the trackers its stats logger imports (removed after)."""
    import transformers.modeling_utils  # noqa: F401  (accelerate looks for trackers on import: before the stand-ins)

    use_engines()
    stand_ins = {name: types.ModuleType(name) for name in TRACKERS if name not in sys.modules}
    for name, stand_in in stand_ins.items():
        stand_in.__spec__ = importlib.machinery.ModuleSpec(name, None)
        sys.modules[name] = stand_in
    try:
        __import__("areal.utils.stats_logger")  # load_expr_config imports it when called
        return __import__(module, fromlist=["_"])
    finally:
        for name in stand_ins:
            sys.modules.pop(name, None)


def leaves_in_cited_files(path: Path, framework: str) -> int:
    """Every key's leaf occurs in the framework file its comment cites (the framework's installed release)."""
    import re

    count = 0
    for line in path.read_text().splitlines():
        found = re.search(r"^\s*\+?([\w.]+)[=:].*  # ((?:verl|areal)/\S+\.(?:py|yaml))", line)
        if found:
            key, cited = found.groups()
            text = (ENGINES_DIR / cited).read_text()
            assert re.search(rf"\b{re.escape(key.rsplit('.', 1)[-1])}\b", text), f"{key} is not in {cited}"
            count += 1
    return count


# ---- TRL --------------------------------------------------------------------------------------------------------

def check_trl(path: Path, _work: Path) -> str:
    import yaml
    from transformers import TrainingArguments
    from trl import GRPOConfig, ModelConfig
    from trl.scripts.grpo import make_parser

    from rlbook.export.trl import GRPO_CONFIG, MODEL_CONFIG, TRAINING_ARGUMENTS

    parsed = make_parser().parse_args_and_config(["--config", str(path)])
    owners = {GRPO_CONFIG: GRPOConfig, TRAINING_ARGUMENTS: TrainingArguments, MODEL_CONFIG: ModelConfig}
    exported = yaml.safe_load(path.read_text())
    cited = dict(line.split("  # ", 1) for line in path.read_text().splitlines() if "  # " in line
                 and not line.startswith("#"))
    for key, value in exported.items():
        got = [getattr(obj, key) for obj in parsed if hasattr(obj, key)]
        assert got and all(g == value for g in got), (key, got, value)
        source = next(s for line, s in cited.items() if line.startswith(f"{key}:"))
        owner = owners[source.split(" ")[0]]
        assert key in owner.__dict__.get("__annotations__", {}), f"{key} is not defined in {source}"
    args = next(obj for obj in parsed if isinstance(obj, GRPOConfig))
    assert args.bf16 is False, "bf16"
    return f"TrlParser (trl grpo), {len(exported)} keys"


# ---- verl -------------------------------------------------------------------------------------------------------

def verl_arguments(path: Path, work: Path) -> list[str]:
    """The arguments the script passes to `python3` (a stub records them)."""
    stub = work / "stub"
    if not (stub / "python3").exists():
        stub.mkdir(exist_ok=True)
        (stub / "python3").write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import json, os, sys; "
                                      "json.dump(sys.argv[1:], open(os.environ[\"ARGV_TO\"], \"w\"))' \"$@\"\n")
        (stub / "python3").chmod(0o755)
    dump = work / "argv.json"
    env = {**os.environ, "PATH": f"{stub}:{os.environ['PATH']}", "ARGV_TO": str(dump),
           "MODEL_PATH": str(nano_model(work))}
    subprocess.run(["bash", str(path)], check=True, env=env)
    return json.loads(dump.read_text())


def nano_model(work: Path) -> Path:
    """A nano Qwen3 with rlbook's character tokenizer, saved as a Hugging Face checkpoint (verl's HFModelConfig reads
    the model's config and tokenizer from the path)."""
    folder = work / "model"
    if not (folder / "config.json").exists():
        from rlbook.models import build_model

        model, tokenizer = build_model("nano-tiny")
        model.config.architectures = [type(model).__name__]
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    return folder


def compose_verl(path: Path, work: Path):
    """(config name, overrides, verl's composed config) of an export script, as main_ppo composes it."""
    use_engines()
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import verl

    argv = verl_arguments(path, work)
    assert argv[:3] == ["-m", "verl.trainer.main_ppo", "--config-name"], argv[:3]
    name, overrides = argv[3], argv[4:]
    GlobalHydra.instance().clear()  # AReaL's parser leaves Hydra initialised
    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        return name, overrides, compose(config_name=name, overrides=overrides)


def check_verl(path: Path, work: Path) -> str:
    name, overrides, cfg = compose_verl(path, work)
    from omegaconf import OmegaConf
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.workers.config import HFModelConfig

    for override in overrides:
        key, value = override.lstrip("+").split("=", 1)
        got = OmegaConf.select(cfg, key)
        assert str(got).lower() == value.lower() or float(got) == float(value), (key, got, value)
    with contextlib.redirect_stdout(None):  # validate_config prints what it checks
        validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    section = cfg.actor_rollout_ref
    actor = omega_conf_to_dataclass(section.actor)
    built = [actor, omega_conf_to_dataclass(section.rollout), omega_conf_to_dataclass(cfg.algorithm),
             omega_conf_to_dataclass(section.model, dataclass_type=HFModelConfig)]
    get_policy_loss_fn(actor.policy_loss.loss_mode)
    cited = leaves_in_cited_files(path, "verl")
    return (f"{name} + {len(overrides)} overrides; validate_config; {', '.join(type(b).__name__ for b in built)}; "
            f"loss {actor.policy_loss.loss_mode}; {cited} keys in their cited files")


# ---- AReaL ------------------------------------------------------------------------------------------------------

def areal_fills(work: Path) -> list[str]:
    """Hydra overrides with stand-ins for what the header leaves to the reader (rlbook.export.areal.READER_SETS)."""
    from rlbook.export.areal import READER_SETS

    stand_ins = {"train_dataset.path": "/data/train.jsonl", "tokenizer_path": "/models/model",
                 "actor.backend": "fsdp:d1", "rollout.backend": "sglang:d1"}
    assert set(stand_ins) == set(READER_SETS), sorted(set(stand_ins) ^ set(READER_SETS))
    return [f"+{key}={value}" for key, value in stand_ins.items()] + [f"+cluster.fileroot={work / 'areal'}"]


def load_areal(path: Path, work: Path):
    """AReaL's GRPOConfig of an export, as its entry points read it (load_expr_config), the reader's part filled."""
    cli_args = import_areal("areal.api.cli_args")
    with contextlib.redirect_stdout(None):
        return cli_args.load_expr_config(["--config", str(path.resolve()), *areal_fills(work)], cli_args.GRPOConfig)[0]


def check_areal(path: Path, work: Path) -> str:
    import yaml

    config = load_areal(path, work)

    def same(exported: dict, obj, prefix: str) -> int:
        count = 0
        for key, value in exported.items():
            got = getattr(obj, key)
            if isinstance(value, dict) and dataclasses.is_dataclass(got):
                count += same(value, got, f"{prefix}{key}.")
            elif isinstance(value, str) and value.startswith("${"):  # an interpolation: the value it names
                assert got == operator.attrgetter(value[2:-1])(config), (prefix + key, got, value)
                count += 1
            else:
                assert got == value or list(got) == value, (prefix + key, got, value)
                count += 1
        return count

    kept = same(yaml.safe_load(path.read_text()), config, "")
    return f"load_expr_config -> GRPOConfig, {kept} keys kept; {leaves_in_cited_files(path, 'areal')} keys in their " \
           "cited files"


CHECKS = {"trl": check_trl, "verl": check_verl, "areal": check_areal}


def check_files(framework: str, files: list[Path], work: Path) -> list[dict]:
    """One row per file: ok, and what was checked or what failed."""
    import warnings

    warnings.filterwarnings("ignore")
    rows = []
    for path in files:
        try:
            rows.append({"file": path.name, "ok": True, "detail": CHECKS[framework](path, work)})
        except Exception as error:  # reported per file: the check goes on with the next
            rows.append({"file": path.name, "ok": False, "detail": f"{type(error).__name__}: {error}"[:2000]})
    return rows


def chapter_experiments() -> list[str]:
    """Every experiment of the chapters' sweeps (the cpu profile), chapter 5's included (it says why it has none)."""
    from rlbook.experiments import SWEEPS, sweep

    return sorted({c.experiment for name in SWEEPS for c in sweep(name, "cpu")})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frameworks", "--engines", dest="frameworks", nargs="+", default=list(CHECKS),
                        choices=list(CHECKS), help="the training frameworks to check (--engines: its older name)")
    parser.add_argument("--experiments", nargs="+", default=None, help="default: every chapter experiment")
    args = parser.parse_args()
    from rlbook.export import FRAMEWORKS, NOT_EXPORTABLE, export

    experiments = args.experiments or chapter_experiments()
    results = {}
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        for framework in args.frameworks:
            outcomes = [o for e in experiments if e not in NOT_EXPORTABLE
                        for o in export(e, framework, work / framework, "cpu")]
            refused = [{"file": o.path.name, "reason": o.reason} for o in outcomes if o.status == "refused"]
            rows = check_files(framework, [o.path for o in outcomes if o.status != "refused"], work)
            results[framework] = {"files": rows, "refused": refused, "passed": sum(r["ok"] for r in rows),
                               "failed": sum(not r["ok"] for r in rows)}
            print(f"{framework}: {results[framework]['passed']} of {len(rows)} exports accepted by its own code, "
                  f"{len(refused)} refused")
            for row in rows:
                if not row["ok"]:
                    print(f"  FAILED {row['file']}: {row['detail']}")
            for row in refused:
                print(f"  refused {row['file']}: {row['reason']}")
    skipped = {e: NOT_EXPORTABLE[e] for e in experiments if e in NOT_EXPORTABLE}
    from record import save_result

    save_result("check_exports", "-".join(args.frameworks), {"experiments": experiments,
                                                             "not_exportable": skipped, "frameworks": FRAMEWORKS,
                                                             "results": results})
    return 0 if all(r["failed"] == 0 for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
