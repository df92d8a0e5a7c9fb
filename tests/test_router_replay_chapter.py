"""Chapter 6's helpers (rlbook.chapters.router_replay): the measurement on a model, the table, figures and explorer
on synthetic runs."""
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from rlbook.chapters import router_replay as ch6  # noqa: E402
from rlbook.config import RunConfig  # noqa: E402
from rlbook.models import build_model  # noqa: E402
from rlbook.models import routers  # noqa: E402
from rlbook.runs import RunStore  # noqa: E402
from rlbook.tasks import make_task  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


def synthetic(store, objective, replay, seed, acc, kl, f2):
    config = RunConfig(experiment="06_router_replay", name=f"{objective}-{replay}-{seed}", preset="nano-moe-tiny",
                       finetune="full", objective=objective, router_replay=replay, rollout_dtype="bfloat16",
                       router_noise=1.0, seed=seed, total_updates=4, eval_every=2)
    run = store.create(config)
    rows = [{"update": 0, "eval_greedy_acc": acc[0], "eval_sampled_acc": acc[0]}]
    rows += [{"update": u, "kl_k3": kl, "f2": f2, "routing_mismatch": 0.2, "clip_frac": 0.01, "grad_norm": 1.0 + u,
              "reward": 0.3, **({"eval_greedy_acc": acc[u // 2], "eval_sampled_acc": acc[u // 2]} if u % 2 == 0
                                else {})} for u in range(1, 5)]
    (run.path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run.path / "meta.json").write_text(json.dumps({"complete": True, "device": "cpu (test)"}))
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    store = RunStore(tmp_path_factory.mktemp("runs"))
    return ([synthetic(store, "grpo", False, s, [0.3, 0.4, 0.5 + s / 10], 2e-3, 0.02) for s in (0, 1)]
            + [synthetic(store, "grpo", True, s, [0.3, 0.4, 0.6], 1e-3, 0.01) for s in (0, 1)])


def test_variant_names_and_score_table(runs):
    assert [ch6.variant(r) for r in runs] == ["grpo", "grpo", "grpo+r3", "grpo+r3"]
    table = ch6.score_table(runs).splitlines()
    # grpo: scores (0.4 + 0.5) / 2 = 0.45 and (0.4 + 0.6) / 2 = 0.5 -> 0.475 ± 0.025
    assert table[2] == "| grpo | 2 | 0.475 ± 0.025 | 20.00% ± 0.00 | 2.00e-03 ± 0.0e+00 | 2.00% ± 0.00 | 1.00% ± 0.00 |"
    assert table[3].startswith("| grpo+r3 | 2 | 0.500 ± 0.000 |")


def test_mean_over_updates_per_variant(runs):
    assert ch6.mean_over_updates(runs, "grpo").mean == pytest.approx(2e-3)
    assert ch6.mean_over_updates(runs, "grpo+r3", "f2").mean == pytest.approx(0.01)
    assert ch6.mean_over_updates(runs, "tis") is None


def test_training_curves_and_dose_figure(runs):
    fig = ch6.training_curves(runs)
    assert len(fig.axes) == 6 and fig.axes[0].get_yscale() == "log"
    assert {t.get_text() for t in fig.legends[0].texts} == {"grpo (2 seeds)", "grpo+r3 (2 seeds)"}
    plt.close(fig)
    rows = [{"noise": n, "routing_mismatch": n / 2, "kl_k3": 1e-3 + n, "f2": n / 10, "kl_k3_r3": 1e-3, "f2_r3": 0.0}
            for n in (0.0, 0.5, 1.0)]
    fig = ch6.dose_figure(rows)
    assert len(fig.axes) == 3 and list(fig.axes[0].lines[0].get_ydata()) == [0.0, 0.25, 0.5]
    plt.close(fig)


def test_explorer_has_a_view_per_source_and_metric(runs):
    replay = ch6.explorer({"mine": runs, "empty": []}, metrics=("eval_greedy_acc", "kl_k3"))
    assert set(replay.views) == {"mine|eval_greedy_acc", "mine|kl_k3"}  # a source without runs is left out
    traces = replay.views["mine|eval_greedy_acc"]["data"]
    assert [t["name"] for t in traces] == ["grpo (2 seeds)", "grpo+r3 (2 seeds)"]
    assert traces[1]["y"] == [0.3, 0.4, 0.6] and replay.views["mine|kl_k3"]["layout"]["yaxis"]["type"] == "log"
    assert "rlbook-explorer" in replay._repr_html_()


def test_mismatch_and_token_routes_on_a_model():
    model, tokenizer = build_model("nano-moe-tiny", seed=0)
    with torch.no_grad():
        for router in routers(model):
            router.weight.mul_(20)
    task = make_task("arithmetic", digits=[1, 2])
    out, batch = ch6.mismatch(model, tokenizer, task, task.generate(4, seed=0), 4, 6, noise=1.0, dtype="bfloat16")
    assert 0 < out["routing_mismatch"] < 1 and len(out["routing_mismatch_layers"]) == 2
    assert out["kl_k3_r3"] < out["kl_k3"] and not batch.replay_routing
    row = ch6.most_flipped(model, batch, layer=1)
    routes = ch6.token_routes(model, batch, row, layer=1)
    assert sum(routes["flipped"]) > 0 and len(routes["tokens"]) == int(batch.response_mask[row].sum())
    assert all(len(e) == 2 for e in routes["rollout"] + routes["trainer"])
    fig = ch6.routes_figure(routes, tokenizer, 4, layer=1)
    assert len(fig.axes[0].get_xticklabels()) == len(routes["tokens"])
    plt.close(fig)
    clean, _ = ch6.mismatch(model, tokenizer, task, task.generate(4, seed=0), 4, 6, noise=0.0, dtype="float32")
    assert clean["routing_mismatch"] == 0 and clean["kl_k3"] == pytest.approx(0, abs=1e-9)


def test_the_explorer_is_also_a_widget_over_the_same_view(runs):
    explorer = ch6.explorer({"mine": runs}, metrics=("eval_greedy_acc", "kl_k3"))
    source, metric = explorer.widget().children[1].children
    assert list(source.options) == [("mine", "mine")] and metric.value == "eval_greedy_acc"
    metric.value = "kl_k3"  # redraws the view the page stores for that choice
    fig = ch6.training_curves([r for r in runs if ch6.variant(r) == "grpo+r3"], ("f2",), 1)
    assert len(fig.axes) == 1 and fig.axes[0].get_title() == "Extreme tokens F(2)"
    plt.close(fig)
