"""Routing of a mixture-of-experts model at rollout and in training, and Rollout Routing Replay (R3).

"Stabilizing MoE Reinforcement Learning by Aligning Training and Inference Routers" (Ma et al., arXiv 2510.11370):
an inference engine and the trainer compute the router's logits with different kernels, so for some tokens they
pick different top-k experts; the trainer's log-probs then differ from the rollout's far more than in a dense
model. R3 records the experts each token was routed to at rollout and, in training, routes it to the same experts,
with gate weights from the trainer's own router logits restricted to them (so the router still gets gradients).

Everything here works through forward hooks on the routers of transformers' Qwen3-MoE
(`Qwen3MoeTopKRouter.forward(hidden [N, H]) -> (logits [N, E], gate weights [N, k], experts [N, k])`): a hook
sees each call's output and may replace it. The experts of a batch are stored as uint8 [B, layers, P + C, k]
aligned with the training input `cat(prompt_ids, response_ids)`; NOT_ROUTED marks positions the rollout never
ran: padding, and a row's last response token when sampling stopped before feeding it back (its routing changes
no log-prob of the response).
"""
from __future__ import annotations

import copy
from contextlib import contextmanager

import torch

from .checks import choose
from .decoding import check_generator
from .models import routers

NOT_ROUTED = 255  # uint8 sentinel: this position's routing was not recorded (the trainer routes it itself)
ROLLOUT_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def rollout_copy(model, dtype: str):
    """The policy as an inference engine holds it: the model itself (float32) or a copy in bfloat16 (weights,
    activations and KV cache), the rollout precision of RunConfig.rollout_dtype."""
    choose("rollout_dtype", dtype, list(ROLLOUT_DTYPES))
    return model if dtype == "float32" else copy.deepcopy(model).to(ROLLOUT_DTYPES[dtype]).eval()


def top_k_gate(router, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(gate weights [N, k], experts [N, k]): the router's own rule (transformers' Qwen3MoeTopKRouter.forward):
    top-k of softmax(logits), renormalised over the k when norm_topk_prob."""
    probs = torch.softmax(logits, dim=-1, dtype=torch.float)
    weights, experts = torch.topk(probs, router.top_k, dim=-1)
    if router.norm_topk_prob:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(logits.dtype), experts


def replay_gate(router, logits: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
    """R3's gate weights (arXiv 2510.11370, section 3): g_i = softmax(s)_i over the replayed experts i in I_rollout,
    renormalised over them (= softmax of the logits restricted to the replayed experts) when norm_topk_prob; s are
    the trainer's own router logits, so the weights keep their gradient. Same operations as `top_k_gate`: replaying
    the experts the router would choose anyway gives the same weights, bit for bit."""
    weights = torch.softmax(logits, dim=-1, dtype=torch.float).gather(-1, experts)
    if router.norm_topk_prob:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(logits.dtype)


@contextmanager
def hooked(model, hook_of_layer):
    """Install `hook_of_layer(layer)` as a forward hook on every router for the duration of the block."""
    handles = [router.register_forward_hook(hook_of_layer(layer)) for layer, router in enumerate(routers(model))]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


class RoutingRecorder:
    """The rollout side: records the experts of every routed token while `sample` runs (it calls `after_prefill`
    and `after_step` after each model call), optionally with Gaussian noise of std `noise` on the router logits
    before the top-k (a second, dosable source of routing mismatch), drawn from `generator` (on the model's device)."""

    def __init__(self, model, noise: float = 0.0, generator: torch.Generator | None = None):
        self.model, self.noise, self.generator = model, noise, generator
        self.layers, self.calls, self.placed = len(routers(model)), [], []
        if not self.layers:
            raise ValueError("routing can only be recorded for a mixture-of-experts model (it has no routers)")
        check_generator(generator, next(model.parameters()).device)
        if max(r.num_experts for r in routers(model)) > NOT_ROUTED:
            raise ValueError(f"experts are stored as uint8: at most {NOT_ROUTED} experts per layer")

    def hook(self, layer: int):
        def record(router, args, output):
            logits, weights, experts = output
            if self.noise:
                noise = torch.randn(logits.shape, generator=self.generator, device=logits.device)
                weights, experts = top_k_gate(router, (logits.float() + self.noise * noise).to(logits.dtype))
            if layer == 0:
                self.calls.append([])
            self.calls[-1].append(experts.detach().to("cpu", torch.uint8))
            return logits, weights, experts
        return record

    def installed(self):
        return hooked(self.model, self.hook)

    def after_prefill(self, inverse: torch.Tensor, prompt_len: int) -> None:
        """The last call ran the prompts (each distinct prompt once, or all rows): their positions 0..P-1."""
        self.prompt_len, self.batch = prompt_len, len(inverse)
        rows = self.calls[-1][0].shape[0] // prompt_len
        self.placed.append(("prompt", inverse.cpu() if rows != len(inverse) else torch.arange(len(inverse))))

    def after_step(self, running: torch.Tensor) -> None:
        """The last call fed response token t (t = steps so far) of the rows `running`: position P + t."""
        self.placed.append(("token", running.cpu()))

    def experts(self, prompt_mask: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
        """uint8 [B, layers, P + C, k] of the recorded experts, NOT_ROUTED on padding and on unfed tokens."""
        k = self.calls[0][0].shape[-1]
        width = self.prompt_len + response_mask.shape[1]
        out = torch.full((self.batch, self.layers, width, k), NOT_ROUTED, dtype=torch.uint8)
        for t, ((kind, rows), call) in enumerate(zip(self.placed, self.calls)):
            for layer, chosen in enumerate(call):
                if kind == "prompt":
                    out[:, layer, :self.prompt_len] = chosen.view(-1, self.prompt_len, k)[rows]
                else:
                    out[rows, layer, self.prompt_len + t - 1] = chosen
        real = torch.cat([prompt_mask.cpu(), response_mask.cpu()], 1) != 0
        return out.masked_fill(~real[:, None, :, None], NOT_ROUTED)


@contextmanager
def replaying(model, experts: torch.Tensor | None):
    """The training side of R3: every forward in the block routes its tokens to `experts` (uint8 [B, layers, T, k]
    for the forward's [B, T] input; NOT_ROUTED positions keep the router's own choice), gate weights from
    `replay_gate`. experts=None: nothing changes."""
    if experts is None:
        yield
        return

    def hook(layer: int):
        def replay(router, args, output):
            logits, weights, own = output
            planned = experts[:, layer].reshape(-1, experts.shape[-1]).to(own.device)
            if planned.shape != own.shape:
                raise ValueError(f"router replay: layer {layer} routed {own.shape[0]} tokens but {planned.shape[0]} "
                                 "were recorded; replay needs the forward over the whole [B, P + C] sequence "
                                 "(not the shared prompts of the fast engine)")
            chosen = torch.where(planned == NOT_ROUTED, own, planned.long())
            return logits, replay_gate(router, logits, chosen), chosen
        return replay

    with hooked(model, hook):
        yield


@torch.no_grad()
def own_experts(model, forward) -> list[torch.Tensor]:
    """The experts [N, k] each layer's router chooses itself in `forward()` (a call running the model once)."""
    chosen = []
    with hooked(model, lambda layer: lambda router, args, output: chosen.append(output[2])):
        forward()
    return chosen


def routing_mismatch(recorded: torch.Tensor, own: list[torch.Tensor], predicting: torch.Tensor) -> list[float]:
    """Per layer, the fraction of tokens whose top-k expert set differs between the rollout (`recorded`, uint8
    [B, layers, T, k]) and the trainer's own router (`own`, one [B * T, k] per layer), over the positions
    `predicting` ([B, T] bool: the positions whose output predicts a response token)."""
    out = []
    for layer, chosen in enumerate(own):
        a = recorded[:, layer].long().sort(-1).values
        b = chosen.view(a.shape).cpu().sort(-1).values
        differs = (a != b).any(-1)
        out.append((differs & predicting).sum().item() / max(int(predicting.sum()), 1))
    return out


def predicting_positions(prompt_len: int, response_mask: torch.Tensor) -> torch.Tensor:
    """[B, P + C] bool: the positions whose output predicts a response token (P - 1 + t for each token t)."""
    resp = response_mask.cpu() != 0
    return torch.nn.functional.pad(resp, (prompt_len - 1, 1), value=False)


def mismatch_stats(model, inputs: dict, batch) -> dict:
    """How far the trainer's routing is from the rollout's (arXiv 2510.11370): routing_mismatch (mean over layers)
    and routing_mismatch_layers of the trainer's own routing (a no-grad forward of `inputs`, never replayed)
    against the batch's recorded experts, over the positions that predict response tokens."""
    own = own_experts(model, lambda: model(**inputs))
    layers = routing_mismatch(batch.routing, own, predicting_positions(batch.prompt_ids.shape[1],
                                                                        batch.response_mask))
    return {"routing_mismatch": sum(layers) / len(layers), "routing_mismatch_layers": layers}


def extreme_fraction(logp: torch.Tensor, blogp: torch.Tensor, mask: torch.Tensor, bound: float = 2.0) -> float:
    """F(bound) of arXiv 2510.11370 (section 2): the fraction of response tokens with max(rho, 1/rho) > bound,
    rho = pi_train / pi_rollout = exp(logp - blogp)."""
    resp = mask != 0
    extreme = (logp.detach().double() - blogp.double()).abs() > torch.log(torch.tensor(bound, dtype=torch.float64))
    return (extreme & resp).sum().item() / max(int(resp.sum()), 1)


def join_routing(parts: list[torch.Tensor], prompt_lens: list[int]) -> torch.Tensor:
    """One [B, layers, P + C, k] from rollouts sampled in turn: prompt positions left-, response positions
    right-padded with NOT_ROUTED (as join_rollouts pads the ids)."""
    prompt = max(prompt_lens)
    response = max(p.shape[2] - n for p, n in zip(parts, prompt_lens))
    pad = torch.nn.functional.pad
    return torch.cat([pad(p, (0, 0, prompt - n, response - (p.shape[2] - n)), value=NOT_ROUTED)
                      for p, n in zip(parts, prompt_lens)])
