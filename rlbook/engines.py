"""The engine of a run: which tested combination of speed paths computes it, and the fastest one a config allows.

Each engine is one combination that the tests hold to the reference engine within a stated tolerance:

  reference  the plain paths: rollouts through the model itself (`rollout.sample`), the training forward over whole
             sequences (`losspath`). Bit-exact to every result made before engines existed; the golden results
             (tests/test_versions.py) pin it.
  fast       the training pass runs each distinct prompt once and shares its KV cache with its group
             (PREFIX_SHARING_TOLERANCE), rollouts sample from a lean copy with the LoRA update merged into the weights
             (MERGED_TOLERANCE), and sequences whose every advantage is 0 run without grad (same gradient, other
             summation order). Any dense model with float32 rollouts and the reference loss kernel.
  graph      on-policy updates backpropagate through the sampling pass (`lean_decoder`, LoRA factors live): no
             training forward at all. One update per rollout batch, right after it is sampled, LoRA, a dense model.
  static     fast, with a preallocated KV cache and one fixed-shape decoding step replayed from a CUDA graph on a GPU
             (`static_sampling`; on a CPU the same step runs eagerly and buys nothing).

`engine='auto'` (the default) picks the first of DEFAULT_ORDER the config allows, from the config alone (never the
machine, so a config computes the same thing everywhere; a checkpoint directory by its config.json): graph, else fast,
else reference. Which settings each engine can compute are rules of the config (rlbook.config:
RunConfig.engine_refusal), and so is the engine 'auto' picks (RunConfig.resolved_engine); this module holds the
engines themselves. Every engine works at every size: at bfloat16 with a float32 LoRA adapter and under gradient
checkpointing (models of LARGE_HIDDEN width and up; tests/test_defaults_at_every_size.py). The chosen engine is part
of the run's identity: two engines give different numbers. `python bench/vs_trl.py` times each engine on the CPU
(bench/results/vs_trl/).

Not engine choices, and so separate RunConfig fields: `rollout_dtype` (the precision of the rollout engine is what
chapter 6 studies), `micro_batch_size` and `rollout_batch_size` (they bound memory), `fused_ratio` (the loss kernel:
fused needs a GPU, chunked bounds the logits' memory at a large vocabulary).
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass


@dataclass(frozen=True)
class Engine:
    name: str
    help: str
    prefix_sharing: bool = False  # training pass: losspath 'shared'
    merged_sampling: bool = False  # rollouts: lean_decoder, LoRA merged
    static_sampling: bool = False  # rollouts: static_sampling (needs merged_sampling)
    skip_zero_advantage: bool = False  # training pass: zero-advantage sequences without grad
    sampling_graph: bool = False  # rollouts: lean_decoder, LoRA live; the update backpropagates through them

    @property
    def lean_sampler(self) -> bool:
        """Rollouts sample from rlbook.lean_decoder (a dense Qwen3 in plain tensor ops) instead of the model."""
        return self.merged_sampling or self.sampling_graph


FAST = dict(prefix_sharing=True, merged_sampling=True, skip_zero_advantage=True)
ENGINES = {engine.name: engine for engine in (
    Engine("reference", "the plain paths, bit-exact to the golden results"),
    Engine("fast", "shared prompts in the training pass, LoRA-merged lean sampler, no grad through zero-advantage "
                   "sequences (dense model)", **FAST),
    Engine("graph", "the on-policy update backpropagates through the sampling pass (one update per batch, no "
                    "staleness, LoRA, dense model)", sampling_graph=True),
    Engine("static", "fast with a static KV cache, its decoding step replayed from a CUDA graph on a GPU",
           static_sampling=True, **FAST),
)}
DEFAULT_ORDER = ("graph", "fast", "reference")  # what engine='auto' tries, fastest first
HELP = (f"how the run is computed, one tested combination of speed paths: auto (the fastest the config allows: "
        f"{', else '.join(DEFAULT_ORDER)}) or {', '.join(ENGINES)} (below)")
EPILOG = "engines (rlbook.engines):\n" + "\n".join(textwrap.fill(e.help, 79, initial_indent=f"  {e.name:<11}",
                                                                   subsequent_indent=" " * 13)
                                                     for e in ENGINES.values())
