"""The fixed evaluation sets in data/eval: reproducible from data/make_eval_sets.py, and used by evaluation_problems."""
import importlib.util
import json
from pathlib import Path

import pytest

from rlbook import evaluate
from rlbook.evaluate import EVAL_SEED, EVAL_SETS, evaluation_problems
from rlbook.tasks import make_task

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "data" / "make_eval_sets.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("make_eval_sets", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def regenerated(script, tmp_path_factory):
    directory = tmp_path_factory.mktemp("eval")
    paths = script.write_eval_sets(directory)
    assert sorted(p.name for p in paths) == sorted(f"{file}.jsonl" for file in EVAL_SETS)
    return directory


def test_script_writes_where_evaluate_reads(script):
    assert script.EVAL_DIR == evaluate.EVAL_DIR == ROOT / "data" / "eval"


@pytest.mark.parametrize("file", list(EVAL_SETS))
def test_committed_file_is_reproduced_byte_for_byte(regenerated, file):
    committed = (ROOT / "data" / "eval" / f"{file}.jsonl").read_bytes()
    assert (regenerated / f"{file}.jsonl").read_bytes() == committed


@pytest.mark.parametrize("file", list(EVAL_SETS))
def test_committed_file_holds_the_generated_problems(file):
    name, params, size = EVAL_SETS[file]
    lines = (ROOT / "data" / "eval" / f"{file}.jsonl").read_text().splitlines()
    assert len(lines) == size
    assert all(line == json.dumps(json.loads(line), sort_keys=True) for line in lines[:20])
    assert [json.loads(line) for line in lines] == make_task(name, **params).generate(size, seed=EVAL_SEED)
    assert len(set(lines)) > 0.9 * size  # not one problem repeated


def test_check_mode(script, regenerated, capsys):
    assert script.main(["--check", "--dir", str(regenerated)]) == 0
    assert script.main(["--check"]) == 0  # the committed files are up to date
    capsys.readouterr()

    first = next(iter(EVAL_SETS))
    path = regenerated / f"{first}.jsonl"
    original = path.read_bytes()
    try:
        path.write_bytes(original.replace(b"\n", b"\r\n", 1))  # one changed byte is enough
        assert script.main(["--check", "--dir", str(regenerated)]) == 1
        err = capsys.readouterr().err
        assert str(path) in err and "make_eval_sets.py" in err
        path.unlink()
        assert script.main(["--check", "--dir", str(regenerated)]) == 1
        assert str(path) in capsys.readouterr().err
    finally:
        path.write_bytes(original)
    assert script.main(["--check", "--dir", str(regenerated)]) == 0


@pytest.mark.parametrize("file", list(EVAL_SETS))
def test_matching_params_read_the_file(file, tmp_path, monkeypatch):
    name, params, size = EVAL_SETS[file]
    lines = (ROOT / "data" / "eval" / f"{file}.jsonl").read_text().splitlines()
    assert evaluation_problems(name, dict(params), 7) == [json.loads(line) for line in lines[:7]]
    # it really reads the file: a marked copy comes back as written
    marked = [dict(json.loads(line), marker=i) for i, line in enumerate(lines)]
    (tmp_path / f"{file}.jsonl").write_text("".join(json.dumps(p) + "\n" for p in marked))
    monkeypatch.setattr(evaluate, "EVAL_DIR", tmp_path)
    assert evaluation_problems(name, dict(params), 5) == marked[:5]
    assert len(evaluation_problems(name, dict(params), size)) == size


@pytest.mark.parametrize(
    "name, params, n",
    [
        ("arithmetic", {"digits": 2}, 10),  # no file for these parameters
        ("arithmetic", {"ops": "*"}, 10),
        ("knights_knaves", {"num_people": 5}, 3),
        ("arithmetic", {}, 501),  # more than the file holds
    ],
)
def test_other_params_are_generated(name, params, n, tmp_path, monkeypatch):
    for file in EVAL_SETS:  # files that would give away a wrong lookup
        (tmp_path / f"{file}.jsonl").write_text('{"prompt": "wrong", "answer": "0"}\n' * 600)
    monkeypatch.setattr(evaluate, "EVAL_DIR", tmp_path)
    problems = evaluation_problems(name, params, n)
    assert problems == make_task(name, **params).generate(n, seed=EVAL_SEED)
    assert len(problems) == n


def test_missing_files_fall_back_to_generation(tmp_path, monkeypatch):
    monkeypatch.setattr(evaluate, "EVAL_DIR", tmp_path)
    name, params, _ = EVAL_SETS["arithmetic"]
    assert evaluation_problems(name, params, 20) == make_task(name, **params).generate(20, seed=EVAL_SEED)


@pytest.mark.parametrize("name, params", [("arithmetic", {}), ("arithmetic", {"digits": [1, 2]}),
                                          ("knights_knaves", {"num_people": [2, 3]})])
def test_validation_split_is_disjoint_from_the_evaluation_set(name, params):
    from rlbook.evaluate import max_eval_size, validation_problems

    evaluation = {p["prompt"] for p in evaluation_problems(name, params, max_eval_size(name, params))}
    validation = validation_problems(name, params, 150)
    assert len(validation) == 150 and not evaluation & {p["prompt"] for p in validation}
    assert validation == validation_problems(name, params, 150)  # reproducible
