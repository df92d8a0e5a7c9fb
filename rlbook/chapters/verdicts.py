"""Each chapter's signatures, computed from runs with rlbook.stats: the paper reports / we observe / verdict.

A signature is one claim of a paper turned into a quantity we can measure on our runs, the sign the paper gives it,
and a verdict at two standard errors over seeds ("reproduced", "not reproduced", "within noise"). Scores are the
mean of a run's last 3 evaluations (stats.score), never a peak. `bench/fidelity.py` prints every table.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from .. import stats
from ..experiments import DEFAULT_TAU
from .lopti import variant_of

MATCH_BOUND = 0.03  # two accuracies "match" when the 2-s.e. interval of their difference lies inside +-0.03
# "Prosperity, then collapse" in accuracy: a rise of more than 0.05 above the base, then a fall of more than 0.08
# below the peak. The peak is the best mean of 3 consecutive evaluations, which noise biases upward (the best of ~15
# noisy windows sits about one evaluation standard error, ~0.013, above the true curve), so small rises and dips
# are not taken for the paper's effect.
PROSPERITY_RISE, COLLAPSE_FALL = 0.05, 0.08


@dataclass(frozen=True)
class Signature:
    claim: str  # what the paper found, in words
    paper: str  # the paper's numbers
    observed: str  # ours, in words and numbers
    verdict: str  # stats.REPRODUCED | NOT_REPRODUCED | WITHIN_NOISE, or "no runs"


def cell(runs, objective: str | None = None, staleness: int | None = None, **fields) -> list:
    """The runs (one per seed) of one setting."""
    def keep(run):
        c = run.config
        return ((objective is None or c.objective == objective) and (staleness is None or c.staleness == staleness)
                and all(getattr(c, k) == v for k, v in fields.items()))
    return [run for run in runs if keep(run)]


def per_seed(runs, quantity) -> stats.Estimate:
    return stats.estimate([quantity(run) for run in runs])


def gain(run, metric: str = "eval_greedy_acc") -> float:
    return stats.score(run, metric) - stats.base_score(run, metric)


def token_share(run, key: str) -> float:
    """Mean over updates of a token statistic (e.g. the clipped or masked share of response tokens)."""
    values = [r[key] for r in run.metrics if r.get(key) is not None]
    return statistics.fmean(values) if values else 0.0


def clip_share(run) -> float:
    return token_share(run, "clip_frac_low") + token_share(run, "clip_frac_high")


def smoothed_peak(run, metric: str = "eval_greedy_acc", window: int = 3) -> float:
    """The best mean of `window` consecutive evaluations (less biased upward than the best single evaluation)."""
    values = stats.evaluations(run, metric)[1]
    spans = [values[i:i + window] for i in range(max(len(values) - window + 1, 1))]
    return max(statistics.fmean(span) for span in spans)


def difference(a, b, quantity=stats.score) -> stats.Estimate:
    """Seed mean of quantity over runs a minus that over runs b, standard errors in quadrature."""
    return per_seed(a, quantity) - per_seed(b, quantity)


def _pct(e: stats.Estimate) -> str:
    return f"{100 * e.mean:.2f}% ± {100 * e.se:.2f}"


def _missing(claim: str, paper: str) -> Signature:
    return Signature(claim, paper, "no runs of this setting", "no runs")


def _better(claim: str, paper: str, better, worse, what: str) -> Signature:
    """The paper says runs `better` score above runs `worse`: their seed-mean difference and its verdict."""
    if not (better and worse):
        return _missing(claim, paper)
    d = difference(better, worse)
    return Signature(claim, paper, f"{what}: {d}", stats.verdict(d, +1))


def grpo_learns(runs) -> list[Signature]:
    """Chapter 1: GRPO raises a warm-started model's accuracy."""
    claim = "GRPO raises the accuracy of a base model"
    paper = "Qwen3-0.6B-Base, GRPO without KL: MATH-500 15.2% -> 47.4% after 50 steps (a public from-scratch walkthrough)"
    if not runs:
        return [_missing(claim, paper)]
    g, base = per_seed(runs, gain), per_seed(runs, stats.base_score)
    observed = (f"greedy accuracy {base.mean:.3f} -> {base.mean + g.mean:.3f}: gain {g} "
                f"(last-3 evaluations, {g.n} seeds)")
    return [Signature(claim, paper, observed, stats.verdict(g, +1))]


def staleness_signatures(runs) -> list[Signature]:
    """Chapter 2 (M2PO, arXiv 2510.01161): a, b and e at the largest staleness of the runs."""
    stalenesses = sorted({r.config.staleness for r in runs})
    if not stalenesses:
        return []
    top = stalenesses[-1]
    grpo0, grpo_top = cell(runs, "grpo", 0), cell(runs, "grpo", top)
    free_top, m2po_top = cell(runs, "no_clip", top), cell(runs, "m2po", top)
    out = []
    out.append(_better(f"a. GRPO gets worse with staleness (s=0 vs s={top})",
                       "8-benchmark average 33.0 (s=0) vs 30.4 (s=256)", grpo0, grpo_top,
                       f"greedy score s=0 minus s={top}"))
    claim = f"b. Without a trust region, s={top} first rises (prosperity) ..."
    paper = "rises fast, then collapses"
    if free_top:
        rise = per_seed(free_top, lambda r: smoothed_peak(r) - stats.base_score(r))
        fall = per_seed(free_top, lambda r: smoothed_peak(r) - stats.score(r))
        out.append(Signature(claim, paper, f"best 3-evaluation mean minus base: {rise} (counts above "
                             f"{PROSPERITY_RISE})", stats.verdict(rise, +1, PROSPERITY_RISE)))
        out.append(Signature("b. ... then collapses", paper, f"best 3-evaluation mean minus final score: {fall} "
                             f"(counts above {COLLAPSE_FALL})", stats.verdict(fall, +1, COLLAPSE_FALL)))
    else:
        out.append(_missing(claim, paper))
    out.append(_better(f"e. M2PO at s={top} beats GRPO at s={top}", "36.6 vs 30.4", m2po_top, grpo_top,
                       "score difference"))
    claim, paper = f"e. M2PO at s={top} matches on-policy GRPO", "36.6 vs 33.0 (on-policy)"
    if m2po_top and grpo0:
        d = difference(m2po_top, grpo0)
        learns = per_seed(grpo0, gain)  # matching an on-policy run that learns nothing is a match of nothing
        note = "" if stats.verdict(learns, +1) == stats.REPRODUCED else " (but on-policy GRPO barely learns here)"
        out.append(Signature(claim, paper, f"score difference {d}; match = inside ±{MATCH_BOUND}{note}",
                             stats.matches(d, MATCH_BOUND) if not note else stats.WITHIN_NOISE))
    else:
        out.append(_missing(claim, paper))
    return out


def clip_mask_signatures(runs) -> list[Signature]:
    """Chapter 3 (M2PO, signature c): GRPO clips more when stale; M2PO masks few tokens."""
    stalenesses = sorted({r.config.staleness for r in runs})
    if not stalenesses:
        return []
    top = stalenesses[-1]
    grpo0, grpo_top, m2po_top = cell(runs, "grpo", 0), cell(runs, "grpo", top), cell(runs, "m2po", top)
    if not (grpo0 and grpo_top and m2po_top):
        return [_missing("c. clipped vs masked tokens", "0.07% / 0.66% / 0.02%")]
    c0, ctop = per_seed(grpo0, clip_share), per_seed(grpo_top, clip_share)
    mtop = per_seed(m2po_top, lambda r: token_share(r, "mask_frac"))
    paper = "Qwen3-Base-1.7B: GRPO clips 0.07% (s=0), 0.66% (s=256); M2PO masks 0.02% (s=256)"
    return [
        Signature(f"c. GRPO clips more tokens at s={top} than on-policy", paper,
                  f"{_pct(ctop)} vs {_pct(c0)}", stats.verdict(ctop - c0, +1)),
        Signature(f"c. M2PO at s={top} masks fewer tokens than GRPO clips there", paper,
                  f"{_pct(mtop)} vs {_pct(ctop)}", stats.verdict(ctop - mtop, +1)),
        Signature(f"c. M2PO at s={top} masks no more than on-policy GRPO clips", paper,
                  f"{_pct(mtop)} vs {_pct(c0)}", stats.verdict(c0 - mtop, +1)),
    ]


def entropy_by_deviation(run, low: float = 0.02, high: float = 0.2) -> tuple[float, float]:
    """Mean entropy of response tokens with |r-1| < low and with |r-1| >= high, pooled over a run's updates."""
    sums = {"near": [0.0, 0.0], "far": [0.0, 0.0]}
    for row in run.metrics:
        bins = row.get("ratio_bins")
        if not bins:
            continue
        for lo, count, entropy in zip(bins["edges"], bins["count"], bins["entropy"]):
            side = "near" if lo is not None and lo < low else "far" if lo is not None and lo >= high else None
            if side and count and entropy is not None:
                sums[side][0] += count * entropy
                sums[side][1] += count
    return tuple(total / count if count else float("nan") for total, count in sums.values())


def entropy_signature(runs) -> list[Signature]:
    """Chapter 3 (M2PO, signature d): tokens whose ratio moved far from 1 are the high-entropy ones."""
    top = max((r.config.staleness for r in runs), default=0)
    grpo_top = cell(runs, "grpo", top)
    claim = f"d. Token entropy rises with |r-1| (GRPO, s={top})"
    paper = "about 0.2 near r = 1, about 1.0 at |r-1| = 0.7"
    if not grpo_top:
        return [_missing(claim, paper)]
    near, far = per_seed(grpo_top, lambda r: entropy_by_deviation(r)[0]), per_seed(grpo_top, lambda r: entropy_by_deviation(r)[1])
    return [Signature(claim, paper, f"mean entropy {near.mean:.2f} at |r-1| < 0.02, {far.mean:.2f} at |r-1| >= 0.2; "
                      f"difference {far - near}", stats.verdict(far - near, +1))]


TAU_FLAT, TAU_EXTREMES = (0.02, 0.08), (0.005, 0.16)


def tau_signatures(tau_runs) -> list[Signature]:
    """Chapter 3 (M2PO, signature f, the paper's Fig. 8): M2PO at the largest staleness hardly depends on tau
    between 0.02 and 0.08, and a very small or very large tau does worse than the default 0.04 (runs without a tau
    parameter use the default)."""
    by_tau = {}
    for run in tau_runs:
        by_tau.setdefault(run.config.objective_params.get("tau", DEFAULT_TAU), []).append(run)
    paper = "accuracy insensitive to tau between about 0.02 and 0.08; very small or very large values hurt"
    lo, hi = TAU_FLAT
    if not (by_tau.get(lo) and by_tau.get(hi)):
        out = [_missing(f"f. tau between {lo} and {hi} hardly matters", paper)]
    else:
        d = difference(by_tau[lo], by_tau[hi])
        out = [Signature(f"f. tau between {lo} and {hi} hardly matters", paper,
                         f"score at tau={lo} minus tau={hi}: {d}; match = inside ±{MATCH_BOUND}",
                         stats.matches(d, MATCH_BOUND))]
    for extreme in TAU_EXTREMES:
        out.append(_better(f"f. tau={extreme} does worse than tau={DEFAULT_TAU}", paper, by_tau.get(DEFAULT_TAU, []),
                           by_tau.get(extreme, []), f"score at tau={DEFAULT_TAU} minus tau={extreme}"))
    return out


# arXiv 2505.12929: Qwen2.5-3B on K&K, average accuracy over 3-7 people (Table 1); on math the gains are small
LOPTI_PAPER = {"knights_knaves": {"ar": "K&K average accuracy 0.39 -> 0.53", "lopti": "K&K average accuracy 0.39 -> 0.54",
                                  "ar+lopti": "K&K average accuracy 0.39 -> 0.57"},
               "arithmetic": dict.fromkeys(("ar", "lopti", "ar+lopti"),
                                           "math: small gains (AR about +1 point, Lopti adds nothing)")}
LOPTI_TASK_NAMES = {"knights_knaves": "Knights and Knaves", "arithmetic": "arithmetic"}


def lopti_signatures(runs, task: str | None = None) -> list[Signature]:
    """Chapter 4 (arXiv 2505.12929), on one task (the runs', or `task` where none is stored yet): GRPO learns it; AR,
    Lopti and both beat GRPO; the reversed order does not."""
    tasks = {run.config.task for run in runs} | ({task} if task else set()) or {"knights_knaves"}
    if len(tasks) > 1 or not tasks <= set(LOPTI_PAPER):
        raise ValueError(f"chapter 4's verdicts compare runs on one task of {sorted(LOPTI_PAPER)}; got {sorted(tasks)}")
    task = tasks.pop()
    by_variant = {}
    for run in runs:
        by_variant.setdefault(variant_of(run.config), []).append(run)
    grpo = by_variant.get("grpo", [])
    out = grpo_learns(grpo)
    paper = ("Qwen2.5-3B: average accuracy 0.39 after GRPO" if task == "knights_knaves"
             else "the comparison needs a task where GRPO learns")
    out[0] = Signature(f"GRPO learns {LOPTI_TASK_NAMES[task]}", paper, out[0].observed, out[0].verdict)
    for variant, paper in LOPTI_PAPER[task].items():
        out.append(_better(f"{variant} beats GRPO", paper, by_variant.get(variant, []), grpo, "score difference"))
    out.append(_better("reversed Lopti (high-probability tokens first) does worse than Lopti",
                       "the reversed order fails", by_variant.get("lopti", []), by_variant.get("lopti_reversed", []),
                       "score difference"))
    return out


SEMI_ONLINE_PAPER = "semi-online DPO and GRPO (sync every 10 or 100 steps) about as good as online; offline much worse"


def semi_online_signatures(runs) -> list[Signature]:
    """Chapter 7 (arXiv 2506.21495), per objective: each semi-online sync interval k > 1 matches online (k = 1),
    and online beats offline (k = 0, never synced)."""
    out = []
    for objective in sorted({r.config.objective for r in runs}):
        online, offline = cell(runs, objective, sync_every=1), cell(runs, objective, sync_every=0)
        for k in sorted({r.config.sync_every for r in runs if r.config.objective == objective} - {0, 1}):
            claim = f"{objective}: semi-online (sync every {k}) matches online"
            semi = cell(runs, objective, sync_every=k)
            if not (semi and online):
                out.append(_missing(claim, SEMI_ONLINE_PAPER))
                continue
            d = difference(semi, online)
            out.append(Signature(claim, SEMI_ONLINE_PAPER, f"score difference {d}; match = inside ±{MATCH_BOUND}",
                                 stats.matches(d, MATCH_BOUND)))
        out.append(_better(f"{objective}: online beats offline (never synced)", SEMI_ONLINE_PAPER, online, offline,
                           "score online minus offline"))
    return out


R3_PAPER = {"kl": "Qwen3-30B-A3B: train-inference KL 1.5e-3 without R3, 7.5e-4 with it", "f2": "fewer tokens with "
            "max(rho, 1/rho) > 2 with R3", "score": "R3 stable and best; GRPO without it collapses; R3 beats GSPO, TIS"}


def router_replay_signatures(runs) -> list[Signature]:
    """Chapter 6 (arXiv 2510.11370), the rollout engine mismatched: R3 lowers the train-vs-rollout KL and F(2) (means
    over updates), scores no worse than GRPO without it (non-inferiority at MATCH_BOUND), falls less from its peak,
    and beats GSPO and TIS."""
    by = {}
    for run in runs:
        by.setdefault(run.config.objective + ("+r3" if run.config.router_replay else ""), []).append(run)
    r3, grpo = by.get("grpo+r3", []), by.get("grpo", [])
    claims = [("R3 lowers the train-vs-rollout KL (k3)", R3_PAPER["kl"]), ("R3 leaves fewer extreme tokens, F(2)",
              R3_PAPER["f2"]), ("R3 scores at least as well as GRPO without it", R3_PAPER["score"]),
              ("R3 falls less from its peak than GRPO without it", R3_PAPER["score"])]
    if not (r3 and grpo):
        out = [_missing(claim, paper) for claim, paper in claims]
    else:
        out = []
        for (claim, paper), key in zip(claims, ("kl_k3", "f2")):
            a, b = per_seed(grpo, lambda r: token_share(r, key)), per_seed(r3, lambda r: token_share(r, key))
            out.append(Signature(claim, paper, f"mean over updates {a.mean:.2e} without, {b.mean:.2e} with R3; "
                                 f"difference {(a - b).mean:.2e} ± {(a - b).se:.2e} (n={(a - b).n})",
                                 stats.verdict(a - b)))
        d, fall = difference(r3, grpo), difference(grpo, r3, lambda r: smoothed_peak(r) - stats.score(r))
        out.append(Signature(*claims[2], f"score difference {d}; no worse = above -{MATCH_BOUND}",
                             stats.verdict(d, +1, -MATCH_BOUND)))
        out.append(Signature(*claims[3], f"best 3-evaluation mean minus score, without minus with R3: {fall}",
                             stats.verdict(fall)))
    return out + [_better(f"R3 beats {o.upper()}", R3_PAPER["score"], r3, by.get(o, []), "score difference")
                  for o in ("gspo", "tis")]


def markdown(signatures: list[Signature]) -> str:
    rows = ["| the paper found | the paper reports | we observe | verdict |", "|---|---|---|---|"]
    cell = lambda text: text.replace("|", "\\|")  # |r-1| inside a table cell
    rows += [f"| {cell(s.claim)} | {cell(s.paper)} | {cell(s.observed)} | **{s.verdict}** |" for s in signatures]
    return "\n".join(rows)
