"""TRL 1.16's own GRPOTrainer on rlbook's toy batch (rlbook.export.toy_batch), with the arguments the exports write:
its advantages (from _generate_and_score_completions, the toy rewards scored by a reward function) and its loss
(_compute_loss on the toy log-probs: the token-mean clipped surrogate with both bounds binding, GSPO's sequence ratio),
against rlbook's; and rlbook's M2POTrainer (rlbook.engine_plugins.trl_m2po), whose loss is Algorithm 1's."""
import re

import pytest
import torch
import yaml

pytest.importorskip("trl")
from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from rlbook.engine_plugins.trl_m2po import M2POTrainer  # noqa: E402
from rlbook.experiments import grpo_from_scratch, stale_run  # noqa: E402
from rlbook.export import export_text  # noqa: E402
from rlbook.export.toy_batch import LENGTHS, REWARDS, TRL_RESULTS, batch, rlbook_advantages, rlbook_loss  # noqa: E402
from rlbook.export.trl import MODEL_CONFIG  # noqa: E402
from rlbook.models import build_model  # noqa: E402

G, T = len(REWARDS), max(LENGTHS)


def toy_rewards(prompts, completions, **_):
    return list(REWARDS)


def trainer_of(config, tmp_path, cls=GRPOTrainer):
    """A trainer on nano-tiny with the GRPOConfig arguments of config's export, one group of the toy batch's size."""
    text = export_text(config, "trl")
    cited = dict(re.findall(r"^(\w+): .*  # (\S+)", text, flags=re.M))
    exported = {key: value for key, value in yaml.safe_load(text).items() if cited[key] != MODEL_CONFIG}
    exported.update(per_device_train_batch_size=G, num_generations=G, steps_per_generation=1,
                    gradient_accumulation_steps=1, max_completion_length=T)
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", **exported)
    model, tokenizer = build_model("nano-tiny")
    return cls(model=model, reward_funcs=toy_rewards, args=args, processing_class=tokenizer,
               train_dataset=Dataset.from_list([{"prompt": "1+2="}] * G))


def trl_loss(trainer) -> float:
    """TRL's _compute_loss on the toy batch: the model's own log-probs as pi, pi_old set so that r is the toy's."""
    toy = batch()
    model = trainer.model.eval()
    prompt = torch.full((G, 1), 3)
    completion = torch.arange(T).repeat(G, 1) % 7 + 4
    with torch.no_grad():
        logps, _, _ = GRPOTrainer._get_per_token_logps_and_entropies(
            trainer, model, torch.cat([prompt, completion], 1), torch.ones(G, 1 + T, dtype=torch.long), T)
    inputs = {"prompt_ids": prompt, "prompt_mask": torch.ones_like(prompt), "completion_ids": completion,
              "completion_mask": toy["mask"].long(), "advantages": rlbook_advantages().float(),
              "old_per_token_logps": logps - (toy["logp"] - toy["blogp"]).float(),
              "num_items_in_batch": toy["mask"].sum()}
    return float(trainer._compute_loss(model, inputs))


def test_group_advantages_differ_by_the_std_epsilon(tmp_path):
    trainer = trainer_of(grpo_from_scratch("cpu", 0), tmp_path)
    out = trainer._generate_and_score_completions([{"prompt": "1+2="}] * G)
    advantages = out["advantages"].tolist()
    assert advantages[0] == pytest.approx(TRL_RESULTS["advantage"], abs=1e-6)
    assert advantages == pytest.approx(rlbook_advantages().tolist(), abs=1e-3)  # (std + 1e-4) against (std + 1e-6)


@pytest.mark.parametrize("objective", ["grpo", "gspo"])
def test_losses_are_rlbooks(objective, tmp_path):
    ours, flags = rlbook_loss(objective)
    assert flags["clipped_low"].any() and flags["clipped_high"].any()
    config = grpo_from_scratch("cpu", 0) if objective == "grpo" else stale_run("cpu", "gspo", 0)
    assert trl_loss(trainer_of(config, tmp_path)) == pytest.approx(ours, abs=1e-6)


def test_m2po_trainer_computes_algorithm_1(tmp_path):
    ours, flags = rlbook_loss("m2po")
    assert flags["masked"].any()
    trainer = trainer_of(stale_run("cpu", "m2po", 0), tmp_path, M2POTrainer)
    assert trl_loss(trainer) == pytest.approx(ours, abs=1e-6)
    plain = trainer_of(stale_run("cpu", "m2po", 0), tmp_path)
    assert trl_loss(plain) == pytest.approx(rlbook_loss("no_clip")[0], abs=1e-6)  # TRL alone: no mask


def test_m2po_trainer_refuses_what_its_mask_cannot_cover(tmp_path):
    config = stale_run("cpu", "grpo", 0)
    with pytest.raises(ValueError, match=r"M2POTrainer cannot compute M2PO's Algorithm 1 with: "
                                         r"epsilon=0.2, epsilon_high=0.2 \(Algorithm 1 has no clip"):
        trainer_of(config, tmp_path, M2POTrainer)


def test_m2po_trainer_trains_and_logs_what_it_masks(tmp_path):
    """Two updates per generation, two passes: the second sees drift, and a tiny tau masks part of it."""
    from trl import GRPOConfig

    model, tokenizer = build_model("nano-tiny")
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", per_device_train_batch_size=G,
                      num_generations=G, steps_per_generation=2, num_iterations=2, max_completion_length=T,
                      max_steps=4, loss_type="dapo", beta=0.0, epsilon=1e6, epsilon_high=1e6, learning_rate=0.05,
                      logging_steps=1, save_strategy="no", bf16=False, disable_tqdm=True)
    def reward(completions, **_):
        return [sum(map(ord, c)) % 3.0 for c in completions]

    trainer = M2POTrainer(model=model, reward_funcs=reward, args=args, processing_class=tokenizer,
                          train_dataset=Dataset.from_list([{"prompt": "1+2="}] * 8), tau=1e-4)
    trainer.train()
    masked = [row["m2po/masked_frac"] for row in trainer.state.log_history if "m2po/masked_frac" in row]
    assert len(masked) == 4 and masked[0] == 0 and max(masked) > 0  # the first update is on-policy
