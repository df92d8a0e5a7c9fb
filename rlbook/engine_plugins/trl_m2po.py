"""M2PO's Algorithm 1 in TRL 1.16: GRPOTrainer with M2PO's second-moment mask on the tokens of each update.

Algorithm 1's loss is -sum(M r A) / (response tokens of the mini-batch), r = pi / pi_behaviour, no clip
(rlbook.objectives.m2po). TRL computes exactly that when its clipped surrogate has bounds no ratio reaches, its loss
type is 'dapo' (a token sum over the batch's response tokens) and the masked tokens' advantages are 0. The mask needs
the ratio of the update's own forward pass, so M2POTrainer takes the log-probs of that pass as TRL computes them
(`_get_per_token_logps_and_entropies`), computes Algorithm 1's mask with rlbook.objectives.m2po_keep_mask, and sets the
masked tokens' advantages to 0 before TRL's loss (`_compute_loss`) reads them; it logs the fraction masked as
`m2po/masked_frac`. TRL's old log-probs, recomputed at generation by the model that sampled, are the behaviour
policy's.

It refuses, in one line naming each, what would make the mask other than Algorithm 1's over one update's mini-batch:
several processes or gradient accumulation (each pass would mask its own share), vLLM (its importance weights
multiply the loss and its log-probs are the sampler's), another loss type, a KL term, a clip that binds, sequence-level
ratios, an entropy or off-policy mask, another TRL release (the hook relies on 1.16's order: log-probs, then
advantages).

    from trl import get_peft_config
    from trl.scripts.grpo import make_parser
    from rlbook.engine_plugins.trl_m2po import M2POTrainer

    _, args, model_args, _ = make_parser().parse_args_and_config(["--config", "exports/<an m2po run>.trl.yaml"])
    trainer = M2POTrainer(model=model_args.model_name_or_path, reward_funcs=..., args=args, train_dataset=...,
                          peft_config=get_peft_config(model_args), tau=0.04)
"""
from __future__ import annotations

import torch
import trl
from trl import GRPOTrainer

from ..objectives import m2po_keep_mask
from ..trl_backend import NO_CLIP_EPSILON, TRL_VERSION


def refusals(args, processes: int) -> list[str]:
    """What in GRPOConfig `args` (on `processes` processes) M2POTrainer cannot cover, one line each."""
    wanted = {"loss_type": "dapo", "beta": 0.0, "importance_sampling_level": "token", "use_vllm": False,
              "top_entropy_quantile": 1.0, "off_policy_mask_threshold": None, "delta": None,
              "gradient_accumulation_steps": 1}
    lines = [f"{key}={getattr(args, key)!r} (needs {value!r})" for key, value in wanted.items()
             if getattr(args, key) != value]
    if min(args.epsilon, args.epsilon_high or args.epsilon) < NO_CLIP_EPSILON:
        lines.append(f"epsilon={args.epsilon}, epsilon_high={args.epsilon_high} (Algorithm 1 has no clip: needs "
                     f"{NO_CLIP_EPSILON:g})")
    if processes != 1:
        lines.append(f"{processes} processes (needs 1: each would mask its own share of the mini-batch)")
    if trl.__version__ != TRL_VERSION:
        lines.append(f"trl {trl.__version__} (written for {TRL_VERSION}'s GRPOTrainer._compute_loss)")
    return lines


class M2POTrainer(GRPOTrainer):
    """GRPOTrainer whose update masks the tokens M2PO's Algorithm 1 masks (tau: the second-moment threshold)."""

    def __init__(self, *args, tau: float = 0.04, **kwargs):
        from accelerate import PartialState

        config = kwargs.get("args") if "args" in kwargs else (args[2] if len(args) > 2 else None)
        lines = refusals(config, PartialState().num_processes) if config is not None else ["no GRPOConfig (args)"]
        if lines:
            raise ValueError(f"M2POTrainer cannot compute M2PO's Algorithm 1 with: {'; '.join(lines)}")
        super().__init__(*args, **kwargs)
        self.tau, self._update_inputs = tau, None

    def _compute_loss(self, model, inputs):
        self._update_inputs = dict(inputs)  # a copy: TRL reuses a generation's inputs for its later updates
        try:
            return super()._compute_loss(model, self._update_inputs)
        finally:
            self._update_inputs = None

    def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
        logps, entropies, aux = super()._get_per_token_logps_and_entropies(model, *args, **kwargs)
        if self._update_inputs is not None:  # the update's forward pass (not generation's old log-probs)
            inputs = self._update_inputs
            self._update_inputs = None
            inputs["advantages"], masked = masked_advantages(logps.detach(), inputs, self.tau)
            self._metrics["train" if model.training else "eval"]["m2po/masked_frac"].append(masked)
        return logps, entropies, aux


def masked_advantages(logps: torch.Tensor, inputs: dict, tau: float) -> tuple[torch.Tensor, float]:
    """The advantages [B, T] of an update's inputs with Algorithm 1's masked tokens set to 0 (r = pi / pi_old, TRL's
    old log-probs; on-policy with one update per generation TRL passes none: r = 1, nothing masked), and the fraction
    of response tokens masked."""
    old = inputs.get("old_per_token_logps")
    old = logps if old is None else old
    mask = inputs["completion_mask"].bool()
    advantages = inputs["advantages"]
    advantages = (advantages[:, None] if advantages.dim() == 1 else advantages).expand_as(logps)
    keep = m2po_keep_mask(logps - old, advantages, mask, tau)
    return advantages * keep, float((mask & ~keep).sum() / mask.sum().clamp(min=1))
