"""A lean sampling copy of a dense Qwen3 policy (RunConfig.merged_sampling, opt-in): the LoRA update merged into the
weights, q/k/v and gate/up projections each one matrix product, and the decoder written out in plain tensor ops.

It is called like the model in `rollout.sample` (input ids, attention mask, position ids, KV cache -> last logits and
the cache), with far fewer operations per token than the peft-wrapped transformers model (1 + 4 matrix products per
layer instead of 7 + 14 LoRA products, no per-module dispatch, no mask builder). It computes the same function up to
floating-point order (W x + s B A x is rounded as (W + s B A) x), so the sampled tokens' behaviour log-probs differ
from the training pass's by rounding (MERGED_TOLERANCE; tests/test_merged_decoder.py), never by policy.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn.functional as F

MERGED_TOLERANCE = 1e-4  # largest |logit difference| from the model's own forward (measured: ~1e-6 on nano-small)


def merged_weight(linear: torch.nn.Module) -> torch.Tensor:
    """W + (alpha / r) B A of a peft LoRA linear layer (W of a plain one)."""
    weight = getattr(linear, "base_layer", linear).weight
    if hasattr(linear, "base_layer"):
        weight = weight + sum(linear.get_delta_weight(name) for name in linear.active_adapters)
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


class MergedDecoder(torch.nn.Module):
    """Sampling copy of a dense Qwen3 causal LM (peft-wrapped or not); `refresh(model)` copies its current weights."""

    def __init__(self, model):
        super().__init__()
        config = model.config
        if getattr(config, "num_experts", 0) or config.model_type != "qwen3":
            raise ValueError(f"merged_sampling supports dense Qwen3 models; this one is {config.model_type!r}")
        self.heads, self.kv_heads, self.head_dim = (config.num_attention_heads, config.num_key_value_heads,
                                                    config.head_dim)
        self.eps, self.config = config.rms_norm_eps, config
        self.refresh(model)

    @torch.no_grad()
    def refresh(self, model) -> "MergedDecoder":
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        self.rotary = base.model.rotary_emb
        self.embed = base.model.embed_tokens.weight.detach()
        self.norm, self.head = base.model.norm.weight.detach(), merged_weight(base.lm_head)
        self.layers = []
        for layer in base.model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            self.layers.append(SimpleNamespace(
                norm1=layer.input_layernorm.weight.detach(), norm2=layer.post_attention_layernorm.weight.detach(),
                qkv=torch.cat([merged_weight(attn.q_proj), merged_weight(attn.k_proj), merged_weight(attn.v_proj)]),
                q_norm=attn.q_norm.weight.detach(), k_norm=attn.k_norm.weight.detach(), o=merged_weight(attn.o_proj),
                gate_up=torch.cat([merged_weight(mlp.gate_proj), merged_weight(mlp.up_proj)]),
                down=merged_weight(mlp.down_proj)))
        self.anchor = torch.nn.Parameter(self.embed.new_zeros(0), requires_grad=False)  # device for `sample`
        return self

    def rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    def rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin

    def attend(self, layer, x, cos, sin, mask, cache: KVCache, index: int) -> torch.Tensor:
        b, t, _ = x.shape
        q_size, kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
        q, k, v = F.linear(x, layer.qkv).split([q_size, kv_size, kv_size], -1)
        q = self.rotate(self.rms(q.view(b, t, self.heads, self.head_dim), layer.q_norm).transpose(1, 2), cos, sin)
        k = self.rotate(self.rms(k.view(b, t, self.kv_heads, self.head_dim), layer.k_norm).transpose(1, 2), cos, sin)
        k, v = cache.update(index, k, v.view(b, t, self.kv_heads, self.head_dim).transpose(1, 2))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=self.heads != self.kv_heads)
        return F.linear(out.transpose(1, 2).reshape(b, t, q_size), layer.o)

    @torch.no_grad()
    def forward(self, input_ids, attention_mask, position_ids, past_key_values=None, use_cache=True):
        """The model's call in `sample`: logits [B, 1, V] of the last position, and the KV cache."""
        cache = past_key_values if past_key_values is not None else KVCache(len(self.layers))
        x = F.embedding(input_ids, self.embed)
        cos, sin = self.rotary(x, position_ids)
        cos, sin = cos[:, None], sin[:, None]
        keys = attention_mask if attention_mask.dim() == 4 else attention_mask[:, None, None, :].bool()
        t, total = input_ids.shape[1], keys.shape[-1]
        key_pos, query_pos = torch.arange(total, device=x.device), torch.arange(total - t, total, device=x.device)
        # causal; a padding query attends to itself only (its output is never used; no row of the mask is empty)
        mask = (key_pos <= query_pos[:, None]) & (keys | (key_pos == query_pos[:, None]))
        for index, layer in enumerate(self.layers):
            x = x + self.attend(layer, self.rms(x, layer.norm1), cos, sin, mask, cache, index)
            gate, up = F.linear(self.rms(x, layer.norm2), layer.gate_up).chunk(2, -1)
            x = x + F.linear(F.silu(gate) * up, layer.down)
        logits = F.linear(self.rms(x[:, -1:], self.norm), self.head)
        return SimpleNamespace(logits=logits, past_key_values=cache)
