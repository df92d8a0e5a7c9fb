"""The three M2PO rules side by side (rlbook.chapters.m2po_variants) on synthetic runs with known answers."""
import json
import math

import pytest

from rlbook import stats
from rlbook.chapters import m2po_variants, mechanism
from rlbook.config import RunConfig
from rlbook.runs import Run, write_json

WARM_UP_M2 = 99.0  # what the fixture's first `staleness` updates record: m2_met must leave it out


def make_run(root, name, final, m2=0.1, removed=0.0, staleness=4, **config):
    """A stored run: base 0.4, then 12 updates (4 per step), evaluated at each step's end (the last three evaluations
    all `final`); `m2` on every update after the first `staleness`, WARM_UP_M2 before; its own rule removes
    `removed` of the tokens (clip_frac for the cap, mask_frac for the masks)."""
    c = RunConfig(experiment="x", name=name, preset="nano-tiny", init="scratch", updates_per_step=4,
                  prompts_per_step=16, staleness=staleness, **config)
    path = root / name
    path.mkdir()
    write_json(path / "config.json", c.to_dict())
    own = "clip_frac" if c.objective == "m2po_cap" else "mask_frac"
    rows = [{"update": 0, "eval_greedy_acc": 0.4}]
    for update in range(1, 13):
        row = {"update": update, "m2": m2 if update > staleness else WARM_UP_M2, own: removed}
        if update % 4 == 0:
            row["eval_greedy_acc"] = final
        rows.append(row)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return Run(path)


def seeds(root, objective, finals, **kwargs):
    return [make_run(root, f"{objective}-{i}", f, objective=objective, seed=i, **kwargs) for i, f in enumerate(finals)]


def test_each_variant_against_algorithm_1(tmp_path):
    by_variant = {"m2po": seeds(tmp_path, "m2po", [0.50, 0.52, 0.48]),
                  "m2po_cap": seeds(tmp_path, "m2po_cap", [0.60, 0.62, 0.58]),
                  "m2po_areal": seeds(tmp_path, "m2po_areal", [0.49, 0.53, 0.50])}
    got = m2po_variants.against_algorithm_1(by_variant)
    assert set(got) == {"m2po_cap", "m2po_areal"}
    cap, cap_reading = got["m2po_cap"]
    se = 0.02 / math.sqrt(3)  # each side: sample sd 0.02 over 3 seeds
    assert cap.mean == pytest.approx(0.10) and cap.se == pytest.approx(math.hypot(se, se)) and cap.n == 3
    assert cap_reading == m2po_variants.ABOVE
    areal, areal_reading = got["m2po_areal"]
    assert areal.mean == pytest.approx(0.0066667, abs=1e-6) and areal_reading == m2po_variants.WITHIN


def test_a_variant_below_algorithm_1_and_one_with_too_few_seeds(tmp_path):
    by_variant = {"m2po": seeds(tmp_path, "m2po", [0.50, 0.52, 0.48]),
                  "m2po_cap": seeds(tmp_path, "m2po_cap", [0.60, 0.62]),
                  "m2po_areal": seeds(tmp_path, "m2po_areal", [0.30, 0.32, 0.28])}
    got = m2po_variants.against_algorithm_1(by_variant)
    assert got["m2po_areal"][1] == m2po_variants.BELOW and got["m2po_areal"][0].mean == pytest.approx(-0.2)
    assert got["m2po_cap"][1] == m2po_variants.FEW_SEEDS  # two seeds: a standard error too uncertain to read


def test_the_m2_each_variant_met_read_against_algorithm_1s(tmp_path):
    by_variant = {"m2po": [make_run(tmp_path, f"a{i}", 0.5, m2=m, objective="m2po", seed=i)
                           for i, m in enumerate([0.10, 0.11, 0.12])],
                  "m2po_areal": [make_run(tmp_path, f"b{i}", 0.5, m2=m, objective="m2po_areal", seed=i)
                                 for i, m in enumerate([0.30, 0.31, 0.32])]}
    got = m2po_variants.against_algorithm_1(by_variant, m2po_variants.m2_met)
    assert got["m2po_areal"][0].mean == pytest.approx(0.2) and got["m2po_areal"][1] == m2po_variants.ABOVE
    assert got["m2po_cap"] == (None, m2po_variants.NOT_STORED)


def test_a_variant_without_runs_gives_no_reading(tmp_path):
    m2po = seeds(tmp_path, "m2po", [0.50, 0.52, 0.48])
    got = m2po_variants.against_algorithm_1({"m2po": m2po, "m2po_cap": []})
    assert got == {"m2po_cap": (None, m2po_variants.NOT_STORED), "m2po_areal": (None, m2po_variants.NOT_STORED)}
    cap = seeds(tmp_path, "m2po_cap", [0.60, 0.62, 0.58])
    assert m2po_variants.against_algorithm_1({"m2po_cap": cap})["m2po_cap"] == (None, m2po_variants.NOT_STORED)
    own = m2po_variants.trained_with({"m2po": m2po})
    assert own["m2po_cap"] is None and own["m2po_areal"] is None and own["m2po"].score.mean == pytest.approx(0.5)


def test_the_m2_met_leaves_out_the_warm_up(tmp_path):
    run = make_run(tmp_path, "r", 0.5, m2=0.2, objective="m2po", staleness=4)
    assert m2po_variants.m2_met(run) == pytest.approx(0.2)  # updates 5-12 only, not the 99s of updates 1-4
    on_policy = make_run(tmp_path, "s0", 0.5, m2=0.01, objective="grpo", staleness=0)
    assert m2po_variants.m2_met(on_policy) == pytest.approx(0.01)


def test_the_table_shows_each_rules_own_m2_and_removals(tmp_path):
    by_variant = {"m2po": [make_run(tmp_path, f"m-{i}", 0.5, m2=m2, removed=0.01, objective="m2po", seed=i)
                           for i, m2 in enumerate([0.10, 0.12, 0.14])],
                  "m2po_cap": [make_run(tmp_path, f"c-{i}", 0.6, m2=0.3, removed=0.02, objective="m2po_cap", seed=i)
                               for i in range(3)]}
    removed = {v: (stats.Estimate(share, 0.0, 3), stats.Estimate(1.0, 0.0, 3))
               for v, share in (("m2po", 0.01), ("m2po_cap", 0.03), ("m2po_areal", 0.05))}
    table = m2po_variants.variants_table(removed, by_variant)
    lines = table.splitlines()
    assert len(lines) == 5 and all(line.count("|") == 7 for line in lines)
    m2po, cap, areal = lines[2:]
    assert "0.12 ± 0.012" in m2po and "1.00%" in m2po  # seed mean of the M2 met, its s.e.; masked share
    assert "0.3 ± 0" in cap and "2.00%" in cap  # the cap's own removal is its clipped share
    # AReaL's runs are not stored: its same-batch columns still show, its own columns say so
    assert "5.00% ± 0.00" in areal and areal.count("–") == 3
    assert m2po_variants.variants_table({}, {}).count("–") == 15  # nothing stored: every cell says so


@pytest.mark.parametrize("tested_m2, outcome", [
    (0.15, mechanism.SUPPORTED), (0.25, mechanism.PARTLY), (0.35, mechanism.NOT_SUPPORTED)])
def test_the_denominator_test_reads_the_m2_met_against_areal_and_algorithm_1(tmp_path, tested_m2, outcome):
    """AReaL's rule meets M2 0.36 and Algorithm 1's 0.15, over seeds whose M2 differs by 0.01 (a standard error of
    about 0.006 a side); the tested rule meets Algorithm 1's, one in between or AReaL's."""
    def runs(prefix, m2, **config):
        return [make_run(tmp_path, f"{prefix}{i}", f, m2=m2 + 0.01 * (i - 1), seed=i, **config)
                for i, f in enumerate([0.50, 0.52, 0.51])]
    areal, algorithm_1 = runs("a", 0.36, objective="m2po_areal"), runs("m", 0.15, objective="m2po")
    tested = runs("t", tested_m2, objective="m2po_areal", objective_params={"masked_in_denominator": True})
    got = m2po_variants.denominator_test(areal, tested, algorithm_1)
    assert got.conclusion == m2po_variants.CONCLUSIONS[outcome]
    assert got.m2.moved.mean == pytest.approx(tested_m2 - 0.36)
    assert got.m2.apart.mean == pytest.approx(tested_m2 - 0.15)
    assert got.score.mean == pytest.approx(0.0) and got.score_reading == "within two standard errors of AReaL's"


def test_the_denominator_test_is_undecided_where_the_noise_covers_both_sides(tmp_path):
    noisy = [0.10, 0.40, 0.70]  # a standard error of 0.17 on every side
    areal, algorithm_1, tested = ([make_run(tmp_path, f"{p}{i}", 0.5, m2=m, seed=i, objective="m2po_areal")
                                   for i, m in enumerate(noisy)] for p in "amt")
    got = m2po_variants.denominator_test(areal, tested, algorithm_1)
    assert got.conclusion == m2po_variants.CONCLUSIONS[mechanism.UNDECIDED]


def test_the_denominator_test_needs_three_seeds_a_side(tmp_path):
    areal = seeds(tmp_path, "m2po_areal", [0.50, 0.52, 0.51])
    assert m2po_variants.denominator_test(areal, areal[:2], areal) is None
    assert m2po_variants.denominator_test([], areal, areal) is None


def test_the_denominator_test_gives_every_text_the_chapter_quotes_with_or_without_runs(tmp_path):
    runs = seeds(tmp_path, "m2po_areal", [0.50, 0.52, 0.51])
    names = {"m2", "m2_reading", "m2_vs_m2po", "m2_vs_m2po_reading", "score", "score_reading", "conclusion"}
    present = m2po_variants.denominator_texts(m2po_variants.denominator_test(runs, runs, runs))
    absent = m2po_variants.denominator_texts(None)
    assert set(present) == set(absent) == names
    assert present["m2_reading"] == "within two standard errors of AReaL's" and present["m2"].startswith("0 ± ")
    assert absent["m2_reading"] == m2po_variants.FEW_SEEDS and absent["score"] == "–"
