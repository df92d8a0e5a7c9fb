"""Chapter 5, training from merges: PMA-init, recovery from a loss spike, and the chapter's summary.

Chapter 5, training from merges: PMA-init (continue training from a merge) and recovery from a loss spike by
merging the checkpoints before it (PMA, arXiv 2505.12082), and the chapter's summary of all stored results."""
from __future__ import annotations

from pathlib import Path

import torch

from ..merging import load_checkpoint, merge_state_dicts
from ..pretrain import save, sft_loss, trace_batch
from ..progress import progress_bar
from ..runs import result_key
from .pma import CONTINUE_SEED, Trajectory, merge_name


def schedule(step: int, steps: int, lr: float, warmup: int = 0, ramp_to: float | None = None) -> float:
    """Linear warmup to lr over `warmup` steps, then constant, or with `ramp_to` an exponential rise to it."""
    value = lr * min(1.0, (step + 1) / warmup) if warmup else lr
    if ramp_to is not None and step >= warmup:
        value *= (ramp_to / lr) ** ((step - warmup) / max(steps - 1 - warmup, 1))
    return value


def continue_training(traj: Trajectory, state_dict, steps: int, lr: float, warmup: int = 0,
                      ramp_to: float | None = None, stream: int = 0, checkpoint_dir: Path | None = None,
                      checkpoint_every: int = 0, progress: bool = True, desc: str = "continue") -> list[dict]:
    """SFT from `state_dict` with a fresh AdamW (the loss, clipping and batches of `pretrain`, on the problems of
    data stream `stream`); a row per step with the loss and the gradient norm before clipping; the last row adds
    the held-out loss and accuracy."""
    model = traj.set_weights(state_dict).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    rows = []
    for step in progress_bar(range(steps), progress, desc=desc):
        for group in optimizer.param_groups:
            group["lr"] = schedule(step, steps, lr, warmup, ramp_to)
        problems = traj.task.generate(traj.config.batch_size, seed=CONTINUE_SEED + 10**6 * stream + step)
        loss = sft_loss(model, *trace_batch(traj.tokenizer, traj.task, problems))
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        rows.append({"step": step + 1, "loss": loss.item(), "grad_norm": grad_norm.item(),
                     "lr": optimizer.param_groups[0]["lr"]})
        if checkpoint_every and (step + 1) % checkpoint_every == 0:
            save(model, traj.tokenizer, checkpoint_dir / f"step-{step + 1:06d}")
    rows[-1].update({f"heldout_{k}": v for k, v in traj.evaluate(model.state_dict()).items()})
    return rows


def _stream(traj: Trajectory, repeat: int, use: int) -> int:
    return 1000 * traj.config.seed + 10 * repeat + use  # use: 0 PMA-init, 1 LR ramp, 2 resume


def pma_init(traj: Trajectory, repeat: int = 0, method: str = "sma", progress: bool = True) -> dict:
    """PMA-init: continue SFT (warmup, then a constant LR) from the merge of the last focus_n stable checkpoints
    and from the last checkpoint itself; PMA reports a smoother GradNorm from the merge. {"merged"|"last": rows}"""
    c = traj.config
    settings = dict(method=method, n=c.focus_n, steps=c.continue_steps, lr=c.continue_lr, warmup=c.continue_warmup,
                    stream=_stream(traj, repeat, 0), end=traj.stable[-1])

    def compute(method, n, steps, lr, warmup, stream, end):
        starts = {"merged": traj.merged(method, n, end), "last": load_checkpoint(traj.checkpoints[end])}
        return {k: continue_training(traj, sd, steps, lr, warmup, stream=stream, progress=progress, desc=f"from {k}")
                for k, sd in starts.items()}
    return traj.results.cached_one("pma_init.json", settings, compute)


def spike_indices(losses, window: int = 10, factor: float = 1.5, margin: float = 0.1) -> list[int]:
    """Indices of the losses (or NaNs) above `factor` times the median of the up to `window` losses before them plus
    `margin` nats (the margin keeps batch noise near zero loss from counting as a spike)."""
    median = lambda xs: sorted(xs)[(len(xs) - 1) // 2]
    return [i for i in range(1, len(losses))
            if not losses[i] == losses[i] or losses[i] > factor * median(losses[max(0, i - window):i]) + margin]


def detect_spike(losses, window: int = 10, factor: float = 1.5, margin: float = 0.1) -> int | None:
    """Index of the first loss spike (see `spike_indices`), None for a calm series."""
    found = spike_indices(losses, window, factor, margin)
    return found[0] if found else None


def spike_recovery(traj: Trajectory, repeat: int = 0, progress: bool = True) -> dict:
    """From the middle of the stable phase, ramp the LR up to `spike_lr` until the loss spikes (checkpoints every
    few steps); then resume at the trajectory's LR from the SMA merge of the last `spike_n` checkpoints before the
    spike, and from the last of them alone (PMA: merging pre-spike checkpoints returns training to its path)."""
    c = traj.config
    settings = dict(start=traj.stable[len(traj.stable) // 2], spike_lr=c.spike_lr, spike_steps=c.spike_steps,
                    every=c.spike_checkpoint_every, resume_steps=c.resume_steps, lr=c.lr, warmup=c.continue_warmup,
                    n=c.spike_n, stream=_stream(traj, repeat, 1))
    return traj.results.cached_one("spike.json", settings, lambda **s: _spike(traj, progress=progress, **s))


def _spike(traj: Trajectory, start, spike_lr, spike_steps, every, resume_steps, lr, warmup, n, stream, progress):
    folder = traj.results.path / f"spike-{result_key(dict(start=start, lr=spike_lr, steps=spike_steps, stream=stream))}"
    rows = continue_training(traj, load_checkpoint(traj.checkpoints[start]), spike_steps, lr, warmup, spike_lr,
                             stream, folder, every, progress, "LR ramp")
    spike = detect_spike([r["loss"] for r in rows])
    # the weights saved after step s give the loss at index s, so the checkpoints before the spike have s < spike
    before = list(range(every, spike, every))[-n:] if spike is not None else []
    result = {"start": start, "spike_rows": rows, "spike_step": None if spike is None else spike + 1,
              "pre_spike_steps": before}
    if before:
        paths = [folder / f"step-{s:06d}" for s in before]
        starts = {"merged": merge_state_dicts(paths, "sma"), "last": load_checkpoint(paths[-1])}
        result["start_loss"] = {k: traj.heldout_loss(sd) for k, sd in starts.items()}
        for k, sd in starts.items():
            result[k] = continue_training(traj, sd, resume_steps, lr, warmup, stream=stream + 1, progress=progress,
                                          desc=f"resume from {k}")
    return result


def _run_stats(rows: list[dict]) -> dict:
    norms, late = torch.tensor([r["grad_norm"] for r in rows]), rows[-max(len(rows) // 4, 1):]
    return {"grad_norm_max": norms.max().item(), "grad_norm_std": norms.std().item(),
            "spikes": len(spike_indices([r["loss"] for r in rows])), "heldout_loss": rows[-1]["heldout_loss"],
            "late_loss": sum(r["loss"] for r in late) / len(late)}  # mean training loss over the last quarter


def _mean(dicts: list[dict]) -> dict:
    return {k: sum(d[k] for d in dicts) / len(dicts) for k in dicts[0]}


def summarize(traj: Trajectory, checkpoints: dict, grid: dict, curve: dict, inits: list, spikes: list) -> dict:
    """The chapter's observations from the stored results (the notebook's closing table); PMA-init and spike
    statistics are means over the repeats, with how many repeats the merge wins."""
    c, end = traj.config, traj.stable[-1]
    sma, wma = ({e: curve[merge_name(m, c.focus_n, e, c.alpha)]["loss"] for e in traj.stable[c.focus_n - 1:]}
                for m in ("sma", "wma"))
    ends = sorted(sma)
    halves = ends[:len(ends) // 2], ends[len(ends) // 2:]
    recovered = [s for s in spikes if "merged" in s]
    best, last = min(grid.items(), key=lambda kv: kv[1]["loss"]), checkpoints[str(end)]["loss"]
    return {"end": end, "last": checkpoints[str(end)], "annealed": checkpoints["annealed"],
            "annealed_equal": checkpoints["annealed_equal"], "merges": len(grid), "best_merge": best,
            # how much of the loss gap between the last checkpoint and an annealed model the best merge closes
            "gap_closed": {k: (last - best[1]["loss"]) / (last - checkpoints[k]["loss"])
                           if last > checkpoints[k]["loss"] else None for k in ("annealed_equal", "annealed")},
            "merges_beating_last": sum(r["loss"] < last for r in grid.values()),
            "sma_beats_checkpoint": sum(sma[e] < checkpoints[str(e)]["loss"] for e in ends), "curve_points": len(ends),
            "wma_minus_sma": [sum(wma[e] - sma[e] for e in half) / len(half) for half in halves],
            "init": {k: _mean([_run_stats(i[k]) for i in inits]) for k in ("merged", "last")},
            "init_merge_wins": sum(i["merged"][-1]["heldout_loss"] < i["last"][-1]["heldout_loss"] for i in inits),
            "repeats": len(inits), "spike_steps": [s["spike_step"] for s in spikes], "recovered": len(recovered),
            "resume": {k: _mean([{"start_loss": s["start_loss"][k], **_run_stats(s[k])} for s in recovered])
                       for k in ("merged", "last")} if recovered else None,
            "resume_merge_wins": sum(s["merged"][-1]["heldout_loss"] < s["last"][-1]["heldout_loss"]
                                     for s in recovered)}



def step_list(steps) -> str:
    """Steps in words: [120] -> 'step 120', [120, 140] -> 'steps 120 and 140', [None] or [] -> 'no spike'."""
    steps = [s for s in steps if s is not None]
    if not steps:
        return "no spike"
    return f"step {steps[0]}" if len(steps) == 1 else f"steps {', '.join(map(str, steps[:-1]))} and {steps[-1]}"


def demonstration_table(traj: Trajectory, s: dict, profile: str, device: str) -> str:
    """Markdown: what one demonstration trajectory shows of each of PMA's claims (`summarize`'s numbers, in words;
    no verdict: one trajectory decides nothing, the chapter's verdicts come from the reference trajectories)."""
    c = traj.config
    last, annealed, equal, (best_name, best) = s["last"], s["annealed"], s["annealed_equal"], s["best_merge"]
    gi, gl, k = s["init"]["merged"], s["init"]["last"], s["repeats"]
    closed = lambda key: ("no gap to close" if s["gap_closed"][key] is None
                          else f"the best merge closes {s['gap_closed'][key]:.1%} of the loss gap")
    rows = [
        ("Merging stable-phase checkpoints improves on the latest checkpoint",
         f"{s['merges_beating_last']} of {s['merges']} merges have a lower held-out loss than step {s['end']} (loss "
         f"{last['loss']:.3g}, accuracy {last['acc']:.2f}); the best, {best_name}: loss {best['loss']:.3g}, accuracy "
         f"{best['acc']:.2f}"),
        ("The merged model matches or beats the annealed one (equal tokens)",
         f"the twin annealed at step {s['end']}: loss {equal['loss']:.3g}, accuracy {equal['acc']:.2f}; "
         f"{closed('annealed_equal')}"),
        ("(the same, against the final annealed model)",
         f"loss {annealed['loss']:.3g}, accuracy {annealed['acc']:.2f} after {c.decay_steps} more steps; "
         f"{closed('annealed')}"),
        ("Along the stable phase, merges beat their checkpoints",
         f"the SMA merge of {c.focus_n} beats its last checkpoint at {s['sma_beats_checkpoint']} of "
         f"{s['curve_points']} points"),
        ("Early in training WMA is best; later SMA is as good",
         f"mean held-out loss WMA minus SMA: {s['wma_minus_sma'][0]:+.3g} in the first half of the stable phase, "
         f"{s['wma_minus_sma'][1]:+.3g} in the second (negative: WMA better)"),
        ("PMA-init: smoother GradNorm, fewer loss spikes",
         f"mean over {k} streams, merge vs checkpoint: grad-norm std {gi['grad_norm_std']:.2f} vs "
         f"{gl['grad_norm_std']:.2f}, max {gi['grad_norm_max']:.1f} vs {gl['grad_norm_max']:.1f}, loss spikes "
         f"{gi['spikes']:.1f} vs {gl['spikes']:.1f}; held-out loss at the end {gi['heldout_loss']:.3g} vs "
         f"{gl['heldout_loss']:.3g} (merge lower in {s['init_merge_wins']} of {k})"),
    ]
    spikes = step_list(s["spike_steps"])
    if s["resume"]:
        rm, rl = s["resume"]["merged"], s["resume"]["last"]
        rows.append(("Merging pre-spike checkpoints and resuming recovers from a loss spike",
                     f"spikes at {spikes} of the LR ramp; mean over {s['recovered']} streams, merge vs last pre-spike "
                     f"checkpoint: held-out loss {rm['start_loss']:.3g} vs {rl['start_loss']:.3g} at the restart, "
                     f"{rm['heldout_loss']:.3g} vs {rl['heldout_loss']:.3g} after {c.resume_steps} steps (merge lower "
                     f"in {s['resume_merge_wins']} of {s['recovered']})"))
    else:
        rows.append(("Merging pre-spike checkpoints and resuming recovers from a loss spike",
                     f"{spikes} on the LR ramp with a checkpoint before it: nothing to recover from"))
    table = "| the paper reports (PMA, arXiv 2505.12082) | this one trajectory shows |\n|---|---|\n"
    table += "".join(f"| {claim} | {seen} |\n" for claim, seen in rows)
    return table + (f"\nProfile **{profile}**: {c.preset}, {c.max_steps} steps, a checkpoint every "
                    f"{c.checkpoint_every} steps; one trajectory seed ({c.seed}), PMA-init and spike recovery on {k} "
                    f"data streams; ran on {device}.")
