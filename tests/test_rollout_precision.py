"""Chapter 3's bfloat16-rollout arm (rlbook.chapters.rollout_precision) on synthetic runs."""
import json

from rlbook import stats
from rlbook.chapters import rollout_precision
from rlbook.config import RunConfig
from rlbook.runs import Run
from rlbook.storage import write_json


def run(root, objective, staleness, seed, dtype, m2, removed, score=0.66, n=40):
    """A stored run of the arm: `staleness` updates on base rollouts (nothing removed), then batches of the given M2
    with `removed` of their tokens clipped (GRPO) or masked (M2PO); evaluations every 10 updates, flat at `score`."""
    c = RunConfig(experiment="x", name=f"{objective}-s{staleness}-{dtype}-{seed}", preset="nano-tiny", init="scratch",
                  objective=objective, staleness=staleness, seed=seed, lr=1.25e-4, rollout_dtype=dtype,
                  engine="reference")
    path = root / c.name
    path.mkdir(parents=True)
    write_json(path / "config.json", c.to_dict())
    key = "mask_frac" if objective == "m2po" else "clip_frac"
    rows = [{"update": 0, "eval_greedy_acc": 0.5}]
    for u in range(1, n + 1):
        stale = u > staleness
        rows.append({"update": u, "m2": m2 if stale else 0.0, "clip_frac": 0.0, "mask_frac": 0.0,
                     key: removed if stale else 0.0, **({"eval_greedy_acc": score} if u % 10 == 0 else {})})
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return Run(path)


def arm(root, bf16_on_policy_clip, seeds=3):
    runs = []
    for seed in range(seeds):
        j = seed * 1e-5  # seeds differ a little
        runs += [run(root, "grpo", 0, seed, "bfloat16", 0.002, bf16_on_policy_clip + j),
                 run(root, "grpo", 0, seed, "float32", 0.0005, 0.0007 + j),
                 run(root, "grpo", 8, seed, "bfloat16", 0.008, 0.015 + j, score=0.66 - 10 * j),
                 run(root, "grpo", 8, seed, "float32", 0.006, 0.014 + j),
                 run(root, "m2po", 8, seed, "bfloat16", 0.013, 0.0002 + j),
                 run(root, "m2po", 8, seed, "float32", 0.012, 0.0002 + j)]
    return runs


def test_the_mismatch_verdict_compares_on_policy_grpo_across_precisions(tmp_path):
    rows = rollout_precision.signatures(arm(tmp_path / "more", bf16_on_policy_clip=0.003))
    assert rows[0].claim.startswith("bfloat16 rollouts make on-policy GRPO clip more")
    assert rows[0].verdict == stats.REPRODUCED  # 0.30% vs 0.07%
    assert "0.30" in rows[0].observed and "0.07" in rows[0].observed and "3 seeds" in rows[0].observed
    same = rollout_precision.signatures(arm(tmp_path / "less", bf16_on_policy_clip=0.0001))
    assert same[0].verdict == stats.NOT_REPRODUCED  # bfloat16 clips less than float32 beyond 2 s.e.


def test_the_stale_verdicts_read_the_bfloat16_runs_only(tmp_path):
    rows = rollout_precision.signatures(arm(tmp_path, bf16_on_policy_clip=0.003))
    claims = [r.claim for r in rows[1:]]
    assert claims and all(c.startswith("bfloat16 rollouts, s = 8: ") for c in claims)
    by = {r.claim: r for r in rows}
    ratio = by["bfloat16 rollouts, s = 8: GRPO clips at least 5x what M2PO masks"]
    assert ratio.verdict == stats.REPRODUCED and "1.50" in ratio.observed  # bfloat16's 1.5%, not float32's 1.4%
    # M2PO's 0.02% against the *bfloat16* on-policy clip (0.30%), not float32's (0.07%)
    assert "0.30" in by["bfloat16 rollouts, s = 8: M2PO masks no more than on-policy GRPO clips"].observed


def test_too_few_seeds_decide_nothing_and_a_missing_cell_says_so(tmp_path):
    rows = rollout_precision.signatures(arm(tmp_path / "two", bf16_on_policy_clip=0.003, seeds=2))
    assert {r.verdict for r in rows} == {stats.WITHIN_NOISE}
    only_bf16 = [r for r in arm(tmp_path / "one", 0.003, seeds=3) if r.config.rollout_dtype == "bfloat16"]
    assert rollout_precision.mismatch_signature(only_bf16).verdict == "no runs"
    table = rollout_precision.table(only_bf16)
    assert "| GRPO, s = 0 | bfloat16 | 3 |" in table and "| GRPO, s = 0 | float32 | 0 | - | - | - |" in table


def test_what_bfloat16_adds_is_each_cells_share_minus_its_float32_controls(tmp_path):
    runs = arm(tmp_path, bf16_on_policy_clip=0.003)
    added = rollout_precision.added_by_bfloat16(runs)
    assert list(added) == [("grpo", 0), ("grpo", 8), ("m2po", 8)]
    assert abs(added[("grpo", 0)].mean - (0.003 - 0.0007)) < 1e-12 and added[("grpo", 0)].n == 3
    assert abs(added[("grpo", 8)].mean - 0.001) < 1e-12 and abs(added[("m2po", 8)].mean) < 1e-12
    assert rollout_precision.added_sentence(runs) == ("GRPO at s = 0: +0.230 ± 0.001 points; GRPO at s = 8: +0.100 ± 0.001 "
                                                      "points; M2PO at s = 8: +0.000 ± 0.001 points")
    only_bf16 = [r for r in runs if r.config.rollout_dtype == "bfloat16"]
    assert rollout_precision.added_by_bfloat16(only_bf16) == {}
    assert rollout_precision.added_sentence(only_bf16) == "no cell is stored in both precisions yet"
