"""Rollouts with a preallocated KV cache and one fixed-shape decoding step, replayed from a CUDA graph on a GPU.

`rollout.sample` grows its KV cache by concatenation and drops finished rows from the batch: right for a CPU, where
the work scales with the rows still running, but every step has new shapes, and on a GPU a nano model's step is a
few hundred kernel launches around microseconds of arithmetic. Here (the static engine, rlbook.engines) the cache is
allocated once for prompt + max_new_tokens positions, every row runs to the end (a finished row's keys are masked
out), and a decoding step reads its inputs from fixed buffers: on CUDA the step is recorded once per batch as a CUDA
graph and then replayed, one launch per token; on the CPU the same step runs eagerly, which is how the tests hold
it to `rollout.sample` (tests/test_static_sampling.py). The draw itself (temperature, random stream, behaviour
log-probs) stays outside the graph, in the decoding loop both samplers share (rlbook.decoding), so the same seed
draws the same tokens.

The step runs the lean decoder (`rlbook.lean_decoder.LeanDecoder`, LoRA merged): a dense Qwen3 policy only.
"""
from __future__ import annotations

import torch

from .decoding import decode_loop, distinct, positions, prefill
from .lean_decoder import KVCache, LeanDecoder


class StaticKVCache:
    """Keys and values [B, kv_heads, length, head_dim] per layer, allocated once; `position` (a 1-element tensor, so
    a captured graph reads it at replay) is where the next decoding step writes."""

    def __init__(self, prefilled: KVCache, length: int):
        self.keys, self.values = [], []
        for key, value in zip(prefilled.keys, prefilled.values):
            shape, width = (*key.shape[:2], length, key.shape[-1]), key.shape[2]
            self.keys.append(key.new_zeros(shape))
            self.values.append(value.new_zeros(shape))
            self.keys[-1][:, :, :width], self.values[-1][:, :, :width] = key, value
        self.position = torch.full((1,), prefilled.keys[0].shape[2], dtype=torch.long, device=self.keys[0].device)

    def update(self, layer: int, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys[layer].index_copy_(2, self.position, key)
        self.values[layer].index_copy_(2, self.position, value)
        return self.keys[layer], self.values[layer]


class DecodeStep:
    """One token per row through `decoder` over a static cache (a `decoding.Step`), from fixed input buffers (token,
    position ids, the key mask over all `length` positions); with cuda_graph=True recorded as a CUDA graph at the
    first call (after one eager warm-up on a side stream, with that call's inputs) and replayed from then on."""

    def __init__(self, decoder: LeanDecoder, cache: StaticKVCache, prompt_mask: torch.Tensor, length: int,
                 cuda_graph: bool):
        rows, device = len(prompt_mask), prompt_mask.device
        self.decoder, self.cache, self.cuda_graph, self.graph = decoder, cache, cuda_graph, None
        self.width, self.next_position = prompt_mask.shape[1], positions(prompt_mask)[:, -1:] + 1
        self.keys = torch.zeros(rows, length, dtype=torch.bool, device=device)  # which positions each row attends to
        self.keys[:, :self.width] = prompt_mask.bool()
        self.token = torch.zeros(rows, 1, dtype=torch.long, device=device)
        self.position_ids = torch.zeros(rows, 1, dtype=torch.long, device=device)
        self.key_mask = torch.zeros(rows, 1, 1, length, dtype=torch.bool, device=device)

    def _run(self) -> torch.Tensor:
        return self.decoder(input_ids=self.token, attention_mask=self.key_mask, position_ids=self.position_ids,
                            past_key_values=self.cache).logits[:, -1]

    def _capture(self) -> None:
        """Warm up on a side stream, then record (the recipe of torch.cuda.graphs). The warm-up writes this step's
        keys and values at the cache position; recording runs nothing; the first replay writes them again."""
        device = self.token.device
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            self._run()
        torch.cuda.current_stream(device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = self._run()

    def __call__(self, token: torch.Tensor, live: torch.Tensor, finished: torch.Tensor, t: int) -> torch.Tensor:
        """float32 logits [B, V] after feeding the tokens [B] drawn at step t (a finished row's: 0); the new token is a
        key for later steps only where its row was still running."""
        at = self.width + t
        self.keys[:, at] = live
        self.token.copy_(token[:, None])
        self.position_ids.copy_(self.next_position + t)
        self.key_mask.copy_(self.keys[:, None, None, :])
        self.cache.position.fill_(at)
        if not self.cuda_graph:
            last = self._run()
        else:
            if self.graph is None:
                self._capture()
            self.graph.replay()
            last = self.logits  # the graph's output buffer: read before the next replay
        return torch.where(finished[:, None], 0.0, last.float())


@torch.no_grad()
def static_sample(decoder: LeanDecoder, tokenizer, prompts: list[str], max_new_tokens: int, temperature: float = 1.0,
                  generator: torch.Generator | None = None, cuda_graph: bool | None = None):
    """`rollout.sample` (graph=False) with a static KV cache: the same (prompt ids, prompt mask, response ids,
    response mask, behaviour log-probs) and, for the same generator, the same tokens. cuda_graph: replay the decoding
    step from a CUDA graph (None: on a CUDA device)."""
    if not isinstance(decoder, LeanDecoder):
        raise TypeError(f"static_sample runs a rlbook.lean_decoder.LeanDecoder, not {type(decoder).__name__}")
    device = decoder.anchor.device
    rows, inverse = distinct(prompts)
    enc = tokenizer([prompts[r] for r in rows], return_tensors="pt", padding=True, add_special_tokens=False)
    ids, mask, inverse = enc["input_ids"].to(device), enc["attention_mask"].to(device), inverse.to(device)
    prompt_ids, prompt_mask = ids[inverse], mask[inverse]
    last, prefilled = prefill(decoder, ids, mask, inverse)
    length = ids.shape[1] + max_new_tokens
    step = DecodeStep(decoder, StaticKVCache(prefilled, length), prompt_mask, length,
                      device.type == "cuda" if cuda_graph is None else cuda_graph)
    out = decode_loop(step, last.float(), max_new_tokens, temperature, generator, tokenizer.eos_token_id,
                      tokenizer.pad_token_id)
    return prompt_ids, prompt_mask, *out
