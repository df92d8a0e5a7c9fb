"""What a run needs before it starts: its peak memory and its compute, from the model's shape and the config alone.

Arithmetic, not a measurement (nothing is loaded or run): every term below is a count of the tensors a phase of the
trainer holds at once, in the dtype it holds them in. The peak is the weights and the trainable state, plus the
largest of three phases (a rollout batch, one update, an evaluation batch), plus what the host holds (the evaluation
problems, the rollout batches in the stale queue; on a CPU the host is the device). `check_fits` refuses a config
whose peak exceeds the memory the machine has free, or whose prompts and completions exceed the model's context,
with one line naming the largest part and the setting that drives it. `bench/paper_memory.py` prints the same model
for the paper profile's update; the fused op and the 1.7B LoRA step were measured on an H100 (bench/results/).

Lengths are counted in characters (the nano models' tokenizer: exact; a BPE tokenizer on the tasks' ASCII text has
fewer tokens than characters, so there they are an upper bound). The compute is counted in FLOPs (2 per
multiply-add of every matrix product, the backward twice the forward) and turned into seconds at the rate a matrix
product of the model's width reaches on this machine: a lower bound, since small models on a CPU spend most of their
time outside matrix products.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

GB = 1e9
SAMPLING_LOGIT_COPIES = 4  # float32 logits of a decoding step: logits, log-softmax, probabilities, the draw's
TRAINING_LOGIT_COPIES = 4  # float32 response logits: / T, log-softmax, entropy's probabilities, their gradient
EVALUATION_BATCH = 256  # sequences an evaluation samples at once without rollout_batch_size (evaluate.accuracy)
HOST_BYTES_PER_TOKEN = 40  # a sampled token in a Rollout on the host: ids, masks, behaviour log-prob (int64/float32)
CUDA_OVERHEAD = 1.5 * GB  # CUDA context, cuBLAS workspaces, allocator fragmentation


@dataclass(frozen=True)
class Shape:
    """The sizes of a Qwen3 (or Qwen3-MoE) model that its memory and compute depend on."""
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    context: int
    tied: bool = True
    experts: int = 0
    experts_per_token: int = 0
    expert_intermediate: int = 0

    @classmethod
    def of(cls, values: dict) -> "Shape":
        """From a model's config values (config.json, or a preset's)."""
        hidden, heads = values["hidden_size"], values["num_attention_heads"]
        return cls(hidden, values["num_hidden_layers"], heads, values.get("num_key_value_heads", heads),
                   values.get("head_dim") or hidden // heads, values.get("intermediate_size", 0), values["vocab_size"],
                   values.get("max_position_embeddings", 0), values.get("tie_word_embeddings", True),
                   values.get("num_experts", 0), values.get("num_experts_per_tok", 0),
                   values.get("moe_intermediate_size") or values.get("intermediate_size", 0))

    @property
    def dtype_bytes(self) -> int:
        """Bytes per weight (models.checkpoint_dtype: bfloat16 from LARGE_HIDDEN on)."""
        from .models import checkpoint_dtype

        return checkpoint_dtype(self.hidden).itemsize

    @property
    def checkpointed(self) -> bool:
        """Trained with gradient checkpointing (rlbook.trainer: from LARGE_HIDDEN on)."""
        from .models import LARGE_HIDDEN

        return self.hidden >= LARGE_HIDDEN

    @property
    def kv(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def attention_shapes(self) -> list[tuple[int, int]]:
        """(in, out) of q, k, v, o."""
        q = self.heads * self.head_dim
        return [(self.hidden, q), (self.hidden, self.kv), (self.hidden, self.kv), (q, self.hidden)]

    @property
    def mlp_shapes(self) -> list[tuple[int, int]]:
        """(in, out) of gate, up, down: of every expert in a mixture of experts."""
        inner, copies = ((self.expert_intermediate, self.experts) if self.experts else (self.intermediate, 1))
        return [(self.hidden, inner), (self.hidden, inner), (inner, self.hidden)] * copies

    @property
    def linear_parameters(self) -> int:
        """Parameters of every layer's projections (all experts; and the router)."""
        shapes = self.attention_shapes + self.mlp_shapes
        return self.layers * (sum(i * o for i, o in shapes) + self.hidden * self.experts)

    @property
    def parameters(self) -> int:
        """Every weight: projections, embedding (and an untied lm_head), Qwen3's RMSNorm weights."""
        norms = self.layers * (2 * self.hidden + 2 * self.head_dim) + self.hidden
        return self.linear_parameters + self.vocab * self.hidden * (1 if self.tied else 2) + norms

    @property
    def active_parameters(self) -> int:
        """Parameters a token passes through: the top-k experts only, and the lm_head."""
        dense = self if not self.experts else Shape(**{**self.__dict__, "experts": self.experts_per_token})
        return dense.linear_parameters + self.vocab * self.hidden

    def lora_parameters(self, rank: int) -> int:
        """A LoRA adapter's parameters (models.add_lora): every projection of a dense model; in a mixture of experts
        the attention's (its fused experts take none) and the routers, which train in full."""
        if self.experts:
            return self.layers * (rank * sum(i + o for i, o in self.attention_shapes) + self.hidden * self.experts)
        return self.layers * rank * sum(i + o for i, o in self.attention_shapes + self.mlp_shapes)

    @property
    def activation_bytes_per_token(self) -> int:
        """Saved by one layer per token for its backward: norms, q/k/v (and rotated q, k), attention output, residual,
        MLP gate/up/activation."""
        inner = self.expert_intermediate * self.experts_per_token if self.experts else self.intermediate
        return self.dtype_bytes * (8 * self.hidden + 2 * self.kv + 4 * inner)

    @property
    def kv_bytes_per_token(self) -> int:
        return self.layers * 2 * self.kv * self.dtype_bytes


@dataclass
class Estimate:
    """Bytes of each part (the fixed ones, each phase's, the host's), the FLOPs of the whole run, and the lengths
    they were counted at."""
    fixed: dict
    phases: dict  # phase name -> {part: bytes}
    host: dict
    flops: float
    prompt_tokens: int
    completion_tokens: int
    cuda: bool = False

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=lambda p: sum(self.phases[p].values()))

    @property
    def device_parts(self) -> dict:
        """The parts on the device at the peak (on a CPU the host's too)."""
        return {**self.fixed, **self.phases[self.peak_phase], **({} if self.cuda else self.host)}

    @property
    def device_bytes(self) -> float:
        return sum(self.device_parts.values())


# What to change when a part does not fit
REMEDY = {"KV cache": "lower rollout_batch_size (sequences sampled at once), group_size or prompts_per_step",
          "sampling logits": "lower rollout_batch_size, group_size or prompts_per_step",
          "sampling graph": "lower group_size, prompts_per_step or rollout_batch_size, or use engine='fast' (it "
                            "keeps no graph of the sampling pass)",
          "trainable state": "lower lora_rank, or use finetune='lora' instead of 'full'",
          "activations": "lower micro_batch_size", "checkpointed layer inputs": "lower micro_batch_size",
          "one layer recomputed": "lower micro_batch_size", "CUDA context": "free the GPU of other processes",
          "prompt pass activations": "lower micro_batch_size",
          "training logits": "lower micro_batch_size, or use fused_ratio='chunked'",
          "evaluation KV cache": "lower rollout_batch_size (it bounds evaluation batches too)",
          "evaluation logits": "lower rollout_batch_size (it bounds evaluation batches too)",
          "evaluation problems": "lower eval_size",
          "rollout batches": "lower group_size, prompts_per_step or staleness",
          "weights": "use a smaller preset",
          "lean copy of the weights": "use engine='reference'",
          "rollout copy of the weights": "use rollout_dtype='float32'"}


def lengths(config) -> tuple[int, int]:
    """(longest prompt, completion budget) in tokens of the character tokenizer, from the task's own problems."""
    from .evaluate import EVAL_SEED
    from .tasks import make_task
    from .tokenizer import char_tokenizer
    from .trainer import run_completion_budget

    task, tokenizer = make_task(config.task, **config.task_params), char_tokenizer()
    prompts = [p["prompt"] for p in task.generate(256, seed=EVAL_SEED + 1)]
    longest = max(len(ids) for ids in tokenizer(prompts, add_special_tokens=False)["input_ids"])
    return longest, run_completion_budget(config, task, tokenizer)


def problem_bytes(config, n: int = 16) -> float:
    """Host bytes of one problem (the mean over n): a dict of the task's strings and numbers."""
    from .tasks import make_task

    def size(value) -> int:
        if isinstance(value, dict):
            return sys.getsizeof(value) + sum(size(k) + size(v) for k, v in value.items())
        if isinstance(value, (list, tuple)):
            return sys.getsizeof(value) + sum(size(v) for v in value)
        return sys.getsizeof(value)

    problems = make_task(config.task, **config.task_params).generate(n, seed=0)
    return sum(size(p) for p in problems) / n


def trainable_bytes(shape: Shape, finetune: str, rank: int) -> int:
    """The trained weights' own state: a LoRA adapter in float32 with its gradient and AdamW's two moments (peft keeps
    adapters in float32), or, fine-tuning in full, the gradient and two moments in the weights' dtype."""
    return shape.lora_parameters(rank) * 4 * 4 if finetune == "lora" else shape.parameters * shape.dtype_bytes * 3


def update_parts(shape: Shape, rows: int, prompt: int, completion: int, path: str, prompts: int = 1) -> dict:
    """Bytes one forward + backward of `rows` sequences holds beyond the weights: the activations (checkpointed:
    every layer's input and one layer recomputed at a time; the shared path's pass over the `prompts` distinct prompts
    is not checkpointed) and the logits of its loss path (rlbook.losspath)."""
    from .losspath import CHUNK_TOKENS

    tokens, responses, b = rows * (prompt + completion), rows * completion, shape.dtype_bytes
    if shape.checkpointed:
        parts = {"checkpointed layer inputs": tokens * shape.hidden * b * shape.layers,
                 "one layer recomputed": tokens * shape.activation_bytes_per_token}
        if path == "shared":
            parts["prompt pass activations"] = prompts * prompt * shape.activation_bytes_per_token * shape.layers
    else:
        parts = {"activations": tokens * shape.activation_bytes_per_token * shape.layers}
    hidden = 2 * responses * shape.hidden * b  # the response hidden states and their gradient
    parts["training logits"] = {
        "chunked": CHUNK_TOKENS * shape.vocab * b + hidden,  # one chunk of logits, overwritten by its gradient
        "fused": responses * shape.vocab * b + hidden,  # the response logits, overwritten by their gradient
    }.get(path, tokens * shape.vocab * b + responses * shape.vocab * 4 * TRAINING_LOGIT_COPIES)
    return parts


def estimate(config, shape: Shape) -> Estimate:
    """The memory of each phase of a run of config on a model of this shape, on its device, and its FLOPs (see the
    module's doc)."""
    import torch

    from .losspath import loss_path

    engine, b, cuda = config.resolved_engine, shape.dtype_bytes, config.device == "cuda"
    prompt, completion = lengths(config)
    tokens = prompt + completion
    rows = config.prompts_per_step * config.group_size
    at_once = config.rollout_batch_size or rows
    fixed = {"weights": shape.parameters * b, "trainable state": trainable_bytes(shape, config.finetune,
                                                                               config.lora_rank),
             **({"CUDA context": CUDA_OVERHEAD} if cuda else {})}
    rollout = {"KV cache": at_once * tokens * shape.kv_bytes_per_token,
               "sampling logits": at_once * shape.vocab * 4 * SAMPLING_LOGIT_COPIES}
    if engine.lean_sampler:  # the lean decoder's stacked (merged) projections: one more copy of them
        rollout["lean copy of the weights"] = shape.linear_parameters * b
    if config.rollout_dtype != "float32":  # the inference engine's bfloat16 copy (router_replay.rollout_copy)
        rollout["rollout copy of the weights"] = shape.parameters * 2
    if engine.sampling_graph:  # every decoding step's activations and log-softmax, kept for the update's backward
        rollout["sampling graph"] = at_once * (tokens * shape.layers * shape.activation_bytes_per_token
                                               + completion * shape.vocab * 4 * 2)
    micro = config.micro_batch_size or rows // config.updates_per_step
    update = ({} if engine.sampling_graph else  # the graph engine's update is the sampling pass's backward
              update_parts(shape, micro, prompt, completion,
                           loss_path(engine, config.fused_ratio, torch.device(config.device)),
                           prompts=max(micro // config.group_size, 1)))
    evaluation_rows = min(config.rollout_batch_size or EVALUATION_BATCH, config.eval_size * max(config.eval_samples, 1))
    evaluation = {"evaluation KV cache": evaluation_rows * tokens * shape.kv_bytes_per_token,
                  "evaluation logits": evaluation_rows * shape.vocab * 4 * SAMPLING_LOGIT_COPIES}
    held = config.staleness // (config.updates_per_step * config.epochs) + 1
    host = {"evaluation problems": config.eval_size * problem_bytes(config),
            "rollout batches": held * rows * tokens * HOST_BYTES_PER_TOKEN}
    flops = run_flops(config, shape, engine, prompt, completion)
    return Estimate(fixed, {"rollout": rollout, "update": update, "evaluation": evaluation}, host, flops, prompt,
                    completion, cuda)


def run_flops(config, shape: Shape, engine, prompt: int, completion: int) -> float:
    """FLOPs of the whole run: rollouts, updates (forward and backward; a checkpointed layer's forward twice; the
    shared path runs each prompt once; the graph engine has no training forward), evaluations."""
    forward = 2 * shape.active_parameters  # per token
    rows = config.prompts_per_step * config.group_size
    tokens = prompt + completion
    sampling = rows * tokens * forward / (config.updates_per_step * config.epochs)  # per update
    trained = rows / config.updates_per_step * (completion + (prompt / config.group_size if engine.prefix_sharing
                                                              else prompt))
    passes = (0 if engine.sampling_graph else 1) + 2 + (1 if shape.checkpointed else 0)
    update = sampling + trained * forward * passes
    evaluations = config.total_updates // config.eval_every + 2
    evaluation = evaluations * config.eval_size * (1 + config.eval_samples) * tokens * forward
    return config.total_updates * update + evaluation


def matmul_rate(shape: Shape, device: str = "cpu") -> float:
    """FLOP/s of a [256, hidden] x [hidden, hidden] product in the model's dtype on this device (at most ~0.1 s)."""
    import torch

    dtype = torch.bfloat16 if shape.dtype_bytes == 2 else torch.float32
    a = torch.randn(256, shape.hidden, dtype=dtype, device=device)
    w = torch.randn(shape.hidden, shape.hidden, dtype=dtype, device=device)
    a @ w
    repeats, tic = 0, time.perf_counter()
    while repeats < 2 or (device == "cpu" and time.perf_counter() - tic < 0.05) or (device != "cpu" and repeats < 50):
        a @ w
        repeats += 1
    if device != "cpu":
        torch.cuda.synchronize()
    return repeats * 2 * 256 * shape.hidden ** 2 / (time.perf_counter() - tic)


def available(device: str) -> tuple[float, float]:
    """(bytes free on the device, bytes free on the host): CUDA's free memory, the host's MemAvailable."""
    import torch

    host = host_available()
    return (float(torch.cuda.mem_get_info()[0]) if device == "cuda" else host), host


def host_available() -> float:
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        return float(info["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def shape_of(config) -> Shape | None:
    """The shape of the model config trains, read before it is loaded (None: no readable config)."""
    from .models import model_values

    values = model_values(config.preset, config.init)
    try:
        return Shape.of(values) if values else None
    except (KeyError, TypeError):
        return None


def check_fits(config) -> Estimate | None:
    """The run's estimate, or a one-line ValueError when its prompts and completions exceed the model's context or
    its peak exceeds the memory free on this machine (None: the model's shape cannot be read before loading it)."""
    shape = shape_of(config)
    if shape is None:
        return None
    device_free, host_free = available(config.device)
    result = estimate(config, shape)
    prompt, completion = result.prompt_tokens, result.completion_tokens
    if shape.context and prompt + completion > shape.context:
        what = (f"max_new_tokens={config.max_new_tokens}" if config.max_new_tokens
                else f"the task's completion budget of {completion} tokens")
        raise ValueError(f"{what}: prompts of up to {prompt} tokens plus {completion} new ones need "
                         f"{prompt + completion:,} positions, and the model's context is {shape.context} "
                         f"(max_position_embeddings); use max_new_tokens <= {max(shape.context - prompt, 1)}")
    spaces = [("GPU" if result.cuda else "CPU", result.device_parts, device_free)]
    spaces += [("host", result.host, host_free)] if result.cuda else []
    for where, parts, free in spaces:
        if sum(parts.values()) > free:
            part, size = max(parts.items(), key=lambda kv: kv[1])
            raise ValueError(f"this run needs about {sum(parts.values()) / GB:,.1f} GB of {where} memory at its peak "
                             f"({result.peak_phase}; largest part: {part}, {size / GB:,.1f} GB) and {free / GB:,.1f} "
                             f"GB are free; {REMEDY[part]}")
    return result


def summary(result: Estimate, rate: float) -> str:
    """One line: the peak memory, and the compute at this machine's matrix-product rate (a lower bound)."""
    seconds = result.flops / rate
    time_text = f"{seconds:.0f} s" if seconds < 120 else (f"{seconds / 60:.0f} minutes" if seconds < 7200 else
                                                          f"{seconds / 3600:.1f} hours")
    return (f"estimate: peak {result.device_bytes / GB:.2f} GB on the {'GPU' if result.cuda else 'CPU'} "
            f"({result.peak_phase}), {result.flops:.2g} FLOPs: at least {time_text} at this machine's "
            f"{rate / 1e9:.0f} GFLOP/s")
