"""The GRPO / M2PO trainer on a 0.1M-parameter model: determinism, staleness, resume, replay, objectives, fused path.

Most tests swap the task's reward for a shaped one (a fraction of the completion's characters), because a model
with random weights never solves arithmetic: with all rewards 0 every advantage is 0, the loss is 0 and most
comparisons would hold trivially. The prompts, sampling, trainer and evaluation are the real ones.
"""
import dataclasses
import math

import pytest
import torch

import rlbook.evaluate
import rlbook.losspath
import rlbook.rollout
import rlbook.runs
import rlbook.trainer
from rlbook.evaluate import sampled_eval_seed
from rlbook.config import RunConfig
from rlbook.objectives import OBJECTIVES, needs_proximal
from rlbook.obtain import run_or_load
from rlbook.runs import Run, RunStore
from rlbook.tasks import make_task
from rlbook.trainer import TIMING_KEYS as TIMING
from shaped import ShapedTask

TINY = dict(experiment="t", preset="nano-tiny", init="scratch", prompts_per_step=4, group_size=4, total_updates=4,
            eval_every=2, eval_size=8, checkpoint_every=1, max_new_tokens=6)


def tiny(**changes) -> RunConfig:
    return RunConfig(**{**TINY, **changes})


def train(config: RunConfig, root) -> Run:
    return run_or_load(config, RunStore(root), progress=False, references=False)


def untimed(rows):
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


def per_update(rows):
    """The rows of model updates, without row 0 (the base model's evaluation, written before any update)."""
    return [row for row in rows if row["update"] > 0]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def shaped(monkeypatch):
    monkeypatch.setattr(rlbook.trainer, "make_task", lambda name, **params: ShapedTask(make_task(name, **params)))


def interrupt_on_append(monkeypatch, call: int):
    """Run.append raises KeyboardInterrupt (as Ctrl-C would) on its `call`-th call, before writing.

    A fresh run's first call writes row 0, so the row of update u is the (u + 1)-th call."""
    original, calls = Run.append, [0]

    def append(self, row):
        calls[0] += 1
        if calls[0] == call:
            raise KeyboardInterrupt
        original(self, row)

    monkeypatch.setattr(Run, "append", append)


# ---- determinism: on CPU the same seed gives the same metrics ----

@pytest.mark.parametrize("changes", [{}, {"staleness": 2, "updates_per_step": 2, "lr": 0.05, "objective": "m2po"}],
                         ids=["real-task", "stale-m2po"])
def test_same_seed_same_metrics(tmp_path, request, changes):
    if changes:
        request.getfixturevalue("shaped")
    config = tiny(**changes)
    first, second = train(config, tmp_path / "a"), train(config, tmp_path / "b")
    assert first.path != second.path
    rows = untimed(first.metrics)
    assert rows[0]["update"] == 0 and len(per_update(rows)) == config.total_updates == len(rows) - 1
    assert rows == untimed(second.metrics)
    assert all(key in row for row in per_update(first.metrics) for key in TIMING)


def test_different_seed_different_metrics(tmp_path, shaped):
    a = untimed(per_update(train(tiny(), tmp_path).metrics))
    b = untimed(per_update(train(tiny(seed=1), tmp_path).metrics))
    assert len(a) == len(b) == 4
    assert [r["entropy"] for r in a] != [r["entropy"] for r in b]
    assert [r["loss"] for r in a] != [r["loss"] for r in b]


def test_shaped_reward_gives_a_learning_signal(tmp_path, shaped):
    """Guard for the other tests: the shaped reward makes non-zero advantages and losses."""
    rows = per_update(train(tiny(), tmp_path).metrics)
    assert len(rows) == 4
    assert any(abs(r["loss"]) > 1e-3 for r in rows)
    assert all(0 < r["reward"] < 1 for r in rows)


# ---- staleness: the step starting at update u trains on the batch sampled by the policy of update max(0, u - s) ----

def expected_lags(total: int, per_step: int, staleness: int) -> list[int]:
    """per_step = updates_per_step * epochs: the updates made with one rollout batch."""
    lags = []
    for u in range(total):  # u = updates made before this row's update
        step_start = u - u % per_step
        lags.append(u - max(0, step_start - staleness))
    return lags


def test_expected_lags_by_hand():
    assert expected_lags(12, 2, 4) == [0, 1, 2, 3, 4, 5, 4, 5, 4, 5, 4, 5]
    assert expected_lags(12, 2, 0) == [0, 1] * 6
    assert expected_lags(10, 4, 4) == [0, 1, 2, 3, 4, 5, 6, 7, 4, 5]


@pytest.mark.parametrize("updates_per_step, epochs, staleness, total, lags", [
    (2, 1, 0, 12, [0, 1] * 6),
    (2, 1, 4, 12, [0, 1, 2, 3, 4, 5, 4, 5, 4, 5, 4, 5]),
    (1, 1, 3, 5, [0, 1, 2, 3, 3]),
    (2, 2, 4, 10, [0, 1, 2, 3, 4, 5, 6, 7, 4, 5]),  # epochs: each batch feeds 4 updates; the last step is cut short
])
def test_policy_lag(tmp_path, monkeypatch, updates_per_step, epochs, staleness, total, lags):
    """policy_lag in the rows matches the definition, and matches the updates the model really had when each
    trained batch was sampled (counted independently of Rollout.policy_version)."""
    updates_done, sampled_at, kept, trained_versions = [0], {}, [], []
    original_rollout, original_update = rlbook.rollout.rollout, rlbook.trainer.train_update

    def rollout(*args, **kwargs):
        batch = original_rollout(*args, **kwargs)
        kept.append(batch)  # keep alive so ids stay unique
        sampled_at.update({id(problem): updates_done[0] for problem in batch.problems})
        return batch

    def train_update(model, optimizer, batch, *args, **kwargs):
        versions = {sampled_at[id(problem)] for problem in batch.problems}
        assert len(versions) == 1
        trained_versions.append(versions.pop())
        row = original_update(model, optimizer, batch, *args, **kwargs)
        updates_done[0] += 1
        return row

    monkeypatch.setattr(rlbook.rollout, "rollout", rollout)  # the trainer's BatchSampler calls it
    monkeypatch.setattr(rlbook.trainer, "train_update", train_update)
    config = tiny(updates_per_step=updates_per_step, epochs=epochs, staleness=staleness, total_updates=total,
                  eval_every=100, max_new_tokens=3)
    metrics = train(config, tmp_path).metrics
    assert [r["update"] for r in metrics] == list(range(total + 1))
    rows = per_update(metrics)
    per_step = updates_per_step * epochs
    assert [r["policy_lag"] for r in rows] == lags == expected_lags(total, per_step, staleness)
    assert lags == [u - v for u, v in enumerate(trained_versions)]
    assert [r["update"] for r in rows] == list(range(1, total + 1))
    assert [r["step"] for r in rows] == [u // per_step + 1 for u in range(total)]
    # no batch is sampled that the run would never train
    assert len(kept) == -(-total // per_step)


# ---- resume: an interrupted run continues exactly where the uninterrupted one would have been ----

@pytest.mark.parametrize("changes", [{"engine": "reference"}, {"staleness": 2, "engine": "reference"},
                                     {"finetune": "full", "engine": "reference"}, {"engine": "graph"},
                                     {"engine": "fast"}],
                         ids=["s0", "s2", "full", "graph-engine", "fast-engine"])
@pytest.mark.parametrize("interrupt_at", [5, 6])
def test_resume_matches_uninterrupted(tmp_path, monkeypatch, shaped, changes, interrupt_at):
    config = tiny(total_updates=6, updates_per_step=1, checkpoint_every=2, **changes)
    reference = untimed(train(config, tmp_path / "ref").metrics)
    assert len(per_update(reference)) == 6 and len(reference) == 7

    with monkeypatch.context() as m:
        interrupt_on_append(m, interrupt_at + 1)  # interrupted while writing update interrupt_at's row
        with pytest.raises(KeyboardInterrupt):
            train(config, tmp_path / "store")
    run = RunStore(tmp_path / "store").find(config)
    assert run is not None and not run.complete and run.meta["complete"] is False
    assert [r["update"] for r in run.metrics] == list(range(interrupt_at))
    assert len(per_update(run.metrics)) == interrupt_at - 1 <= 5
    assert run.read_state()["update"] == 4

    resumed = train(config, tmp_path / "store")
    assert resumed.path == run.path
    assert resumed.complete and resumed.meta["resumed_at"] == 4 and resumed.meta["updates"] == 6
    assert untimed(resumed.metrics) == reference


def test_resume_after_torn_metrics_line(tmp_path, monkeypatch, shaped):
    """A process killed mid-append leaves a torn last line; the resumed run still has exactly one row per update."""
    config = tiny(total_updates=6, updates_per_step=1, checkpoint_every=2)
    reference = untimed(train(config, tmp_path / "ref").metrics)
    with monkeypatch.context() as m:
        interrupt_on_append(m, 7)  # row 0 and updates 1-5 are written
        with pytest.raises(KeyboardInterrupt):
            train(config, tmp_path / "store")
    run = RunStore(tmp_path / "store").find(config)
    with open(run.path / "metrics.jsonl", "a") as f:
        f.write('{"update": 6, "rew')
    assert [r["update"] for r in run.metrics] == [0, 1, 2, 3, 4, 5]
    assert untimed(train(config, tmp_path / "store").metrics) == reference


def test_resume_before_first_checkpoint(tmp_path, monkeypatch, shaped):
    config = tiny(total_updates=6, updates_per_step=1, checkpoint_every=4)
    reference = untimed(train(config, tmp_path / "ref").metrics)
    with monkeypatch.context() as m:
        interrupt_on_append(m, 4)  # row 0 and updates 1-2 are written
        with pytest.raises(KeyboardInterrupt):
            train(config, tmp_path / "store")
    run = RunStore(tmp_path / "store").find(config)
    assert run.read_state() is None and [r["update"] for r in run.metrics] == [0, 1, 2]
    assert untimed(train(config, tmp_path / "store").metrics) == reference


def test_finished_run_replays_without_training(tmp_path, monkeypatch, shaped):
    config = tiny()
    first = train(config, tmp_path)
    rows, meta = first.metrics, first.meta

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run must not train again")

    monkeypatch.setattr(rlbook.trainer, "train", no_training)
    replay = train(config, tmp_path)
    assert replay.path == first.path and replay.complete
    assert replay.metrics == rows and replay.meta == meta
    renamed = train(config.replace(name="another-name"), tmp_path)  # the display name is not part of the identity
    assert renamed.path == first.path


# ---- failures ----

def test_non_finite_loss_stops_with_the_update(tmp_path, monkeypatch, shaped):
    original, calls = rlbook.losspath.policy_loss, [0]

    def policy_loss(*args, **kwargs):
        calls[0] += 1
        loss, flags = original(*args, **kwargs)
        return (loss * math.nan if calls[0] == 3 else loss), flags

    monkeypatch.setattr(rlbook.losspath, "policy_loss", policy_loss)
    config = tiny(total_updates=5)
    with pytest.raises(FloatingPointError, match=r"^update 3\b"):
        train(config, tmp_path)
    run = RunStore(tmp_path).find(config)
    assert [r["update"] for r in run.metrics] == [0, 1, 2]
    assert run.meta["complete"] is False and not run.complete


# ---- objectives, Advantage Reweighting and Lopti run end to end ----

@pytest.mark.parametrize("objective", sorted(OBJECTIVES))
def test_every_objective_trains(tmp_path, shaped, objective):
    config = tiny(objective=objective, total_updates=2, updates_per_step=2, lr=0.05, eval_every=100)
    rows = per_update(train(config, tmp_path).metrics)
    assert [r["update"] for r in rows] == [1, 2]
    for row in rows:
        assert math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"]) and row["grad_norm"] > 0
        assert 0 <= row["clip_frac"] <= 1 and 0 <= row["mask_frac"] <= 1
    assert rows[1]["m2"] > 0  # the second mini-batch is off-policy: the first update moved the weights


def test_proximal_objectives_get_the_step_start_policy(tmp_path, monkeypatch, shaped):
    """tis / decoupled: prox_logp is recomputed once per step, so it equals blogp within a fresh on-policy step."""
    seen, original = [], rlbook.trainer.loss_and_tokens

    def loss_and_tokens(model, batch, advantages, prox_logp, objective, path):
        seen.append((prox_logp, batch.behavior_logp, batch.response_mask))
        return original(model, batch, advantages, prox_logp, objective, path)

    monkeypatch.setattr(rlbook.trainer, "loss_and_tokens", loss_and_tokens)
    train(tiny(objective="decoupled", total_updates=4, updates_per_step=2, staleness=2, eval_every=100), tmp_path)
    assert len(seen) == 4 and all(prox is not None for prox, _, _ in seen)
    (prox0, blogp0, mask0), (prox2, blogp2, mask2) = seen[0], seen[2]
    torch.testing.assert_close(prox0 * mask0, blogp0 * mask0, atol=1e-4, rtol=0)  # base model, not yet updated
    # step 2 trains a batch sampled two updates earlier: the proximal policy is the current one, not the sampler
    assert ((prox2 - blogp2).abs() * mask2).max() > 1e-3


def test_advantage_reweighting_scales_advantages(tmp_path, monkeypatch, shaped):
    seen, original = [], rlbook.trainer.loss_and_tokens

    def loss_and_tokens(model, batch, advantages, prox_logp, objective, path):
        seen.append((advantages.clone(), batch.behavior_logp.clone(), batch.response_mask.clone()))
        return original(model, batch, advantages, prox_logp, objective, path)

    monkeypatch.setattr(rlbook.trainer, "loss_and_tokens", loss_and_tokens)
    rows = per_update(train(tiny(ar_alpha=0.3, total_updates=2, eval_every=100), tmp_path).metrics)
    assert len(rows) == 2 and all(math.isfinite(r["loss"]) for r in rows)
    advantages, blogp, mask = seen[0]
    plain = advantages / (0.3 * blogp.exp() + 0.7)
    # the un-reweighted advantage is one value per sample, broadcast over its response tokens
    per_sample = plain.sum(1, keepdim=True) / mask.sum(1, keepdim=True)
    torch.testing.assert_close(plain, per_sample * mask, atol=1e-5, rtol=1e-5)
    assert (plain.abs() > 0).any() and not torch.allclose(plain, advantages)


@pytest.mark.parametrize("eta", [0.5, -0.5])
def test_lopti_two_stages(tmp_path, monkeypatch, shaped, eta):
    """Lopti makes one optimizer step per non-empty stage; eta > 0 trains the low-probability tokens first."""
    seen, original = [], rlbook.trainer.loss_and_tokens

    def loss_and_tokens(model, batch, advantages, prox_logp, objective, path):
        seen.append((advantages.clone(), batch.behavior_logp.clone(), batch.response_mask.clone()))
        return original(model, batch, advantages, prox_logp, objective, path)

    monkeypatch.setattr(rlbook.trainer, "loss_and_tokens", loss_and_tokens)
    # temperature 0.1 makes the random model's sampled tokens a mix of p < 0.5 and p >= 0.5
    config = tiny(lopti_eta=eta, temperature=0.1, total_updates=2, eval_every=100)
    rows = per_update(train(config, tmp_path).metrics)
    assert len(rows) == 2 and all(math.isfinite(r["loss"]) for r in rows)
    assert len(seen) == 4  # two stages per update
    for first, second in (seen[0:2], seen[2:4]):
        (adv1, blogp, mask), (adv2, _, _) = first, second
        low = (blogp.exp() < 0.5) & (mask > 0)
        assert low.any() and (~low & (mask > 0)).any()
        first_stage = low if eta > 0 else ~low & (mask > 0)
        assert (adv1[~first_stage] == 0).all() and (adv2[first_stage] == 0).all()
        torch.testing.assert_close(adv1 + adv2, adv1.where(first_stage, adv2))


# ---- the fused (Triton, interpreted on CPU) path gives the reference path's numbers ----

FUSED_KEYS = ("reward", "loss", "entropy", "clip_frac_low", "clip_frac_high", "mask_frac", "m2", "grad_norm",
              "eval_greedy_acc", "eval_sampled_acc")


@pytest.mark.parametrize("objective", ["grpo", "m2po"])
def test_fused_run_equals_reference(tmp_path, shaped, objective):
    """Two updates on one batch (the second is off-policy). Longer runs drift apart by more than 1e-4 without any
    bug: Adam's first steps are about lr * sign(g), so float noise on near-zero gradients moves weights by lr."""
    config = tiny(objective=objective, total_updates=2, updates_per_step=2, lr=0.05, eval_every=2)
    fused = train(config.replace(fused_ratio="on"), tmp_path)
    plain = train(config.replace(fused_ratio="off"), tmp_path)
    assert fused.meta["fused_ratio"] is True and plain.meta["fused_ratio"] is False
    flag = "clip_frac" if objective == "grpo" else "mask_frac"
    second = per_update(plain.metrics)[1]
    assert second["update"] == 2 and second[flag] > 0  # the comparison covers clipped / masked tokens
    assert "eval_greedy_acc" in second
    assert [r["update"] for r in fused.metrics] == [r["update"] for r in plain.metrics] == [0, 1, 2]
    for a, b in zip(fused.metrics, plain.metrics, strict=True):
        for key in FUSED_KEYS:
            if b.get(key) is None:
                assert a.get(key) is None, key
            else:
                assert a[key] == pytest.approx(b[key], abs=1e-4), (a["update"], key)


@pytest.mark.parametrize("objective", ["grpo", "m2po", "m2po_cap", "tis", "decoupled"])
def test_fused_update_equals_reference(objective):
    """One trainer loss on a real rollout with off-policy behavior log-probs: same loss, tokens and gradients."""
    config = tiny(objective=objective)
    torch.manual_seed(0)
    model, tokenizer = rlbook.trainer.init_policy(config, progress=False)
    task = make_task(config.task)
    generator = torch.Generator().manual_seed(0)
    batch = rlbook.rollout.rollout(model, tokenizer, task, task.generate(4, seed=7), 4, 6, 1.0, generator, 0)
    mask = batch.response_mask
    noise = torch.randn(batch.behavior_logp.shape, generator=generator)
    batch = dataclasses.replace(batch, behavior_logp=(batch.behavior_logp + 0.3 * noise) * mask)
    advantages = torch.randn(len(batch), 1, generator=generator) * mask
    prox, (loss_fn, path) = None, rlbook.trainer.resolve(config, torch.device("cpu"))
    path = dataclasses.replace(path, name="reference")
    if needs_proximal(objective):
        prox = rlbook.losspath.no_grad_stats(model, batch, path)[0] + 0.1 * noise * mask
    results = []
    for path in (dataclasses.replace(path, name="fused"), path):
        model.zero_grad(set_to_none=True)
        loss, logp, entropy, flags = rlbook.trainer.loss_and_tokens(model, batch, advantages, prox, loss_fn, path)
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters() if p.requires_grad]
        results.append((loss.detach(), logp.detach() * mask, entropy.detach() * mask, flags, grads))
    (loss_f, logp_f, ent_f, flags_f, grads_f), (loss_r, logp_r, ent_r, flags_r, grads_r) = results
    torch.testing.assert_close(loss_f, loss_r, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(logp_f, logp_r, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent_f, ent_r, rtol=1e-5, atol=1e-5)
    for key in ("clipped_low", "clipped_high", "masked"):
        assert torch.equal(flags_f[key].bool() & (mask > 0), flags_r[key].bool() & (mask > 0)), key
    assert sum(int(flags_r[key].sum()) for key in ("clipped_low", "clipped_high", "masked")) > 0
    assert any(g.abs().max() > 0 for g in grads_r)
    for g_f, g_r in zip(grads_f, grads_r, strict=True):
        torch.testing.assert_close(g_f, g_r, rtol=1e-4, atol=1e-6)


# ---- LoRA trains only the adapter; full fine-tuning trains everything ----

def capture_model(monkeypatch):
    captured, original = {}, rlbook.trainer.save_state

    def save_state(run, model, *args):
        captured["model"] = model
        original(run, model, *args)

    monkeypatch.setattr(rlbook.trainer, "save_state", save_state)
    return captured


def initial_model(config):
    torch.manual_seed(config.seed)
    return rlbook.trainer.init_policy(config, progress=False)[0]


def test_full_finetune_trains_every_parameter(tmp_path, monkeypatch, shaped):
    captured = capture_model(monkeypatch)
    config = tiny(finetune="full", total_updates=2, eval_every=100)
    run = train(config, tmp_path)
    trained = dict(captured["model"].named_parameters())
    initial = dict(initial_model(config).named_parameters())
    assert trained.keys() == initial.keys() and not any("lora" in name for name in trained)
    unchanged = [name for name, p in trained.items() if torch.equal(p.detach(), initial[name].detach())]
    assert unchanged == []
    state = run.read_state()
    assert state["model"].keys() == trained.keys() and state["update"] == 2


def test_lora_keeps_base_weights(tmp_path, monkeypatch, shaped):
    captured = capture_model(monkeypatch)
    config = tiny(finetune="lora", total_updates=2, eval_every=100)
    run = train(config, tmp_path)
    trained = dict(captured["model"].named_parameters())
    initial = dict(initial_model(config).named_parameters())
    assert trained.keys() == initial.keys()
    lora = {name for name in trained if "lora_" in name}
    assert lora and all(trained[name].requires_grad == (name in lora) for name in trained)
    for name, p in trained.items():
        assert torch.equal(p.detach(), initial[name].detach()) != (name in lora), name
    state = run.read_state()
    assert set(state["model"]) == lora


# ---- evaluation rows ----

def test_eval_rows(tmp_path, shaped):
    config = tiny(total_updates=5, eval_every=2)
    rows = train(config, tmp_path).metrics
    assert [r["update"] for r in rows] == [0, 1, 2, 3, 4, 5]
    for row in rows:
        evaluated = row["update"] in (0, 2, 4, 5)  # row 0: the base model
        for key in ("eval_greedy_acc", "eval_sampled_acc"):
            assert (key in row) == evaluated, (row["update"], key)
            if evaluated:  # greedy: one answer per problem; sampled: eval_samples answers per problem
                value, answers = row[key], config.eval_size * (1 if key == "eval_greedy_acc" else config.eval_samples)
                assert 0 <= value <= 1 and (value * answers).is_integer()


def test_fresh_run_starts_with_the_base_model_row(tmp_path, shaped):
    """Row 0 is the base model's evaluation (greedy and sampled), before any update, with no training metrics."""
    config = tiny(total_updates=2, eval_every=100)
    rows = train(config, tmp_path).metrics
    assert [r["update"] for r in rows] == [0, 1, 2]
    first = rows[0]
    assert set(first) == {"update", "eval_greedy_acc", "eval_sampled_acc"} and "loss" not in first
    for key, answers in (("eval_greedy_acc", config.eval_size), ("eval_sampled_acc", config.eval_size * 4)):
        assert 0 <= first[key] <= 1 and (first[key] * answers).is_integer(), key
    # it is the accuracy of the model the run starts from
    torch.manual_seed(config.seed)  # as train() does before building the model
    base, tokenizer = rlbook.trainer.init_policy(config, progress=False)
    task = ShapedTask(make_task(config.task, **config.task_params))
    problems = rlbook.evaluate.evaluation_problems(config.task, config.task_params, config.eval_size)
    greedy = rlbook.evaluate.accuracy(base, tokenizer, task, problems, config.max_new_tokens)
    sampled = rlbook.evaluate.accuracy(base, tokenizer, task, problems, config.max_new_tokens, config.temperature,
                                      seed=sampled_eval_seed(config.seed, 0), samples=config.eval_samples)
    assert first["eval_greedy_acc"] == greedy and first["eval_sampled_acc"] == sampled


@pytest.mark.parametrize("checkpoint_every, interrupted_update", [(2, 5), (4, 3)], ids=["after-checkpoint", "before"])
def test_resumed_run_has_one_base_model_row(tmp_path, monkeypatch, shaped, checkpoint_every, interrupted_update):
    """Row 0 is kept on resume (and re-made with the rest when no checkpoint was taken), never duplicated."""
    config = tiny(total_updates=6, updates_per_step=1, checkpoint_every=checkpoint_every, eval_every=100)
    with monkeypatch.context() as m:
        interrupt_on_append(m, interrupted_update + 1)
        with pytest.raises(KeyboardInterrupt):
            train(config, tmp_path)
    run = RunStore(tmp_path).find(config)
    assert [r["update"] for r in run.metrics] == list(range(interrupted_update))
    resumed = train(config, tmp_path)
    assert resumed.path == run.path and resumed.complete
    updates = [r["update"] for r in resumed.metrics]
    assert updates.count(0) == 1 and updates == list(range(config.total_updates + 1))


def test_a_run_of_another_backend_is_never_replayed_as_rlbooks(tmp_path):
    """rlbook.obtain.run_or_load serves both backends (rlbook.trl_backend calls it with its own trainer): a stored
    TRL run of this config is refused, naming the experiment to store rlbook's run under."""
    config = tiny()
    RunStore(tmp_path).create(config).update_meta(backend="trl", complete=True)
    with pytest.raises(ValueError, match="holds a trl run of this config.*--experiment t_rlbook"):
        train(config, tmp_path)
