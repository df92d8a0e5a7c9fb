"""Property-based fuzz of every input: config fields, command-line flags and JSON arguments.

A bad input always ends as a ValueError (in Python) or exit status 2 with one line (on the command line) that names
the field; never another exception or a traceback. `bench/fuzz_inputs.py` runs the same properties with many more
examples and records how many cases were tried (CASES counts them).
"""
import json
import shutil
import tempfile
from collections import Counter
from dataclasses import MISSING, fields
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlbook.obtain
from rlbook.cli import main
from rlbook.config import RunConfig
from rlbook.pretrain import WarmStartConfig

CASES = Counter()
BASE = dict(preset="nano-tiny", init="scratch", task_params={"digits": [1, 2]})
FIELDS = {f.name: f.default if f.default is not MISSING else f.default_factory() for f in fields(RunConfig)}
DICT_KEYS = {"task_params": ["digits", "ops", "scratchpad", "num_people", "style"],
             "objective_params": ["eps_low", "eps_high", "tau", "tis_cap", "dual_clip", "prox_logp"],
             "warm_start": [f.name for f in fields(WarmStartConfig)]}
FUZZ = settings(deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(), st.text(max_size=6))
json_value = st.recursive(json_leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.text(max_size=4), inner, max_size=3), max_leaves=6)
any_value = st.one_of(json_value, st.sampled_from(["warm", "scratch", "m2po", "gspo", "on", "knights_knaves", ""]))


def json_object(name: str):
    """A JSON object for one of the dict fields, its keys mostly the ones that field knows."""
    keys = st.sampled_from(DICT_KEYS[name]) | st.text(max_size=6)
    values = json_value | st.sampled_from([0, 1, 2, 3, -1, 0.5, 1.5, [1, 2], [3, 1], "+*", "x", None])
    return st.dictionaries(keys, values, max_size=3)


def config_case(values: dict, named: str) -> bool:
    """One case: a RunConfig from values is made, or a ValueError naming `named` is raised. True when rejected."""
    CASES["config"] += 1
    try:
        RunConfig.from_dict({**BASE, **values})
    except ValueError as error:
        assert named in str(error), (values, str(error))
        return True
    return False


@FUZZ
@given(st.sampled_from(sorted(FIELDS)), any_value)
def test_any_value_of_any_field_is_accepted_or_named(name, value):
    config_case({name: value}, name)


@FUZZ
@given(st.sampled_from(sorted(FIELDS)), any_value)
def test_a_value_of_the_wrong_type_is_always_named(name, value):
    default = FIELDS[name]
    right = (int, float) if type(default) is float else type(default)
    wrong = not isinstance(value, right) or (isinstance(value, bool) and type(default) is not bool)
    if wrong or (isinstance(value, float) and value != value):
        assert config_case({name: value}, name)


@FUZZ
@given(st.sampled_from(["task_params", "objective_params", "warm_start"]).flatmap(
    lambda name: st.tuples(st.just(name), json_object(name))), st.sampled_from(["grpo", "m2po", "tis", "gspo"]),
    st.sampled_from(["arithmetic", "knights_knaves"]))
def test_json_arguments_are_accepted_or_named(field_and_value, objective, task):
    name, value = field_and_value
    values = {name: value, "objective": objective, "task": task}
    if name != "task_params":
        values["task_params"] = {}
    config_case(values, name)


@FUZZ
@given(st.text(max_size=12).filter(lambda key: key not in FIELDS), json_value)
def test_an_unknown_key_is_always_named(key, value):
    assert config_case({key: value}, repr(key))


ROOT = Path(tempfile.mkdtemp(prefix="rlbook-fuzz-"))


class Accepted(Exception):
    """The command line got as far as training (stubbed): the input was valid."""


def accept(config, *args, **kwargs):
    rlbook.obtain.check_runnable(config)
    raise Accepted


def cli_case(argv: list[str], named: list[str], monkeypatch) -> None:
    """One case: the command is accepted, or exits with status 2 and one line naming one of `named`."""
    CASES["cli"] += 1
    monkeypatch.setattr(rlbook.obtain, "run_or_load", accept)
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    with monkeypatch.context() as m:
        m.setattr("sys.stdout", out)
        m.setattr("sys.stderr", err)
        try:
            status = main(["train", "--runs-dir", str(ROOT), "--preset", "nano-tiny", "--init", "scratch", *argv])
        except SystemExit as exit:
            status = exit.code
        except Accepted:
            return
    err.seek(0)
    message = err.read()
    assert status == 2 and len(message.splitlines()) == 1 and message.endswith("\n") and any(n in message for n in named), (argv, status, message)
    assert not any(ROOT.iterdir())


flag_value = st.text(max_size=10) | st.sampled_from(["0", "-1", "1e309", "nan", "inf", "2.5", "true", "{}", "[]"])


@FUZZ
@given(st.sampled_from(sorted(FIELDS)), flag_value | json_value.map(json.dumps))
def test_any_flag_value_is_accepted_or_one_line_naming_it(monkeypatch, name, text):
    cli_case([f"--{name.replace('_', '-')}", text], [name, f"--{name.replace('_', '-')}"], monkeypatch)


@FUZZ
@given(st.sampled_from(["task_params", "objective_params", "warm_start"]).flatmap(
    lambda name: st.tuples(st.just(name), json_object(name).map(json.dumps) | st.text(max_size=12))))
def test_json_flags_are_accepted_or_one_line_naming_them(monkeypatch, field_and_text):
    name, text = field_and_text
    cli_case([f"--{name.replace('_', '-')}", text, "--objective", "m2po"], [name, f"--{name.replace('_', '-')}"],
             monkeypatch)


@FUZZ
@given(st.text(min_size=1, max_size=12).map(lambda text: "--" + text))
def test_unknown_flags_are_one_line(monkeypatch, flag):
    known = {f"--{name.replace('_', '-')}" for name in FIELDS} | {"--runs-dir", "--keep-superseded", "--help"}
    if flag.split("=")[0] not in known:
        cli_case([flag, "1"], [flag.split("=")[0], "unrecognized", "expected one argument"], monkeypatch)


@pytest.fixture(autouse=True, scope="module")
def _clean_root():
    yield
    shutil.rmtree(ROOT)
