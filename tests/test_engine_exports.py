"""A sample of the chapters' exports read by each engine's own code (bench/check_exports.py's checks): one run of each
distinct kind (objective, fine-tuning, staleness, the add-ons), so CI covers every branch of the exporters in a minute;
`python bench/check_exports.py` reads all of them."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from check_exports import check_files  # noqa: E402

from rlbook.export import FRAMEWORKS, SUFFIX, Refused, export_text  # noqa: E402


def kind(config) -> tuple:
    """What decides which branches of an exporter a config takes."""
    return (config.objective, config.finetune, config.router_replay, config.staleness > 0, config.ar_alpha > 0,
            config.lopti_eta != 0, config.sync_every == 1, tuple(sorted(config.objective_params)))


@pytest.fixture(scope="module")
def sample():
    """One config of each kind among the chapters' experiments (the cpu profile), by experiment."""
    from rlbook.experiments import SWEEPS, sweep

    firsts = {}
    for name in SWEEPS:
        for config in sweep(name, "cpu"):
            firsts.setdefault(kind(config), config)
    return list(firsts.values())


@pytest.mark.parametrize("engine", FRAMEWORKS)
def test_each_kind_of_export_is_accepted_by_the_engine_or_refused(engine, sample, tmp_path):
    files, refused = [], []
    for i, config in enumerate(sample):
        path = tmp_path / f"{i}-{config.name}.{SUFFIX[engine]}"
        try:
            path.write_text(export_text(config, engine))
            files.append(path)
        except Refused as refusal:
            refused.append(str(refusal))
    rows = check_files(engine, files, tmp_path)
    failed = [f"{r['file']}: {r['detail']}" for r in rows if not r["ok"]]
    assert not failed, "\n".join(failed)
    assert len(rows) >= 10 and all(line.startswith("objective='dpo'") for line in refused)
    assert len(refused) == sum(c.objective == "dpo" for c in sample)
