"""Load every verl and AReaL export with the engine's own config code (a check, not a CI test: neither installs beside
rlbook's pins, so their config code goes into a separate folder, without their dependencies).

    pip install --no-deps -t /tmp/engines verl==0.9.1 areal==1.0.4 hydra-core==1.3.8 omegaconf antlr4-python3-runtime==4.9.3 \
        uvloop aiohttp multidict yarl propcache aiohappyeyeballs aiosignal frozenlist colorlog flask blinker \
        itsdangerous torchdata ray msgpack numba llvmlite orjson einops aiofiles openai sniffio jiter
    python bench/check_exports.py --engines-dir /tmp/engines

verl: each export script runs with `python3` replaced by a stub that records its arguments; the arguments are composed
with verl's own Hydra config tree (verl/trainer/config, the config name the script names), and every override must
land with its value. AReaL: each YAML is parsed by AReaL's own parser (areal.api.cli_args.parse_cli_args,
to_structured_cfg) into its GRPOConfig dataclass, with the fields every AReaL experiment must name itself (names,
file root, dataset, backends) filled in, and every exported key must land with its value.
Writes bench/results/check_exports/check_exports-<engines>-<commit>-<time>.json.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/record.py, when run as a script

EXPERIMENTS = ("01_grpo", "02_staleness", "02_fast_drift", "02_slow_drift", "04_lopti", "06_router_replay",
               "07_semi_online")
# what every AReaL experiment names for itself (the machine's and the data's, never the run's)
AREAL_OWN = ["+experiment_name=rlbook", "+trial_name=check", "+cluster.fileroot=/tmp/areal_fileroot",
             "+train_dataset.path=/data/train.jsonl", "+train_dataset.type=rl", "+tokenizer_path=/models/model",
             "+rollout.backend=sglang:d4", "+actor.backend=fsdp:d4"]
AREAL_NAMES = {"experiment_name": "rlbook", "trial_name": "check", "fileroot": "/tmp/areal_fileroot"}


def check_verl(path: Path, stub_dir: Path) -> str:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    import verl_config_dir

    with tempfile.NamedTemporaryFile(suffix=".json") as dump:
        env = {**os.environ, "PATH": f"{stub_dir}:{os.environ['PATH']}", "ARGV_TO": dump.name,
               "MODEL_PATH": "/models/model"}
        subprocess.run(["bash", str(path)], check=True, env=env)
        argv = json.loads(Path(dump.name).read_text())
    assert argv[:3] == ["-m", "verl.trainer.main_ppo", "--config-name"], argv[:3]
    name, overrides = argv[3], argv[4:]
    with initialize_config_dir(config_dir=verl_config_dir.PATH, version_base=None):
        cfg = compose(config_name=name, overrides=overrides)
    for override in overrides:
        key, value = override.split("=", 1)
        got = OmegaConf.select(cfg, key)
        assert str(got).lower() == value.lower() or float(got) == float(value), (key, got, value)
    return f"{name} + {len(overrides)} overrides"


def check_areal(path: Path) -> str:
    import yaml
    from omegaconf import OmegaConf
    from areal.api.cli_args import GRPOConfig, parse_cli_args, to_structured_cfg

    cfg, _ = parse_cli_args(["--config", str(path), *AREAL_OWN])
    OmegaConf.set_struct(cfg, False)
    for f in dataclasses.fields(GRPOConfig):  # every section that needs the experiment's names and file root
        section = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        if section is not None and dataclasses.is_dataclass(section):
            names = {g.name for g in dataclasses.fields(section)}
            cfg = OmegaConf.merge(cfg, {f.name: {k: v for k, v in AREAL_NAMES.items() if k in names}})
    config = OmegaConf.to_object(to_structured_cfg(cfg, config_cls=GRPOConfig))
    assert isinstance(config, GRPOConfig)

    def same(exported: dict, obj, prefix: str) -> int:
        count = 0
        for key, value in exported.items():
            got = getattr(obj, key)
            if isinstance(value, dict) and dataclasses.is_dataclass(got):
                count += same(value, got, f"{prefix}{key}.")
            else:
                assert got == value or list(got) == value, (prefix + key, got, value)
                count += 1
        return count

    return f"GRPOConfig, {same(yaml.safe_load(path.read_text()), config, '')} keys"


def child(engine: str, files: list[str], stub_dir: str) -> None:
    """In the engines' folder: check each file, one JSON line per file."""
    import warnings

    warnings.filterwarnings("ignore")
    for name in files:
        try:
            detail = check_verl(Path(name), Path(stub_dir)) if engine == "verl" else check_areal(Path(name))
            print(json.dumps({"file": Path(name).name, "ok": True, "detail": detail}))
        except Exception as error:  # reported per file: the check goes on with the next
            print(json.dumps({"file": Path(name).name, "ok": False, "detail": f"{type(error).__name__}: {error}"}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines-dir", required=True, help="folder holding verl's and AReaL's packages (no deps)")
    parser.add_argument("--child", choices=["verl", "areal"], help=argparse.SUPPRESS)
    parser.add_argument("--stub-dir", help=argparse.SUPPRESS)
    parser.add_argument("files", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.files, args.stub_dir)
        return 0
    from rlbook.export import AREAL_VERSION, VERL_VERSION, export

    results = {}
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        stub = work / "stub"
        stub.mkdir()
        (stub / "python3").write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import json, os, sys; "
                                      "json.dump(sys.argv[1:], open(os.environ[\"ARGV_TO\"], \"w\"))' \"$@\"\n")
        (stub / "python3").chmod(0o755)
        (work / "verl_config_dir.py").write_text(
            f"PATH = {str(Path(args.engines_dir) / 'verl' / 'trainer' / 'config')!r}\n")
        for engine in ("verl", "areal"):
            files = [str(p) for e in EXPERIMENTS for p in export(e, engine, work / engine)]
            env = {**os.environ, "PYTHONPATH": f"{args.engines_dir}:{work}"}
            out = subprocess.run([sys.executable, __file__, "--engines-dir", args.engines_dir, "--child", engine,
                                  "--stub-dir", str(stub), *files], env=env, capture_output=True, text=True, check=True)
            rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
            results[engine] = {"version": VERL_VERSION if engine == "verl" else AREAL_VERSION, "files": rows,
                               "passed": sum(r["ok"] for r in rows), "failed": sum(not r["ok"] for r in rows)}
            print(f"{engine}: {results[engine]['passed']} of {len(rows)} exports load with its own config code")
            for row in rows:
                if not row["ok"]:
                    print(f"  {row['file']}: {row['detail']}")
    from record import save_result

    save_result("check_exports", "verl-areal", {"experiments": EXPERIMENTS, "results": results})
    return 0 if all(r["failed"] == 0 for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
