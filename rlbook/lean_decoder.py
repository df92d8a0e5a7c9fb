"""A lean copy of a dense Qwen3 policy for sampling: the decoder written out in plain tensor ops.

A lean copy of a dense Qwen3 policy for sampling: the decoder written out in plain tensor ops, q/k/v and gate/up
each one matrix product, no per-module dispatch, no mask builder. Called like the model in `rollout.sample` (input
ids, attention mask, position ids, KV cache -> last logits and the cache). Two kinds of projection:

  merged (engines fast and static): the LoRA update merged into the weights, 4 matrix products per layer
      instead of 7 + 14. The same function up to floating-point order (W x + s B A x is rounded as (W + s B A) x),
      so the behaviour log-probs differ from the training pass's by rounding (MERGED_TOLERANCE), never by policy.
  lora (the graph engine): the base weights frozen and fused, the LoRA factors the model's own parameters,
      so sampling under grad mode records the graph of each sampled token's log-prob, and the update backpropagates
      through it instead of running a training forward.

A bfloat16 model (LARGE_HIDDEN width and up) with a float32 adapter is computed as peft computes it: LoRA projections
bit for bit (the LoRA term in float32), merged ones as peft's own merge (W + s B A rounded once to bfloat16; at
Qwen3-1.7B's width that moves the logits by up to about 0.05, bfloat16's own rounding). tests/test_lean_decoder.py
holds both to the model's logits and gradients.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Callable

import torch
import torch.nn.functional as F

MERGED_TOLERANCE = 1e-4  # largest |logit difference| from the model's own forward (measured: ~1e-6 on nano-small)


def merged_weight(linear: torch.nn.Module) -> torch.Tensor:
    """W + (alpha / r) B A of a peft LoRA linear layer (W of a plain one), in W's dtype: a bfloat16 model's float32
    LoRA update is added in float32 and the sum rounded once to bfloat16, as peft's own merge does."""
    weight = getattr(linear, "base_layer", linear).weight
    if hasattr(linear, "base_layer"):
        weight = (weight + sum(linear.get_delta_weight(name) for name in linear.active_adapters)).to(weight.dtype)
    return weight.detach()


class KVCache:
    """Keys and values [B, kv_heads, T, head_dim] per layer, with the two row operations `sample` uses."""

    def __init__(self, layers: int):
        self.keys: list[torch.Tensor | None] = [None] * layers
        self.values: list[torch.Tensor | None] = [None] * layers

    def update(self, layer: int, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.keys[layer] is not None:
            key, value = torch.cat([self.keys[layer], key], 2), torch.cat([self.values[layer], value], 2)
        self.keys[layer], self.values[layer] = key, value
        return key, value

    def batch_select_indices(self, rows: torch.Tensor) -> None:
        self.keys = [k[rows] for k in self.keys]
        self.values = [v[rows] for v in self.values]

    reorder_cache = batch_select_indices


def merged_projection(linears: list) -> Callable:
    """x -> [W_1 x, W_2 x, ...] of linear layers sharing their input, LoRA merged, as one matrix product."""
    with torch.no_grad():
        weight = torch.cat([merged_weight(linear) for linear in linears])
    return lambda x: F.linear(x, weight)


def lora_projection(linears: list) -> Callable:
    """x -> [W_i x + s B_i A_i x]_i of peft LoRA layers sharing their input (LoRA, arXiv 2106.09685, eq. 3) in three
    matrix products: the frozen W_i stacked, the model's own A_i stacked and B_i block-diagonal (built here, once
    per refresh, in the graph: every sampling step's gradient reaches the factors through them). As peft computes
    it: the LoRA term in the factors' dtype (float32 on a bfloat16 model), added to W x, the sum in x's dtype."""
    adapters = [linear.active_adapters for linear in linears]
    if any(len(names) != 1 for names in adapters) or not all(hasattr(linear, "base_layer") for linear in linears):
        raise ValueError("the graph engine needs LoRA layers with one active adapter (finetune='lora')")
    name = adapters[0][0]
    weight = torch.cat([linear.base_layer.weight for linear in linears]).detach()
    down = torch.cat([linear.lora_A[name].weight for linear in linears])
    up = torch.block_diag(*[linear.lora_B[name].weight for linear in linears])
    scaling = linears[0].scaling[name]
    return lambda x: torch.add(F.linear(x, weight), F.linear(F.linear(x.to(down.dtype), down), up),
                               alpha=scaling).to(x.dtype)


class LeanDecoder(torch.nn.Module):
    """Sampling copy of a dense Qwen3 causal LM (peft-wrapped or not) with merged or LoRA projections;
    `refresh(model)` takes its current weights."""

    def __init__(self, model, merged: bool = True):
        super().__init__()
        self.project = merged_projection if merged else lora_projection
        config = model.config
        if getattr(config, "num_experts", 0) or config.model_type != "qwen3":
            raise ValueError(f"the lean decoder supports dense Qwen3 models; this one is {config.model_type!r}")
        self.heads, self.kv_heads, self.head_dim = (config.num_attention_heads, config.num_key_value_heads,
                                                    config.head_dim)
        self.eps, self.config = config.rms_norm_eps, config
        self.refresh(model)
        rotary = (model.get_base_model() if hasattr(model, "get_base_model") else model).model.rotary_emb
        with torch.no_grad():  # cos and sin of every position, from the model's own rotary embedding
            positions = torch.arange(config.max_position_embeddings, device=self.embed.device)[None]
            self.cos, self.sin = (table[0] for table in rotary(self.embed[:1], positions))

    def refresh(self, model) -> "LeanDecoder":
        """Take the model's current weights (LoRA projections: under the caller's grad mode, which sampling with
        graph=True needs)."""
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        self.embed = base.model.embed_tokens.weight.detach()
        self.norm, self.head = base.model.norm.weight.detach(), merged_weight(base.lm_head)
        self.layers = []
        for layer in base.model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            self.layers.append(SimpleNamespace(
                norm1=layer.input_layernorm.weight.detach(), norm2=layer.post_attention_layernorm.weight.detach(),
                qkv=self.project([attn.q_proj, attn.k_proj, attn.v_proj]), o=self.project([attn.o_proj]),
                qk_norm=torch.cat([attn.q_norm.weight.expand(self.heads, -1),  # per head: q's, then k's weight
                                   attn.k_norm.weight.expand(self.kv_heads, -1)]).detach(),
                gate_up=self.project([mlp.gate_proj, mlp.up_proj]), down=self.project([mlp.down_proj])))
        self.anchor = torch.nn.Parameter(self.embed.new_zeros(0), requires_grad=False)  # device for `sample`
        return self

    def rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """Qwen3's RMSNorm: normalised in x's dtype, then times the weight (in bfloat16 that rounds twice, as the
        model does; F.rms_norm with the weight inside rounds once)."""
        return F.rms_norm(x, x.shape[-1:], None, self.eps) * weight

    def rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin

    def attend(self, layer, x, cos, sin, mask, cache: KVCache, index: int) -> torch.Tensor:
        """Attention of Qwen3: q and k (adjacent in the fused projection) normed per head and rotated together."""
        b, t, _ = x.shape
        qk, v = layer.qkv(x).view(b, t, -1, self.head_dim).split([self.heads + self.kv_heads, self.kv_heads], 2)
        qk = self.rotate(self.rms(qk, layer.qk_norm).transpose(1, 2), cos, sin)
        q, k = qk.split([self.heads, self.kv_heads], 1)
        k, v = cache.update(index, k, v.transpose(1, 2))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=self.heads != self.kv_heads)
        return layer.o(out.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))

    def forward(self, input_ids, attention_mask, position_ids, past_key_values=None, use_cache=True):
        """The model's call in `sample`: logits [B, 1, V] of the last position, and the KV cache (under the caller's
        grad mode)."""
        cache = past_key_values if past_key_values is not None else KVCache(len(self.layers))
        x = F.embedding(input_ids, self.embed)
        cos, sin = self.cos[position_ids][:, None], self.sin[position_ids][:, None]
        keys = attention_mask if attention_mask.dim() == 4 else attention_mask[:, None, None, :].bool()
        t, total = input_ids.shape[1], keys.shape[-1]
        if t == 1:  # one new token per row: it sees every unmasked key (a row's prompt is never all padding)
            mask = keys
        else:  # causal; a padding query attends to itself only (its output is never used; no row is empty)
            key_pos, query_pos = torch.arange(total, device=x.device), torch.arange(total - t, total, device=x.device)
            mask = (key_pos <= query_pos[:, None]) & (keys | (key_pos == query_pos[:, None]))
        for index, layer in enumerate(self.layers):
            x = x + self.attend(layer, self.rms(x, layer.norm1), cos, sin, mask, cache, index)
            gate, up = layer.gate_up(self.rms(x, layer.norm2)).chunk(2, -1)
            x = x + layer.down(F.silu(gate) * up)
        logits = F.linear(self.rms(x[:, -1:], self.norm), self.head)
        return SimpleNamespace(logits=logits, past_key_values=cache)
