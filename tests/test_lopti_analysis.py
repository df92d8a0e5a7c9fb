"""Chapter 4 analysis: the per-token gradient norm, the wrong-direction count, accuracy by number of people and its
cache, and the one-step analysis on a 0.1M-parameter model with random weights (no warm start needed)."""
import json
import math

import pytest
import torch

import rlbook.chapters.lopti as la
from rlbook.chapters import mechanism
from rlbook.config import RunConfig
from rlbook.models import build_model
from rlbook.runs import Run, write_json
from rlbook.tasks.base import Score
from rlbook.tasks.knights_knaves import KnightsKnavesTask

TINY = dict(experiment="04_lopti", name="t", preset="nano-tiny", init="scratch", task="knights_knaves",
            task_params={"num_people": [2, 3]}, group_size=4, max_new_tokens=8, eval_size=6)


pytestmark = pytest.mark.usefixtures("one_thread")


def test_gradient_norm_formula_matches_autograd():
    torch.manual_seed(0)
    logits = torch.randn(6, 7) * torch.tensor([[0.1], [1.0], [3.0], [5.0], [8.0], [0.5]])
    ids = torch.tensor([0, 3, 6, 2, 1, 5])
    norms = la.token_gradient_norms(logits, ids)
    for row in range(6):
        z = logits[row].clone().requires_grad_()
        torch.log_softmax(z, -1)[ids[row]].backward()
        assert norms[row].item() == pytest.approx(z.grad.norm().item(), rel=1e-5, abs=1e-6)
    p = torch.softmax(logits, -1).gather(-1, ids[:, None])[:, 0]
    assert torch.all(norms >= (1 - p) - 1e-6) and torch.all(norms <= math.sqrt(2) * (1 - p) + 1e-6)


def test_wrong_direction_on_a_constructed_example():
    old = torch.zeros(1, 6)
    new = torch.tensor([[0.1, -0.1, 0.1, -0.1, 0.5, -0.2]])
    advantages = torch.tensor([[1.0, 1.0, -1.0, -1.0, 0.0, 2.0]])
    select = torch.tensor([[True, True, True, True, True, False]])
    # selected with A != 0: tokens 0-3; token 1 (A>0, down) and token 2 (A<0, up) moved the wrong way
    assert la.wrong_direction(old, new, advantages, select) == pytest.approx(0.5)
    assert la.wrong_direction(old, new, advantages, torch.ones_like(select)) == pytest.approx(3 / 5)
    assert math.isnan(la.wrong_direction(old, new, advantages, torch.zeros_like(select)))


class Stub:
    """The real task's problems with a score that only says whether a puzzle has 2 people."""

    def __init__(self):
        self.task = KnightsKnavesTask((2, 3))

    def score(self, problem, completion):
        return Score(reward=0.0, correct=problem["num_people"] == 2)


def test_accuracy_by_people_groups_by_puzzle_size():
    model, tokenizer = build_model("nano-tiny", seed=0)
    stub = Stub()
    problems = stub.task.generate(10, seed=3)
    result = la.accuracy_by_people(model, tokenizer, stub, problems, max_new_tokens=2)
    assert set(result) == {p["num_people"] for p in problems} == {2, 3}
    assert result == {2: 1.0, 3: 0.0}


def fake_run(tmp_path, state: bool) -> Run:
    run = Run(tmp_path / "04_lopti" / "t-0")
    run.path.mkdir(parents=True)
    write_json(run.path / "config.json", RunConfig(**TINY).to_dict())
    run.update_meta(complete=True, updates=3)
    for update, acc in ((0, 0.2), (3, 0.4)):
        run.append({"update": update, "eval_greedy_acc": acc})
    if state:
        torch.save({"model": {}}, run.path / "state.pt")
    return run


def test_accuracy_by_people_is_cached_in_the_run(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(la, "load_trained_policy", lambda run: (None, None))
    monkeypatch.setattr(la, "_people", lambda config, model, tok: calls.append(1) or {2: 0.5, 3: 0.25})
    run = fake_run(tmp_path, state=True)
    replayed = la.run_accuracy_by_people(run, compute=False)  # the book replays: no cache, no evaluation
    assert not calls and replayed["by_people"] is None and replayed["overall"] == 0.4
    first = la.run_accuracy_by_people(run)
    second = la.run_accuracy_by_people(run)
    assert len(calls) == 1 and first == second and first["by_people"] == {2: 0.5, 3: 0.25}
    assert la.run_accuracy_by_people(run, compute=False) == first  # once cached, the book reads it
    assert json.loads((run.path / la.CACHE).read_text())["source"] == "state.pt"
    run.append({"update": 4, "eval_greedy_acc": 0.5})
    run.update_meta(updates=4)  # a longer run: the cache is stale and recomputed
    la.run_accuracy_by_people(run)
    assert len(calls) == 2


def test_a_run_without_weights_falls_back_to_overall_accuracy(tmp_path):
    result = la.run_accuracy_by_people(fake_run(tmp_path, state=False))
    assert result["by_people"] is None and result["overall"] == 0.4 and result["source"] == "metrics"


def test_trained_policy_loads_the_lora_weights(tmp_path):
    config = RunConfig(**TINY)
    run = fake_run(tmp_path, state=False)
    model, _ = la.init_policy(config, progress=False)
    trained = {n: torch.full_like(p, 0.01) for n, p in model.named_parameters() if p.requires_grad}
    torch.save({"model": trained}, run.path / "state.pt")
    loaded, _ = la.load_trained_policy(run)
    assert all(torch.equal(p, trained[n]) for n, p in loaded.named_parameters() if p.requires_grad)


def test_per_token_analysis_on_a_random_model():
    config = RunConfig(**TINY)
    model, batch, advantages = la.analysis_batch(config, seed=0, prompts=2)
    torch.manual_seed(1)
    advantages = torch.randn(len(batch), 1) * batch.response_mask  # random weights: every reward is the same
    eta = torch.exp(batch.behavior_logp[batch.response_mask != 0]).median().item()  # a mixed split of the tokens
    share = la.gradient_share(model, batch, advantages, eta=eta)
    assert 0 < share["token_share_low"] < 1 and 0 < share["logit_grad_share_low"] < 1
    start = [p.detach().clone() for p in model.parameters() if p.requires_grad]
    effects = la.one_update_effects(model, batch, advantages, config, eta=eta)
    assert effects["low-p only"]["same_as_low_only_high"] == 1.0
    assert all(0 <= v["wrong_high"] <= 1 for v in effects.values())
    assert all(torch.equal(a, b) for a, b in zip(start, [p for p in model.parameters() if p.requires_grad]))
    assert la.one_update_effects(model, batch, advantages, config, eta=eta) == effects  # deterministic


def test_net_advantages_sum_identical_tokens_in_identical_contexts():
    config = RunConfig(**TINY)
    _, batch, _ = la.analysis_batch(config, seed=0, prompts=2)
    batch = batch.select(torch.tensor([0, 0, 4]))  # rows 0 and 1: one completion twice; row 2: another prompt
    advantages = torch.tensor([[1.0], [-3.0], [2.0]]) * batch.response_mask
    net, first = la.net_advantages(batch, advantages)
    n = int(batch.response_mask[0].sum())
    assert torch.all(net[0, :n] == -2.0) and torch.all(net[1, :n] == -2.0)
    assert first[0, :n].all() and not first[1].any() and first[2, :int(batch.response_mask[2].sum())].all()
    assert torch.all(net[2] == advantages[2])


def test_figures_and_replay_on_stored_runs(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from rlbook.chapters import lopti_figures
    from rlbook.experiments import LOPTI_VARIANTS

    runs = []
    for k, (variant, (alpha, eta)) in enumerate(LOPTI_VARIANTS.items()):
        run = Run(tmp_path / "04_lopti" / variant)
        run.path.mkdir(parents=True)
        write_json(run.path / "config.json", RunConfig(**TINY, ar_alpha=alpha, lopti_eta=eta).to_dict())
        for update in range(4):
            run.append({"update": update, "eval_greedy_acc": 0.1 * k + 0.01 * update, "reward": 0.2 + 0.01 * k,
                        "low_prob_frac": 0.3})
        runs.append(run)
    people = [{"by_people": {2: 0.5, 3: 0.1 * k}, "overall": 0.3} for k in range(len(runs))]
    assert len(lopti_figures.curves_figure(runs).axes) == 2
    assert lopti_figures.people_figure(runs, people, base={2: 0.4, 3: 0.2}).legends
    mixed = [p if k == 0 else {"by_people": None, "overall": 0.3} for k, p in enumerate(people)]  # mid-retraining
    fig = lopti_figures.people_figure(runs, mixed)
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels == ["2 people", "3 people", "all sizes\n(runs not evaluated by size)"]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == list(LOPTI_VARIANTS)  # every variant, once
    replay = lopti_figures.variant_explorer(runs)
    alphas, etas = {r.config.ar_alpha for r in runs}, {r.config.lopti_eta for r in runs}
    assert len(replay.views) == len(alphas) * len(etas) * 3  # every (alpha, eta, metric), stored or not
    missing = replay.views["0.3|-0.5|eval_greedy_acc"]  # no stored run: GRPO alone, and the title says so
    assert len(missing["data"]) == 1 and "no stored run" in missing["layout"]["title"]["text"]
    assert len(replay.views["0.0|0.5|eval_greedy_acc"]["data"]) == 2  # Lopti beside GRPO


def test_the_second_step_test_reads_lopti_at_half_the_rate_against_both(tmp_path):
    def runs(prefix, finals):
        out = []
        for i, final in enumerate(finals):
            path = tmp_path / f"{prefix}{i}"
            path.mkdir()
            write_json(path / "config.json", RunConfig(experiment="x", name=path.name, seed=i).to_dict())
            rows = [{"update": 0, "eval_greedy_acc": 0.4}] + [{"update": u, "eval_greedy_acc": final}
                                                              for u in (10, 20, 30)]
            (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            out.append(Run(path))
        return out

    grpo, lopti = runs("g", [0.62, 0.63, 0.64]), runs("l", [0.58, 0.59, 0.60])
    half, steady = runs("h", [0.62, 0.63, 0.64]), runs("c", [0.62, 0.63, 0.64])
    got = la.second_step_texts(grpo, lopti, half, steady)
    assert got["conclusion"] == la.SECOND_STEP_CONCLUSIONS[mechanism.SUPPORTED]
    assert got["moved_reading"] == "above Lopti's at the full rate by more than two standard errors"
    assert got["apart_reading"] == "within two standard errors of GRPO's"
    assert got["control_reading"] == "within two standard errors of GRPO's at the full rate"
    assert got["rise_gap"].startswith("0.040 ± ")
    assert got["rise_gap_reading"] == "above zero by more than two standard errors"
    assert la.second_step_texts(grpo, lopti, runs("n", [0.58, 0.59, 0.60]), steady)["conclusion"] == \
        la.SECOND_STEP_CONCLUSIONS[mechanism.NOT_SUPPORTED]
    risen = runs("r", [0.66, 0.67, 0.68])  # GRPO gains from the lower rate as much: the test cannot tell them apart
    assert la.second_step_texts(grpo, lopti, half, risen)["conclusion"] == la.CONFOUNDED
    assert la.second_step_texts(grpo, lopti, half, [])["conclusion"] == la.CONFOUNDED  # no control, no claim
    without = la.second_step_texts(grpo, lopti, [], [])
    assert without["moved"] == without["control"] == "–" and without["conclusion"] == mechanism.NO_TEST


def test_the_per_token_analysis_reads_as_two_tables_of_short_cells():
    """Chapter 4's companion shows the analysis as markdown tables (no long printed lines running off a 1,024 px
    column): the shares of (a) add up across the two columns, (b) has a row per step."""
    from rlbook.chapters import lopti_figures

    step = {"same_as_low_only_high": 0.96, "wrong_high": 0.51, "wrong_low": 0.42}
    result = {"tokens": 5341, "reward": 0.27, "eta": 0.5,
              "gradient": {"token_share_low": 0.026, "mean_norm_low": 0.8, "mean_norm_high": 0.021,
                           "logit_grad_share_low": 0.49, "param_grad_share_low": 0.87, "param_grad_norm_low": 0.0247,
                           "param_grad_norm_high": 0.0036, "param_grad_cosine": 0.17},
              "update": {"low-p only": step, "all tokens": step, "high-p only": step, "all + AR (0.3)": step}}
    text = lopti_figures.analysis_tables(result, "the smoke profile's warm start (nano-tiny)")
    assert text.startswith("the smoke profile's warm start (nano-tiny): 5341 response tokens, mean reward 0.27")
    assert "| share of the gradient at the weights | 87% | 13% |" in text
    assert "| all + AR (0.3) | 96% | 51% | 42% |" in text
    assert max(len(cell) for line in text.splitlines() if line.startswith("|") for cell in line.split("|")) < 45


def test_one_verdict_table_names_each_task_in_its_claims(tmp_path):
    """Both tasks' verdicts in one table: each claim names its task once; the table's line names both settings."""
    from rlbook.chapters import lopti_figures
    from rlbook.experiments import ARITHMETIC_AR_ALPHA, LOPTI_VARIANTS
    from rlbook.runset import RunSet

    def runs(task):
        out = []
        for variant, (alpha, eta) in LOPTI_VARIANTS.items():
            for seed in range(3):
                run = Run(tmp_path / task / f"{variant}-{seed}")
                run.path.mkdir(parents=True)
                alpha = ARITHMETIC_AR_ALPHA if task == "arithmetic" and alpha else alpha
                params = {"num_people": [2, 3]} if task == "knights_knaves" else {}
                config = RunConfig(**{**TINY, "task": task, "task_params": params}, seed=seed, ar_alpha=alpha,
                                   lopti_eta=eta, total_updates=30)
                write_json(run.path / "config.json", config.to_dict())
                for update in (0, 10, 20, 30):
                    run.append({"update": update, "eval_greedy_acc": 0.3 + 0.001 * update + 0.01 * seed})
                out.append(run)
        return RunSet(out, [run.config for run in out])

    by_setting = {"knights_knaves": runs("knights_knaves"), "knights_knaves_2people": RunSet([], []),
                  "arithmetic": runs("arithmetic")}
    claims = [s.claim for s in lopti_figures.verdict_rows(by_setting)]
    assert claims[0] == "GRPO learns Knights and Knaves, 2-3 people" and "GRPO learns arithmetic" in claims
    assert "Knights and Knaves, 2-3 people: ar beats GRPO" in claims and "arithmetic: lopti matches GRPO" in claims
    assert sum(c.count("Knights and Knaves") for c in claims) == 5 and sum(c.startswith("arithmetic") for c in claims) == 3
    table = lopti_figures.verdict_table(by_setting)  # the empty setting (a profile without it) has no rows
    assert table.startswith("**Knights and Knaves, 2-3 people, 30 updates (the paper: 3-7 people); "
                            "arithmetic, 30 updates**")
    assert "(seeds 0-2; all runs made by" in table.splitlines()[0]  # one provenance line over both tasks' runs


def test_low_probability_share_averages_each_runs_first_and_last_tenth(tmp_path):
    def run(name, shares):
        path = tmp_path / name
        path.mkdir()
        write_json(path / "config.json", RunConfig(experiment="x", name=name).to_dict())
        rows = [{"update": u, "low_prob_frac": v} for u, v in enumerate(shares)] + [{"update": len(shares)}]
        (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return Run(path)

    falling = run("a", [0.04] * 10 + [0.02] * 80 + [0.01] * 10)  # 100 logged updates: tenths of 10
    steady = run("b", [0.02] * 20)  # tenths of 2
    start, end = la.low_probability_share([falling, steady])
    assert start == pytest.approx(0.03) and end == pytest.approx(0.015)
    assert la.low_probability_share([run("c", [0.5, 0.1])], part=0.1) == pytest.approx((0.5, 0.1))  # at least one
    assert la.low_probability_share([run("d", [])]) is None  # nothing logged: no share
