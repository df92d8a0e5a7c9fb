"""Chapter signatures from synthetic runs: each reaches "reproduced", "not reproduced" and "within noise"."""
import json

import pytest

from rlbook import stats
from rlbook.chapters import verdicts
from rlbook.config import RunConfig
from rlbook.experiments import ARITHMETIC_AR_ALPHA
from rlbook.runs import Run, write_json


def make_run(root, name, greedy, clip=0.0, mask=0.0, **config):
    """A stored run: row 0 = base (greedy[0]), then one evaluated update per later value."""
    c = RunConfig(experiment="x", name=name, preset="nano-tiny", init="scratch", **config)
    path = root / name
    path.mkdir()
    write_json(path / "config.json", c.to_dict())
    rows = [{"update": 0, "eval_greedy_acc": greedy[0]}]
    rows += [{"update": i, "eval_greedy_acc": v, "clip_frac_low": clip / 2, "clip_frac_high": clip / 2,
              "mask_frac": mask} for i, v in enumerate(greedy[1:], 1)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return Run(path)


def seeds(root, label, finals, **config):
    """One run per final score (base 0.3, flat at the final score for the last 3 evaluations)."""
    return [make_run(root, f"{label}-{i}", [0.3, 0.3, f, f, f], seed=i, **config) for i, f in enumerate(finals)]


@pytest.mark.parametrize("finals, expected", [([0.5, 0.52, 0.48], stats.REPRODUCED),
                                              ([0.1, 0.12, 0.08], stats.NOT_REPRODUCED),
                                              ([0.1, 0.5, 0.35], stats.WITHIN_NOISE)])
def test_grpo_learns(tmp_path, finals, expected):
    assert verdicts.grpo_learns(seeds(tmp_path, "g", finals))[0].verdict == expected


def test_staleness_signatures(tmp_path):
    runs = (seeds(tmp_path, "g0", [0.6, 0.61, 0.59], objective="grpo")
            + seeds(tmp_path, "g16", [0.5, 0.51, 0.49], objective="grpo", staleness=16)
            + seeds(tmp_path, "m16", [0.6, 0.59, 0.605], objective="m2po", staleness=16))
    # no trust region: up to 0.6 for three evaluations, then down to 0.1
    runs += [make_run(tmp_path, f"n{i}", [0.3, 0.6, 0.6 + i / 100, 0.6, 0.1, 0.1, 0.1], objective="no_clip",
                      staleness=16, seed=i) for i in range(3)]
    found = {s.claim.split(" ")[0] + s.claim[-12:]: s.verdict for s in verdicts.staleness_signatures(runs)}
    assert list(found.values()) == [stats.REPRODUCED] * 5, found


def test_a_match_of_runs_that_learn_nothing_is_not_a_match(tmp_path):
    runs = (seeds(tmp_path, "g0", [0.3, 0.31, 0.29], objective="grpo")
            + seeds(tmp_path, "m16", [0.3, 0.29, 0.305], objective="m2po", staleness=16))
    match = [s for s in verdicts.staleness_signatures(runs) if "matches" in s.claim][0]
    assert match.verdict == stats.WITHIN_NOISE and "barely learns" in match.observed


def test_m2po_far_below_an_on_policy_grpo_that_learns_is_not_a_match(tmp_path):
    runs = (seeds(tmp_path, "g0", [0.5, 0.51, 0.49], objective="grpo")
            + seeds(tmp_path, "m16", [0.2, 0.21, 0.19], objective="m2po", staleness=16))
    match = [s for s in verdicts.staleness_signatures(runs) if "matches" in s.claim][0]
    assert match.verdict == stats.NOT_REPRODUCED and "barely" not in match.observed


def test_clip_mask_signatures(tmp_path):
    runs = (seeds(tmp_path, "g0", [0.5] * 3, clip=0.001, objective="grpo")
            + [make_run(tmp_path, f"g16-{i}", [0.3, 0.4, 0.4], clip=0.01 + i / 1000, objective="grpo",
                        staleness=16, seed=i) for i in range(3)]
            + [make_run(tmp_path, f"m16-{i}", [0.3, 0.4, 0.4], mask=0.02 + i / 1000, objective="m2po",
                        staleness=16, seed=i) for i in range(3)])
    got = [s.verdict for s in verdicts.clip_mask_signatures(runs)]
    # GRPO clips more when stale (yes); M2PO masks fewer than stale GRPO clips (no: it masks more); nor below s=0
    assert got == [stats.REPRODUCED, stats.NOT_REPRODUCED, stats.NOT_REPRODUCED]


def test_missing_cells_say_so(tmp_path):
    runs = seeds(tmp_path, "g0", [0.5, 0.5, 0.5], objective="grpo")
    assert "no runs" in [s.verdict for s in verdicts.staleness_signatures(runs)]
    assert verdicts.grpo_learns([])[0].verdict == "no runs"


@pytest.mark.parametrize("finals, words", [([0.45, 0.46, 0.44], "above 0.10 by more than two standard errors"),
                                           ([0.35, 0.36, 0.34], "below 0.10 by more than two standard errors"),
                                           ([0.35, 0.45, 0.40], "within two standard errors of 0.10"),
                                           ([0.5, 0.5], "too few seeds to place against 0.10")])
def test_gain_against_bar(tmp_path, finals, words):  # every run starts at 0.3: gains of 0.15, 0.05, 0.10 +- 0.03
    reading = verdicts.gain_against_bar(seeds(tmp_path, "g", finals))
    assert reading.endswith(words) and reading.startswith(f"{sum(finals) / len(finals) - 0.3:.3f}")
    assert verdicts.gain_against_bar([]) == "no GRPO runs stored"


def test_lopti_signatures(tmp_path):
    runs = seeds(tmp_path, "grpo", [0.5, 0.52, 0.48], task="knights_knaves")
    runs += seeds(tmp_path, "ar", [0.6, 0.62, 0.58], task="knights_knaves", ar_alpha=0.3)
    table = verdicts.lopti_signatures(runs)
    assert [s.verdict for s in table[:2]] == [stats.REPRODUCED, stats.REPRODUCED]
    assert [s.verdict for s in table[2:]] == ["no runs"] * 3
    assert verdicts.markdown(table).count("\n") == len(table) + 1


def test_lopti_signatures_on_arithmetic_name_math_variants_by_the_math_alpha(tmp_path):
    runs = seeds(tmp_path, "grpo", [0.5, 0.52, 0.48], task="arithmetic")
    runs += seeds(tmp_path, "ar", [0.5, 0.51, 0.49], task="arithmetic", ar_alpha=ARITHMETIC_AR_ALPHA)
    table = verdicts.lopti_signatures(runs)
    assert table[0].claim == "GRPO learns arithmetic"
    assert table[1].claim == "ar beats GRPO" and "math" in table[1].paper and table[1].verdict != "no runs"
    assert [s.claim for s in table[2:]] == ["lopti matches GRPO",  # the paper: Lopti adds nothing on math
                                            "reversed Lopti (high-probability tokens first) does worse than Lopti"]
    runs += seeds(tmp_path, "lopti", [0.5, 0.51, 0.49], task="arithmetic", lopti_eta=0.5)
    assert verdicts.lopti_signatures(runs)[2].verdict == stats.REPRODUCED
    assert verdicts.lopti_signatures([], task="arithmetic")[0].claim == "GRPO learns arithmetic"
    with pytest.raises(ValueError, match="one task"):
        verdicts.lopti_signatures(runs + seeds(tmp_path, "kk", [0.5] * 3, task="knights_knaves"))


def test_a_noisy_plateau_is_prosperity_without_collapse(tmp_path):
    """No trust region on a flat noisy curve beside a trust region on the same curve: as fast (prosperity), and the
    best 3-evaluation window above its end is noise, not a collapse."""
    curve = [0.50, 0.52, 0.49, 0.53, 0.50, 0.51, 0.49, 0.52, 0.50]
    runs = [make_run(tmp_path, f"{o}{i}", [0.5] + [v + i / 200 for v in curve], objective=o, staleness=16, seed=i)
            for i in range(3) for o in ("no_clip", "grpo", "m2po")]
    rise, fall = [s for s in verdicts.staleness_signatures(runs) if s.claim.startswith("b.")]
    assert (rise.verdict, fall.verdict) == (stats.REPRODUCED, stats.NOT_REPRODUCED)
    assert "0 of 3 seeds fell that far" in fall.observed


def test_a_collapse_is_judged_at_the_end_and_prosperity_against_the_trust_region(tmp_path):
    """No trust region rises as fast as GRPO, then ends 0.3 below its peak; one that recovers before its end has
    not collapsed (its deepest fall is still reported)."""
    falls = [0.5, 0.6, 0.7, 0.7, 0.7, 0.7, 0.5, 0.4, 0.4, 0.4]
    grpo = [0.5, 0.6, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7]
    runs = [make_run(tmp_path, f"c{i}", [v + i / 200 for v in falls], objective="no_clip", staleness=96, seed=i)
            for i in range(3)]
    runs += [make_run(tmp_path, f"g{i}", [v + i / 200 for v in grpo], objective="grpo", staleness=96, seed=i)
             for i in range(3)]
    rise, fall = verdicts.long_collapse_signatures(runs)
    assert "s=96" in rise.claim and (rise.verdict, fall.verdict) == (stats.REPRODUCED, stats.REPRODUCED)
    assert "3 of 3 seeds fell that far" in fall.observed
    recovers = [make_run(tmp_path, f"r{i}", [v + i / 200 for v in falls + [0.7, 0.7, 0.7]], objective="no_clip",
                         staleness=96, seed=i) for i in range(3)]
    assert verdicts.deepest_fall(recovers[0]) == pytest.approx(0.3)
    assert verdicts.collapse_signatures(recovers, 96, {})[1].verdict == stats.NOT_REPRODUCED


def test_prosperity_needs_the_trust_region_at_the_same_staleness(tmp_path):
    """Without trust-region runs prosperity is undecided ("no runs"); slower early learning is not prosperity."""
    slow = [0.5, 0.5, 0.5, 0.5, 0.5, 0.6, 0.65, 0.65, 0.65]
    runs = [make_run(tmp_path, f"f{i}", [v + i / 100 for v in slow], objective="no_clip", staleness=48, seed=i)
            for i in range(3)]
    assert verdicts.long_collapse_signatures(runs)[0].verdict == verdicts.NO_RUNS
    fast = [make_run(tmp_path, f"m{i}", [0.5, 0.6, 0.65, 0.65, 0.65, 0.65, 0.65, 0.65, 0.65], objective="m2po",
                     staleness=48, seed=i) for i in range(3)]
    rise, fall = verdicts.collapse_signatures(runs, 48, {"M2PO": fast})
    assert rise.verdict == stats.NOT_REPRODUCED and fall.verdict == stats.NOT_REPRODUCED
    no_runs = verdicts.long_collapse_signatures([])[0]
    assert no_runs.claim.startswith("b. Without a trust region, a stale run learns at least as fast early on")


@pytest.mark.parametrize("near, far, expected", [(0.2, 1.0, stats.REPRODUCED), (1.0, 0.2, stats.NOT_REPRODUCED)])
def test_entropy_signature(tmp_path, near, far, expected):
    runs = []
    for seed in range(3):
        run = make_run(tmp_path, f"g{seed}", [0.3, 0.4], objective="grpo", staleness=16, seed=seed)
        rows = [json.loads(line) for line in (run.path / "metrics.jsonl").read_text().splitlines()]
        rows[1]["ratio_bins"] = {"edges": [0.0, 0.02, 0.2, None], "count": [100, 50, 10 + seed],
                                 "entropy": [near, 0.5, far + seed / 100]}
        (run.path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        runs.append(run)
    (signature,) = verdicts.entropy_signature(runs)
    assert signature.verdict == expected and f"{near:.2f} at |r-1| < 0.02" in signature.observed


def test_markdown_escapes_bars_inside_cells():
    table = verdicts.markdown([verdicts.Signature("d. entropy vs |r-1|", "p", "o", stats.REPRODUCED)])
    assert table.splitlines()[-1].count(" | ") == 3 and "\\|r-1\\|" in table


def tau_runs(root, scores: dict) -> list:
    """M2PO runs at staleness 16, three seeds per tau, with the given final scores."""
    return [run for tau, finals in scores.items()
            for run in seeds(root, f"tau{tau}", finals, objective="m2po", staleness=16, objective_params={"tau": tau})]


@pytest.mark.parametrize("flat, expected", [([0.50, 0.51, 0.49], stats.REPRODUCED),  # 0.08 scores as 0.02 does
                                            ([0.30, 0.31, 0.29], stats.NOT_REPRODUCED),  # 0.2 below: not flat
                                            ([0.40, 0.55, 0.60], stats.WITHIN_NOISE)])
def test_tau_flat_between_002_and_008(tmp_path, flat, expected):
    table = verdicts.tau_signatures(tau_runs(tmp_path, {0.02: [0.5, 0.505, 0.495], 0.08: flat}))
    assert table[0].verdict == expected
    assert [s.verdict for s in table[1:]] == ["no runs"] * 2  # no tau=0.04 runs to compare the extremes with


def test_tau_extremes_do_worse(tmp_path):
    runs = tau_runs(tmp_path, {0.005: [0.3, 0.31, 0.29], 0.04: [0.5, 0.51, 0.49], 0.16: [0.6, 0.61, 0.59]})
    table = verdicts.tau_signatures(runs)
    assert table[0].verdict == "no runs"
    assert [s.verdict for s in table[1:]] == [stats.REPRODUCED, stats.NOT_REPRODUCED]  # 0.16 does better here


def test_fidelity_rewrites_only_the_readme_block(tmp_path):
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from fidelity import rewrite_block

    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- fidelity:start -->\nold table\n<!-- fidelity:end -->\nrest\n")
    rewrite_block(readme, "new table")
    assert readme.read_text() == "intro\n<!-- fidelity:start -->\nnew table\n<!-- fidelity:end -->\nrest\n"
    readme.write_text("no markers")
    with pytest.raises(SystemExit, match="needs exactly one"):
        rewrite_block(readme, "x")
    assert readme.read_text() == "no markers"  # left as it was


def test_fidelity_rows_name_a_claim_once_and_count_the_rest():
    """The README's claim cells stay short enough for a projector: a claim made per setting is named once with its
    settings (listed when short, counted when long), and past fidelity.SHOWN_CLAIMS claims the rest are counted."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from fidelity import SHOWN_CLAIMS, chapter_row, claims_cell

    row = lambda claim, verdict=stats.REPRODUCED: verdicts.Signature(claim, "paper", "ours", verdict)
    rungs = [row(f"lr {lr}, s = {s}: staleness costs GRPO") for lr, s in (("1e-3", 24), ("5e-4", 48), ("2.5e-4", 96))]
    assert claims_cell(rungs, stats.REPRODUCED) == "staleness costs GRPO (3 settings)"
    objectives = [row("dpo: online beats offline"), row("grpo: online beats offline"), row("grpo: a |r-1| claim")]
    assert claims_cell(objectives, stats.REPRODUCED) == "online beats offline (dpo, grpo); grpo: a \\|r-1\\| claim"
    assert chapter_row("07", objectives, "3 made") == f"| 07 | 3 / 0 / 0 | {claims_cell(objectives, stats.REPRODUCED)} | - | 3 made |"
    many = [row(f"claim {i}") for i in range(SHOWN_CLAIMS + 2)] + [row("missed", stats.NOT_REPRODUCED)]
    assert claims_cell(many, stats.REPRODUCED).endswith("; and 2 more")
    assert claims_cell(many, stats.WITHIN_NOISE) == "-"


@pytest.mark.parametrize("semi, offline, expected", [
    ([0.50, 0.51, 0.49], [0.30, 0.31, 0.29], (stats.REPRODUCED, stats.REPRODUCED)),
    ([0.40, 0.41, 0.39], [0.60, 0.61, 0.59], (stats.NOT_REPRODUCED, stats.NOT_REPRODUCED)),
    ([0.40, 0.60, 0.50], [0.30, 0.70, 0.50], (stats.WITHIN_NOISE, stats.WITHIN_NOISE))])
def test_semi_online_signatures(tmp_path, semi, offline, expected):
    runs = (seeds(tmp_path, "on", [0.50, 0.51, 0.49], sync_every=1) + seeds(tmp_path, "semi", semi, sync_every=4)
            + seeds(tmp_path, "off", offline, sync_every=0))
    signatures = verdicts.semi_online_signatures(runs)
    assert [s.claim for s in signatures] == ["grpo: semi-online (sync every 4) matches online",
                                             "grpo: online beats offline (never synced)"]
    assert tuple(s.verdict for s in signatures) == expected


def test_semi_online_missing_cells_say_so(tmp_path):
    runs = seeds(tmp_path, "semi", [0.5, 0.5, 0.5], sync_every=4)
    assert [s.verdict for s in verdicts.semi_online_signatures(runs)] == ["no runs", "no runs"]


def moe_run(root, name, greedy, kl_k3=1e-3, f2=1e-2, **config):
    """A stored chapter-6 run (nano-moe-tiny, bfloat16 engine): greedy evaluations and per-update KL and F(2)."""
    c = RunConfig(experiment="x", name=name, preset="nano-moe-tiny", init="scratch", rollout_dtype="bfloat16",
                  router_noise=0.2, **config)
    (root / name).mkdir()
    write_json(root / name / "config.json", c.to_dict())
    rows = [{"update": 0, "eval_greedy_acc": greedy[0]}]
    rows += [{"update": i, "eval_greedy_acc": v, "kl_k3": kl_k3, "f2": f2} for i, v in enumerate(greedy[1:], 1)]
    (root / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return Run(root / name)


def r3_cells(root, grpo, r3, key="kl_k3"):
    """Three seeds each of GRPO and GRPO + R3 with the given per-seed values of `key` (accuracy flat at 0.5)."""
    return ([moe_run(root, f"g{i}", [0.3, 0.5, 0.5, 0.5], seed=i, **{key: v}) for i, v in enumerate(grpo)]
            + [moe_run(root, f"r{i}", [0.3, 0.5, 0.5, 0.5], seed=i, router_replay=True, **{key: v})
               for i, v in enumerate(r3)])


@pytest.mark.parametrize("key, row", [("kl_k3", 0), ("f2", 1)])
@pytest.mark.parametrize("grpo, r3, expected", [([2e-3, 2.1e-3, 1.9e-3], [7e-4, 8e-4, 7.5e-4], stats.REPRODUCED),
                                                ([7e-4, 8e-4, 7.5e-4], [2e-3, 2.1e-3, 1.9e-3], stats.NOT_REPRODUCED),
                                                ([1e-3, 3e-3, 2e-3], [2e-3, 1e-3, 3e-3], stats.WITHIN_NOISE)])
def test_router_replay_lowers_kl_and_extreme_tokens(tmp_path, key, row, grpo, r3, expected):
    signature = verdicts.router_replay_signatures(r3_cells(tmp_path, grpo, r3, key))[row]
    assert signature.verdict == expected and ("KL" if key == "kl_k3" else "F(2)") in signature.claim


@pytest.mark.parametrize("r3_finals, expected", [([0.50, 0.505, 0.495], stats.REPRODUCED),  # level: no worse
                                                 ([0.30, 0.31, 0.29], stats.NOT_REPRODUCED),  # 0.2 worse
                                                 ([0.40, 0.55, 0.48], stats.WITHIN_NOISE)])
def test_router_replay_scores_no_worse(tmp_path, r3_finals, expected):
    runs = ([moe_run(tmp_path, f"g{i}", [0.3, 0.5, f, f, f], seed=i) for i, f in enumerate([0.5, 0.51, 0.49])]
            + [moe_run(tmp_path, f"r{i}", [0.3, 0.5, f, f, f], seed=i, router_replay=True)
               for i, f in enumerate(r3_finals)])
    assert verdicts.router_replay_signatures(runs)[2].verdict == expected


def test_router_replay_stability_and_baselines(tmp_path):
    # GRPO peaks at 0.6 and collapses to 0.2; R3 stays at 0.6; GSPO ends at 0.4, TIS level with R3
    collapse = lambda i: [0.3, 0.6, 0.6 + i / 100, 0.6, 0.2, 0.2, 0.2]
    runs = [moe_run(tmp_path, f"g{i}", collapse(i), seed=i) for i in range(3)]
    runs += [moe_run(tmp_path, f"r{i}", [0.3, 0.6, 0.6, 0.6, 0.6, 0.6 + i / 100, 0.6], seed=i, router_replay=True)
             for i in range(3)]
    runs += [moe_run(tmp_path, f"s{i}", [0.3, 0.4, 0.4, 0.4 + i / 100], seed=i, objective="gspo") for i in range(3)]
    runs += [moe_run(tmp_path, f"t{i}", [0.3, 0.6, 0.6, 0.6 + i / 100], seed=i, objective="tis") for i in range(3)]
    table = verdicts.router_replay_signatures(runs)
    assert [s.claim for s in table[3:]] == ["R3 falls less than GRPO without it (deepest fall of the 3-evaluation "
                                            "mean)", "R3 beats GSPO", "R3 beats TIS"]
    assert [s.verdict for s in table[3:]] == [stats.REPRODUCED, stats.REPRODUCED, stats.WITHIN_NOISE]


def test_router_replay_missing_cells_say_so(tmp_path):
    runs = [moe_run(tmp_path, f"g{i}", [0.3, 0.5], seed=i) for i in range(3)]
    assert [s.verdict for s in verdicts.router_replay_signatures(runs)] == ["no runs"] * 6


def test_fidelity_reads_chapter_5s_stored_trajectories():
    """Chapter 5 stores merge results without weights (no RunStore runs): bench/fidelity.py reads them with
    pma.load_references and gives the merging verdicts their seeds."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from fidelity import CHAPTERS, stored

    from rlbook.runs import reference_root

    experiment, signatures = CHAPTERS["05 checkpoint merging (PMA)"]
    every, shown = stored(str(reference_root()), experiment)
    references = [r for r in shown if r.current]
    assert shown == every  # chapter 5 shows every stored trajectory
    assert len(references) >= 3  # the shipped trajectory seeds
    rows = signatures(references)
    assert len(rows) == 4 and all(r.verdict in (stats.REPRODUCED, stats.NOT_REPRODUCED, stats.WITHIN_NOISE)
                                  for r in rows)


def test_fidelity_reads_a_sweep_across_experiments_and_one_cell_of_an_experiment():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from fidelity import CHAPTERS, stored

    from rlbook.experiments import sweep
    from rlbook.runs import reference_root

    root = str(reference_root())
    every, ladder = stored(root, "sweep:drift_ladder")
    assert ladder.configs == sweep("drift_ladder", "cpu") and ladder is every  # asked-for configs, found or not
    assert {r.config.experiment for r in ladder} >= {"02_staleness", "02_slow_drift", "02_drift_ladder"}
    (source, _), = [v for k, v in CHAPTERS.items() if "full fine-tuning" in k]
    assert {r.config.finetune for r in stored(root, source)[1]} <= {"full"}


def test_the_papers_numbers_are_written_once_with_their_source():
    """Every number a paper reports lives in rlbook.chapters.papers, with its paper (title, arXiv id) and where in the
    paper it comes from; no other chapter module writes one."""
    import re
    from pathlib import Path

    from rlbook.chapters import papers

    reported = [v for v in vars(papers).values() if isinstance(v, papers.Reported)]
    assert len(reported) >= 15
    for r in reported:
        assert r.text and r.where and r.paper.title
        assert r.paper.arxiv is None or re.fullmatch(r"\d{4}\.\d{5}", r.paper.arxiv)
        for v in (v for v in r.values.values() if isinstance(v, float)):  # each value is the number the text quotes
            forms = {f"{v:g}", f"{100 * v:.1f}%", f"{100 * v:.2f}%", f"{v:.1e}".replace("e-0", "e-")}
            assert any(form in r.text for form in forms), (r, v)
    numbers = ("36.6", "30.4", "33.0", "0.66%", "0.07%", "1.5e-3", "7.5e-4", "0.53", "0.54", "0.57", "15.2%")
    chapters = Path(papers.__file__).parent
    writers = {p.name for p in chapters.glob("*.py") for n in numbers if n in p.read_text()}
    assert writers == {"papers.py"}


def test_quoted_verdict_takes_the_first_claim_with_every_word_and_refuses_to_guess():
    rows = [verdicts.Signature("a. GRPO gets worse with staleness", "p", "o", stats.NOT_REPRODUCED),
            verdicts.Signature("e. M2PO beats GRPO", "p", "o", stats.REPRODUCED),
            verdicts.Signature("e. M2PO matches on-policy GRPO", "p", "o", verdicts.NO_RUNS)]
    assert verdicts.quoted_verdict(rows, "M2PO", "GRPO") == stats.REPRODUCED
    assert verdicts.quoted_verdict(rows, "staleness") == stats.NOT_REPRODUCED
    assert verdicts.quoted_verdict(rows, "matches") == verdicts.UNDECIDED  # stored no runs: not a verdict
    assert verdicts.find(rows, "M2PO", "matches").verdict == verdicts.NO_RUNS
    with pytest.raises(ValueError, match=r"no verdict's claim holds all of \['collapses'\]; the claims are: "
                                         r"'a. GRPO gets worse with staleness'"):
        verdicts.quoted_verdict(rows, "collapses")  # a mistyped or missing claim fails loudly
    assert verdicts.quoted_verdict(rows, "collapses", absent_ok=True) == verdicts.UNDECIDED  # not in this profile
    assert verdicts.quoted_verdict([], "collapses") == verdicts.UNDECIDED  # no runs stored at all


def test_the_long_horizon_gets_its_trust_region_at_the_same_settings():
    from rlbook import experiments as ex

    free = ex.sweep("collapse_long", "cpu")
    trust = ex.sweep("collapse_long_trust", "cpu")
    assert len(trust) == 3 * len(free) and {c.experiment for c in trust} == {"02_collapse_long"}
    same = lambda c: (c.lr, c.finetune, c.total_updates, c.max_grad_norm, c.seed)
    assert {same(c) for c in trust} == {same(c) for c in free}
    assert {(c.objective, c.staleness) for c in trust} == {("grpo", 0), ("grpo", 96), ("m2po", 96)}
