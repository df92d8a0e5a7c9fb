"""The named random streams (rlbook.seeds): no two consumers draw the same stream.

The defect they fix: before training version 3 the warm start and the RL trainer drew prompts with the same
formula, so RL seed 0 trained, step after step, on the very batches its warm start had been fitted to.
"""
import json
from pathlib import Path

import pytest

from rlbook.seeds import HALF, MAX_RUN_SEED, STREAMS, VALIDATION_SET, EVALUATION_SET, stream_seed
from rlbook.tasks import make_task

WARM_STARTS = sorted((Path(__file__).parent.parent / "data" / "runs" / "warmstart").glob("*/config.json"))
RL_SEEDS = range(10)  # the reference runs use seeds 0-9
LONGEST_RUN = 4000  # steps: more than any shipped experiment trains (rlbook.experiments: the paper profile's 4000)


def test_the_shipped_warm_starts_are_found():
    assert len(WARM_STARTS) >= 4


@pytest.mark.parametrize("path", WARM_STARTS, ids=lambda p: p.parent.name)
def test_a_warm_start_and_every_rl_seed_draw_disjoint_prompt_streams(path):
    """The generator seeds of the warm start's batches and of RL seeds 0-9's steps never meet, so no RL step
    replays a warm-start batch; checked on the shipped warm starts' own settings and step counts."""
    config = json.loads(path.read_text())
    steps = len((path.parent / "metrics.jsonl").read_text().splitlines())
    warm = {stream_seed("warm_start", config["seed"], step) for step in range(steps)}
    rl = {stream_seed("rl_prompts", s, step) for s in RL_SEEDS for step in range(-256, LONGEST_RUN)}
    assert not warm & rl
    task = make_task(config["task"], **config["task_params"])
    for s in RL_SEEDS:  # the batches themselves differ (the old code drew identical ones for seed 0)
        assert task.generate(8, seed=stream_seed("rl_prompts", s, 0)) != task.generate(8, seed=min(warm))


def test_the_warm_start_stream_keeps_the_formula_the_shipped_warm_starts_were_trained_with():
    for seed, step in ((0, 0), (0, 474), (3, 12)):
        assert stream_seed("warm_start", seed, step) == 1_000_000 * (seed + 1) + step


def test_streams_never_overlap_even_at_the_extremes():
    run_seeds = (0, 1, 9, MAX_RUN_SEED - 1)
    indices = (-HALF + 1, -1, 0, 1, HALF - 1)
    seeds = [stream_seed(name, s, i) for name in STREAMS for s in run_seeds for i in indices]
    assert len(set(seeds)) == len(seeds)
    ranges = sorted((stream_seed(n, 0, -HALF + 1), stream_seed(n, MAX_RUN_SEED - 1, HALF - 1)) for n in STREAMS)
    assert all(high < next_low for (_, high), (next_low, _) in zip(ranges, ranges[1:]))
    assert max(EVALUATION_SET + 1, VALIDATION_SET + 1000) < ranges[0][0]  # the fixed data sets lie below them all
    assert ranges[-1][1] < 2**63  # torch.Generator.manual_seed takes it


@pytest.mark.parametrize("arguments, message", [(("prompts", 0), "not a random stream"),
                                                (("rl_prompts", -1), "run_seed"),
                                                (("rl_prompts", 0, HALF), "index")])
def test_bad_arguments_are_refused(arguments, message):
    with pytest.raises(ValueError, match=message):
        stream_seed(*arguments)
