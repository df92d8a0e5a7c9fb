"""Fault test: a training run killed with SIGKILL at many random points and resumed each time loses no row and
computes what an uninterrupted run computes; Ctrl-C says where it will resume; every kind of corrupt file is an
error naming it, and nothing is changed.

Each killed process runs the command line's own entry point, `rlbook.cli.main(["train", ...])`, forked from a
forkserver that imported rlbook once: a fresh `python -m rlbook` spends about 7 s importing torch and transformers
on a loaded 2-core machine, and eleven of them would not fit the time budget. The Ctrl-C case runs the real
`python -m rlbook train` command. RLBOOK_THREADS=1 throughout (and one torch thread in this process).
"""
import json
import multiprocessing
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlbook.cli import main
from rlbook.config import RunConfig
from rlbook.obtain import run_or_load
from rlbook.runs import RunStore
from rlbook.trainer import TIMING_KEYS as TIMING

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = dict(experiment="faults", preset="nano-tiny", init="scratch", prompts_per_step=2, group_size=2,
                total_updates=40, eval_every=5, eval_size=4, eval_samples=1, max_new_tokens=4, checkpoint_every=3)
ARGV = ["train", *[arg for key, value in SETTINGS.items() for arg in (f"--{key.replace('_', '-')}", str(value))]]
KILLS = 10

pytestmark = pytest.mark.usefixtures("one_thread")


def without_timing(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


def rows_written(metrics: Path) -> int:
    return metrics.read_bytes().count(b"\n") if metrics.exists() else 0


def kill_at_a_random_point(context, runs: Path, metrics: Path, rng: random.Random) -> int | None:
    """Start a training process and SIGKILL it: during start-up, or a few rows on (plus a random delay, so some
    kills land between a row and its checkpoint). The rows written when it was killed; None if it had finished."""
    process = context.Process(target=main, args=(ARGV + ["--runs-dir", str(runs)],))
    process.start()
    target, deadline = rows_written(metrics) + rng.randint(1, 3), time.time() + rng.uniform(0.0, 0.3)
    during_start = rng.random() < 0.2
    while process.is_alive() and (time.time() < deadline if during_start else rows_written(metrics) < target):
        time.sleep(0.002)
    time.sleep(0 if during_start else rng.uniform(0, 0.03))
    finished, rows = not process.is_alive(), rows_written(metrics)
    process.kill()
    process.join()
    return None if finished else rows


def test_killed_and_resumed_runs_lose_no_row_and_match_an_uninterrupted_run(tmp_path, monkeypatch):
    monkeypatch.setenv("RLBOOK_THREADS", "1")
    config = RunConfig(**SETTINGS)
    reference = run_or_load(config, RunStore(tmp_path / "reference"), progress=False, references=False)
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["rlbook.obtain"])
    runs, rng, killed_at = tmp_path / "killed", random.Random(2026), []
    metrics = runs / "faults" / f"run-{config.hash()}" / "metrics.jsonl"
    while len(killed_at) < KILLS:
        assert not (metrics.parent / "meta.json").exists() or not RunStore(runs).find(config).complete, (
            f"the run finished after {len(killed_at)} kills: make it longer")
        rows = kill_at_a_random_point(context, runs, metrics, rng)
        killed_at += [] if rows is None else [rows]
    assert len(set(killed_at)) >= KILLS // 2, f"the kills hit too few distinct points: {killed_at}"
    last = context.Process(target=main, args=(ARGV + ["--runs-dir", str(runs)],))
    last.start()
    last.join(timeout=120)
    run = RunStore(runs).find(config)
    assert run.complete and [row["update"] for row in run.metrics] == list(range(SETTINGS["total_updates"] + 1))
    assert without_timing(run.metrics) == without_timing(reference.metrics)


def test_ctrl_c_in_the_command_line_says_where_to_resume(tmp_path):
    """SIGINT to a real `python -m rlbook train`: status 130, one line, and the same command resumes from there."""
    argv = [sys.executable, "-m", "rlbook", *ARGV, "--total-updates", "400", "--runs-dir", str(tmp_path)]
    env = {**os.environ, "RLBOOK_THREADS": "1"}
    # A shell without job control starts background jobs with SIGINT ignored, and Python keeps an ignored SIGINT:
    # give the child the default disposition, as a terminal would, so Ctrl-C reaches it wherever the tests run.
    process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    config = RunConfig(**{**SETTINGS, "total_updates": 400})
    metrics = tmp_path / "faults" / f"run-{config.hash()}" / "metrics.jsonl"
    while rows_written(metrics) < 8 and process.poll() is None:
        time.sleep(0.01)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    said = re.fullmatch(r"interrupted at update (\d+); rerun the same command to resume from update (\d+)",
                        err.strip().splitlines()[-1])
    assert said and "Traceback" not in err, err
    run = RunStore(tmp_path).find(config)
    assert int(said[1]) == run.metrics[-1]["update"] and int(said[2]) == run.meta["updates"] > 0


def corrupt(name: str, run_path: Path) -> str:
    """Damage one file of a run the way a crash or a disk could; return what the error must name."""
    path = run_path / name
    if name in ("metrics.parquet", "state.safetensors"):  # binary: cut in half
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        return str(path)
    if name == "metrics.jsonl":
        lines = path.read_text().splitlines(keepends=True)
        lines[len(lines) // 2] = lines[len(lines) // 2][:7] + "\n"
        path.write_text("".join(lines))
        return f"{path} line {len(lines) // 2 + 1}"
    path.write_text(path.read_text()[:-5])
    return str(path)


def snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", ["config.json", "metrics.parquet", "meta.json", "state.safetensors"])
@pytest.mark.parametrize("complete", [True, False])
def test_a_corrupt_file_is_named_and_nothing_changes(tmp_path, capsys, name, complete):
    """The same command on a damaged run (finished, or interrupted and to be resumed) is one error naming the
    file (and line); every file stays as it was."""
    config = RunConfig(**{**SETTINGS, "total_updates": 6, "checkpoint_every": 2})
    run = run_or_load(config, RunStore(tmp_path), progress=False, references=False)
    if not complete:
        run.update_meta(complete=False)
    named = corrupt(name, run.path)
    before = snapshot(tmp_path)
    argv = ARGV + ["--total-updates", "6", "--checkpoint-every", "2", "--runs-dir", str(tmp_path)]
    status = main(argv)
    err = capsys.readouterr().err
    if name == "state.safetensors" and complete:  # a finished run replays from its rows: the checkpoint is not read
        assert status == 0
    else:
        assert status == 2 and named in err and len(err.splitlines()) == 1, err
    listing = main(["runs", "--runs-dir", str(tmp_path)])
    err = capsys.readouterr().err
    if name in ("config.json", "metrics.parquet", "meta.json"):
        assert listing == 2 and named.split(" line ")[0] in err, err
    assert snapshot(tmp_path) == before


def test_resume_requires_every_row_up_to_the_checkpoint(tmp_path, capsys):
    config = RunConfig(**{**SETTINGS, "total_updates": 6, "checkpoint_every": 2})
    run = run_or_load(config, RunStore(tmp_path), progress=False, references=False)
    run.update_meta(complete=False)
    rows = run.metrics
    (run.path / "metrics.parquet").unlink()  # back to a journal of rows 0-2 of 0-6; the checkpoint is at 6
    (run.path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows[:3]))
    before = snapshot(tmp_path)
    status = main(ARGV + ["--total-updates", "6", "--checkpoint-every", "2", "--runs-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 2 and "lacks the rows of updates [3, 4, 5, 6]" in err, err
    assert snapshot(tmp_path) == before


def test_a_checkpoint_of_another_model_is_refused(tmp_path, capsys):
    """Strict state keys: a checkpoint whose trainable weights are not this model's names the missing keys."""
    config = RunConfig(**{**SETTINGS, "total_updates": 4, "checkpoint_every": 2})
    run = run_or_load(config, RunStore(tmp_path), progress=False, references=False)
    run.update_meta(complete=False)
    state = run.read_state()
    dropped = sorted(state["model"])[0]
    del state["model"][dropped]
    run.write_state(state)
    before = snapshot(tmp_path)
    status = main(ARGV + ["--total-updates", "4", "--checkpoint-every", "2", "--runs-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 2 and "missing keys" in err and dropped in err and str(run.path / "state.safetensors") in err, err
    assert snapshot(tmp_path) == before
