"""Every bad input gets one clear line: what was wrong and the valid choices, exit status 2, no traceback, and no
run directory or model made; --help explains every flag; Ctrl-C says where to resume (exit status 130)."""
import json
import signal
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

import pytest

import rlbook.memory
import rlbook.obtain
from rlbook.cli import main
from rlbook.config import FIELD_HELP, RunConfig
from rlbook.pretrain import FROM_RUN, WarmStartConfig

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--preset", "nano-tiny", "--init", "scratch", "--prompts-per-step", "4", "--group-size", "4",
        "--total-updates", "2", "--eval-size", "4", "--max-new-tokens", "4", "--checkpoint-every", "1"]


def run_cli(capsys, *argv) -> tuple[int, str]:
    """(exit status, stderr) of the command line, whether argparse exits or main returns."""
    try:
        status = main(list(argv))
    except SystemExit as exit:
        status = exit.code
    return status, capsys.readouterr().err


@pytest.fixture
def no_model(monkeypatch):
    """Training (the only step that loads a model) fails the test: every check must come before it."""
    monkeypatch.setattr(rlbook.obtain.trainer, "train", lambda *a, **k: pytest.fail("a bad input reached training"))


@pytest.mark.parametrize("argv, named", [
    (["--task-params", '{"digits": "x"}'], "task_params"),
    (["--task-params", '{"digits": [1.5, 2]}'], "task_params"),
    (["--task-params", "x"], "--task-params"),
    (["--task-params", "[1, 2]"], "--task-params"),
    (["--warm-start", '{"bogus": 1}'], "max_steps"),  # the valid keys
    (["--warm-start", '{"lr": "fast"}'], "warm_start.lr"),
    (["--warm-start", '{"preset": "nano-base"}'], "warm_start"),
    (["--objective-params", '{"tau": 0.1}'], "objective_params"),
    (["--init", "/no/such/checkpoint"], "init"),
    (["--init", '{"/": null}'], "init"),  # not a directory, and no valid hub id either (found by the fuzz)
    (["--init", "a\x00b"], "init"),  # found by the fuzz
    (["--objective", "ppo"], "m2po"),  # the choices
    (["--preset", "nano-huge"], "nano-base"),
    (["--staleness", "x"], "--staleness"),
    (["--lr", "nan"], "lr"),
    (["--seed", "-1"], "seed"),
    (["--name", "../elsewhere"], "name"),
    (["--experiment", "warmstart"], "experiment"),
    (["--normalize-adv-std", "maybe"], "--normalize-adv-std"),
    (["--stalenes", "4"], "--stalenes"),
])
def test_bad_input_is_one_line_with_status_2_and_makes_nothing(capsys, tmp_path, no_model, argv, named):
    status, err = run_cli(capsys, "train", "--runs-dir", str(tmp_path), *TINY, *argv)
    assert status == 2
    assert err.count("\n") == 1 and "Traceback" not in err and named in err, err
    assert list(tmp_path.iterdir()) == []


def test_fused_ratio_on_without_a_gpu_is_refused_before_training(capsys, tmp_path, no_model, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET")  # the interpreter (tests only) would run the kernel on the CPU
    status, err = run_cli(capsys, "train", "--runs-dir", str(tmp_path), *TINY, "--fused-ratio", "on")
    assert status == 2 and "fused_ratio='on' needs a CUDA GPU" in err and "'off'" in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_bad_sweep_and_profile_name_the_choices(capsys):
    status, err = run_cli(capsys, "sweep", "chess")
    assert status == 2 and "staleness" in err and err.count("\n") == 1
    status, err = run_cli(capsys, "sweep", "grpo", "--profile", "huge")
    assert status == 2 and "standard" in err and err.count("\n") == 1


def test_corrupt_meta_json_names_the_file_in_runs(capsys, tmp_path):
    from rlbook.runs import RunStore

    run = RunStore(tmp_path).create(RunConfig(experiment="e", preset="nano-tiny"))
    (run.path / "meta.json").write_text('{"complete": tru')
    status, err = run_cli(capsys, "runs", "--runs-dir", str(tmp_path))
    assert status == 2 and str(run.path / "meta.json") in err and "Traceback" not in err


def test_warm_start_keys_error_lists_the_valid_keys():
    with pytest.raises(ValueError) as error:
        RunConfig(warm_start={"max_step": 5})
    valid = [f.name for f in fields(WarmStartConfig) if f.name not in FROM_RUN]
    assert "max_step" in str(error.value) and all(key in str(error.value) for key in valid)


def test_every_config_field_has_one_line_of_help():
    assert set(FIELD_HELP) == {f.name for f in fields(RunConfig)}
    assert all(text and "\n" not in text and len(text) < 200 for text in FIELD_HELP.values())


def test_help_explains_every_flag(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = "".join(capsys.readouterr().out.split())  # argparse wraps lines: compare without whitespace
    for f in fields(RunConfig):
        assert f"--{f.name.replace('_', '-')}" in text
        assert "".join(FIELD_HELP[f.name].split()) in text, f.name


def test_ctrl_c_says_where_to_resume(capsys, tmp_path, monkeypatch):
    """The CLI turns Ctrl-C into one line and status 130; in Python the KeyboardInterrupt propagates as usual."""
    def interrupted_training(config, run, progress=True):
        for update in range(4):
            run.append({"update": update})
        (run.path / "state.pt").write_bytes(b"a checkpoint")
        run.update_meta(updates=2)
        raise KeyboardInterrupt

    monkeypatch.setattr(rlbook.obtain.trainer, "train", interrupted_training)
    status, err = run_cli(capsys, "train", "--runs-dir", str(tmp_path), *TINY, "--name", "a")
    assert status == 130 and err.startswith("estimate: ")
    last = err.splitlines(keepends=True)[-1]
    assert last == "interrupted at update 3; rerun the same command to resume from update 2\n"
    config = RunConfig.from_dict({"preset": "nano-tiny", "init": "scratch", "name": "b", "seed": 1})
    with pytest.raises(KeyboardInterrupt):
        rlbook.obtain.run_or_load(config, rlbook.obtain.RunStore(tmp_path), progress=False, references=False)


def test_every_flag_round_trips_to_the_config():
    """The flags are the fields: a value given on the command line reaches the RunConfig unchanged."""
    from rlbook.cli import _config_from, _parser

    args = _parser().parse_args(["train", "--task-params", json.dumps({"digits": [1, 2]}), "--lr", "0.01",
                                 "--normalize-adv-std", "false"])
    config = _config_from(args)
    assert config.task_params == {"digits": [1, 2]} and config.lr == 0.01 and config.normalize_adv_std is False


@pytest.mark.parametrize("gpu, flags, expected", [(True, [], "cuda"), (True, ["--device", "cpu"], "cpu"),
                                                   (False, [], "cpu")])
def test_train_computes_on_the_gpu_when_torch_sees_one(monkeypatch, capsys, gpu, flags, expected):
    """Without --device, `train` takes the GPU torch sees and says so; --device cpu keeps it on the CPU."""
    import torch

    from rlbook.cli import _config_from, _on_the_gpu_if_present, _parser

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "Test GPU")
    config = _config_from(_on_the_gpu_if_present(_parser().parse_args(["train", *flags])))
    assert config.device == expected
    assert ("pass --device cpu" in capsys.readouterr().err) == (expected == "cuda" and not flags)


@pytest.fixture
def sixteen_gb(monkeypatch):
    """A machine with 16 GB free (what is refused must not depend on the machine running the test)."""
    monkeypatch.setattr(rlbook.memory, "host_available", lambda: 16e9)


@pytest.mark.parametrize("argv, named", [
    (["--group-size", "1000000"], "group_size"),  # its KV cache and sampling graph: thousands of GB
    (["--lora-rank", "1000000"], "lora_rank"),
    (["--eval-size", "1000000000"], "eval_size"),  # the problems alone
    (["--max-new-tokens", "1000000"], "context is 512"),
])
def test_a_run_that_cannot_fit_is_refused_before_it_starts(capsys, tmp_path, no_model, sixteen_gb, argv, named):
    """Each ran out of memory with a traceback or hung, leaving a run directory (f6e21c1)."""
    status, err = run_cli(capsys, "train", "--runs-dir", str(tmp_path), *argv)
    assert status == 2 and err.count("\n") == 1 and "Traceback" not in err and named in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_run_that_fits_gets_its_estimate(capsys, tmp_path, sixteen_gb, monkeypatch):
    monkeypatch.setattr(rlbook.obtain.trainer, "train", lambda *a, **k: None)
    status, err = run_cli(capsys, "train", "--runs-dir", str(tmp_path), *TINY)
    assert status == 0 and err.startswith("estimate: peak 0.") and "GB on the CPU" in err, err


@pytest.mark.parametrize("junk", ["empty config", "junk weights", "junk tokenizer"])
def test_a_junk_checkpoint_directory_is_refused_before_it_starts(capsys, tmp_path, no_model, junk):
    """Junk in --init gave a 33-line traceback and an orphan run directory (f6e21c1)."""
    from rlbook.models import build_model

    checkpoint, runs = tmp_path / "checkpoint", tmp_path / "runs"
    model, tokenizer = build_model("nano-tiny")
    model.save_pretrained(checkpoint)
    tokenizer.save_pretrained(checkpoint)
    file, text = {"empty config": ("config.json", ""), "junk weights": ("model.safetensors", "junk"),
                  "junk tokenizer": ("tokenizer.json", "{junk")}[junk]
    (checkpoint / file).write_text(text)
    capsys.readouterr()  # save_pretrained's progress bar
    status, err = run_cli(capsys, "train", "--runs-dir", str(runs), *TINY, "--init", str(checkpoint))
    assert status == 2 and err.count("\n") == 1 and str(checkpoint / file) in err, err
    assert not runs.exists()


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="watches the child's loaded libraries (Linux)")
def test_ctrl_c_while_torch_loads_is_one_line_and_status_130(tmp_path):
    """Ctrl-C in the first seconds (the imports) printed a traceback (f6e21c1). The signal is sent once the child is
    loading torch's libraries, whatever the load on the machine; the child gets Python's own SIGINT handler even
    where the test runner ignores SIGINT (pytest-xdist's workers do; an ignored signal stays ignored across exec)."""
    child = subprocess.Popen([sys.executable, "-m", "rlbook", "train", "--runs-dir", str(tmp_path / "runs"), *TINY],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    maps, deadline = Path(f"/proc/{child.pid}/maps"), time.time() + 120
    while child.poll() is None and "libtorch" not in maps.read_text() and time.time() < deadline:
        time.sleep(0.01)
    assert child.poll() is None, "the child ended before it loaded torch"
    child.send_signal(signal.SIGINT)
    try:
        out, err = child.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        child.kill()
        raise
    assert child.returncode == 130, err
    assert err == "interrupted before the run started; rerun the same command to start it\n"
    assert not (tmp_path / "runs").exists()
