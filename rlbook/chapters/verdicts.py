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
from . import papers
from .lopti import variant_of
from .run_groups import group_runs, select, variant

MATCH_BOUND = 0.03  # two accuracies "match" when the 2-s.e. interval of their difference lies inside +-0.03


@dataclass(frozen=True)
class Signature:
    claim: str  # what the paper found, in words
    paper: str  # the paper's numbers
    observed: str  # ours, in words and numbers
    verdict: str  # stats.REPRODUCED | NOT_REPRODUCED | WITHIN_NOISE, or "no runs"


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


def deepest_fall(run, metric: str = "eval_greedy_acc", window: int = 3, above: float | None = None) -> float:
    """The largest drop of the `window`-evaluation mean below an earlier one (shown even when the run recovers
    before its end, which the final score would hide); with `above`, only below earlier highs more than `above` over
    the base (0 when there is none)."""
    means, base = stats.window_means(run, metric, window), stats.base_score(run, metric)
    highs = [max(means[:j + 1]) for j in range(len(means))]
    return max((high - low for high, low in zip(highs, means) if above is None or high - base > above), default=0.0)


def difference(a, b, quantity=stats.score) -> stats.Estimate:
    """Seed mean of quantity over runs a minus that over runs b, standard errors in quadrature."""
    return per_seed(a, quantity) - per_seed(b, quantity)


def _pct(e: stats.Estimate) -> str:
    return f"{100 * e.mean:.2f}% ± {100 * e.se:.2f}"


NO_RUNS = "no runs"  # a signature's verdict where its runs are not stored
UNDECIDED = "undecided (too few runs stored)"  # what a chapter's prose quotes for such a verdict


def _missing(claim: str, paper: str) -> Signature:
    return Signature(claim, paper, "no runs of this setting", NO_RUNS)


def find(signatures: list[Signature], *words: str, absent_ok: bool = False) -> Signature | None:
    """The first signature whose claim holds every one of `words`. None where `signatures` is empty (no runs stored)
    or, with `absent_ok`, where the profile has no such setting (the smoke profile's chapter 7 has no sync interval of
    100); otherwise a miss is a ValueError listing the claims, so that a mistyped word fails instead of quoting
    nothing."""
    row = next((s for s in signatures if all(w in s.claim for w in words)), None)
    if row is None and signatures and not absent_ok:
        raise ValueError(f"no verdict's claim holds all of {list(words)}; the claims are: "
                         + "; ".join(repr(s.claim) for s in signatures))
    return row


def quoted_verdict(signatures: list[Signature], *words: str, absent_ok: bool = False) -> str:
    """The verdict of the first signature whose claim holds every one of `words` (find), for a chapter's prose to
    quote: UNDECIDED where there is none (absent_ok, or no signatures) or its runs are not stored."""
    row = find(signatures, *words, absent_ok=absent_ok)
    return UNDECIDED if row is None or row.verdict == NO_RUNS else row.verdict


def settings_where(signatures: list[Signature], word: str, verdict: str) -> str:
    """Where a per-setting claim (claims of the form "<setting>: <claim>", e.g. the drift ladder's rungs) has
    `verdict`: the settings of every signature whose claim holds `word`, joined by "; ", or "no setting" (prose reads
    "reproduced at no setting")."""
    return "; ".join(s.claim.split(":")[0] for s in signatures if word in s.claim and s.verdict == verdict) \
        or "no setting"


def _better(claim: str, paper: str, better, worse, what: str) -> Signature:
    """The paper says runs `better` score above runs `worse`: their seed-mean difference and its verdict."""
    if not (better and worse):
        return _missing(claim, paper)
    d = difference(better, worse)
    return Signature(claim, paper, f"{what}: {d}", stats.verdict(d, +1))


def _matches(claim: str, paper: str, runs, reference, what: str = "score difference", note: str = "") -> Signature:
    """The paper says runs `runs` score like runs `reference`: an equivalence test, the 2-s.e. interval of their
    seed-mean difference inside +-MATCH_BOUND (stats.matches). A `note` (why a match would mean little) makes the
    verdict "within noise" whatever the interval."""
    if not (runs and reference):
        return _missing(claim, paper)
    d = difference(runs, reference)
    return Signature(claim, paper, f"{what}: {d}; match = inside ±{MATCH_BOUND}{note}",
                     stats.WITHIN_NOISE if note else stats.matches(d, MATCH_BOUND))


def grpo_learns(runs) -> list[Signature]:
    """Chapter 1: GRPO raises a warm-started model's accuracy."""
    claim, paper = "GRPO raises the accuracy of a base model", papers.GRPO_GAIN.text
    if not runs:
        return [_missing(claim, paper)]
    g, base = per_seed(runs, gain), per_seed(runs, stats.base_score)
    observed = (f"greedy accuracy {base.mean:.3f} -> {base.mean + g.mean:.3f}: gain {g} "
                f"(last-3 evaluations, {g.n} seeds)")
    return [Signature(claim, paper, observed, stats.verdict(g, +1))]


def staleness_signatures(runs) -> list[Signature]:
    """Chapter 2 (M2PO, arXiv 2510.01161): a, b and e at the largest staleness of the runs."""
    if not runs:
        return []
    top = max(r.config.staleness for r in runs)
    grpo0, grpo_top = select(runs, "grpo", 0), select(runs, "grpo", top)
    free_top, m2po_top = select(runs, "no_clip", top), select(runs, "m2po", top)
    out = []
    out.append(_better(f"a. GRPO gets worse with staleness (s=0 vs s={top})",
                       papers.M2PO_STALENESS_COST.text, grpo0, grpo_top,
                       f"greedy score s=0 minus s={top}"))
    out += collapse_signatures(free_top, top, {"GRPO": grpo_top, "M2PO": m2po_top})
    out.append(_better(f"e. M2PO at s={top} beats GRPO at s={top}", papers.M2PO_BEATS_STALE_GRPO.text, m2po_top,
                       grpo_top,
                       "score difference"))
    # matching an on-policy run that learns nothing is a match of nothing
    learns = grpo0 and stats.verdict(per_seed(grpo0, gain), +1) == stats.REPRODUCED
    out.append(_matches(f"e. M2PO at s={top} matches on-policy GRPO", papers.M2PO_MATCHES_ON_POLICY.text, m2po_top,
                        grpo0, note="" if learns else " (but on-policy GRPO barely learns here)"))
    return out


def collapse_signatures(free_runs, staleness: int | None, trust: dict[str, list]) -> list[Signature]:
    """Signature b as the M2PO paper shows it (Figs. 1-2): without a trust region, runs at staleness s first learn at
    least as fast as the trust region at s (stats.prosperity; `trust`: name -> its runs at s), then end far below
    their own peak (stats.collapse, with the share of seeds that do)."""
    at = f"s={staleness}" if staleness is not None else "a stale run"
    paper = papers.M2PO_PROSPERITY.text
    rise = f"b. Without a trust region, {at} learns at least as fast early on as the trust region (prosperity)"
    fall = f"b. ... then collapses (ends more than {stats.COLLAPSE_FALL} below its own peak)"
    out = []
    if free_runs and any(trust.values()):
        judged = stats.prosperity(free_runs, trust)
        out.append(Signature(rise, paper, judged.observed, judged.verdict))
    else:
        out.append(Signature(rise, paper, "no trust-region runs at this staleness stored" if free_runs else
                             "no runs of this setting", NO_RUNS))
    if not free_runs:
        return out + [_missing(fall, paper)]
    judged = stats.collapse(free_runs)
    return out + [Signature(fall, paper, f"{judged.observed}; deepest fall anywhere: "
                                         f"{per_seed(free_runs, deepest_fall)}", judged.verdict)]


def long_collapse_signatures(runs) -> list[Signature]:
    """Signature b over a long horizon (experiments.collapse_long_sweep): no trust region at its largest staleness,
    judged against GRPO and M2PO at that staleness where they are stored."""
    free = select(runs, "no_clip", "max")
    top = free[0].config.staleness if free else None
    trust = {"GRPO": select(runs, "grpo", top), "M2PO": select(runs, "m2po", top)} if free else {}
    return collapse_signatures(free, top, trust)


def clip_mask_signatures(runs) -> list[Signature]:
    """Chapter 3 (M2PO, signature c): GRPO clips more when stale; M2PO masks few tokens."""
    if not runs:
        return []
    top = max(r.config.staleness for r in runs)
    grpo0, grpo_top, m2po_top = select(runs, "grpo", 0), select(runs, "grpo", top), select(runs, "m2po", top)
    paper = papers.M2PO_REMOVED_TOKENS.text
    if not (grpo0 and grpo_top and m2po_top):
        return [_missing("c. clipped vs masked tokens", paper)]
    c0, ctop = per_seed(grpo0, clip_share), per_seed(grpo_top, clip_share)
    mtop = per_seed(m2po_top, lambda r: token_share(r, "mask_frac"))
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
    grpo_top = select(runs, "grpo", top)
    claim = f"d. Token entropy rises with |r-1| (GRPO, s={top})"
    paper = papers.M2PO_ENTROPY.text
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
    paper = papers.M2PO_TAU.text
    lo, hi = TAU_FLAT
    out = [_matches(f"f. tau between {lo} and {hi} hardly matters", paper, by_tau.get(lo, []), by_tau.get(hi, []),
                    f"score at tau={lo} minus tau={hi}")]
    for extreme in TAU_EXTREMES:
        out.append(_better(f"f. tau={extreme} does worse than tau={DEFAULT_TAU}", paper, by_tau.get(DEFAULT_TAU, []),
                           by_tau.get(extreme, []), f"score at tau={DEFAULT_TAU} minus tau={extreme}"))
    return out


# the paper's numbers (rlbook.chapters.papers): Qwen2.5-3B on K&K (Table 1); on math the gains are small
_KK = papers.LOPTI_ACCURACY.values
# What the paper claims for each variant against GRPO, per task: "beats" (a gain) or "matches" (no gain, no loss).
# On math it reports AR's small gain and that Lopti adds nothing, and nothing for the two combined.
LOPTI_PAPER = {"knights_knaves": {v: ("beats", f"K&K average accuracy {_KK['grpo']:.2f} -> {_KK[v]:.2f}")
                                  for v in ("ar", "lopti", "ar+lopti")},
               "arithmetic": {"ar": ("beats", papers.LOPTI_MATH_AR.text),
                              "lopti": ("matches", papers.LOPTI_MATH_LOPTI.text)}}
LOPTI_TASK_NAMES = {"knights_knaves": "Knights and Knaves", "arithmetic": "arithmetic"}


def lopti_signatures(runs, task: str | None = None, name: str | None = None) -> list[Signature]:
    """Chapter 4 (arXiv 2505.12929), on one task (the runs', or `task` where none is stored yet): GRPO learns it
    (the row names the setting `name`, by default the task's LOPTI_TASK_NAMES); each variant beats or matches GRPO as
    the paper reports for that task (LOPTI_PAPER); the reversed order does worse than Lopti."""
    tasks = {run.config.task for run in runs} | ({task} if task else set()) or {"knights_knaves"}
    if len(tasks) > 1 or not tasks <= set(LOPTI_PAPER):
        raise ValueError(f"chapter 4's verdicts compare runs on one task of {sorted(LOPTI_PAPER)}; got {sorted(tasks)}")
    task = tasks.pop()
    by_variant = {}
    for run in runs:
        by_variant.setdefault(variant_of(run.config), []).append(run)
    grpo = by_variant.get("grpo", [])
    out = grpo_learns(grpo)
    paper = (f"Qwen2.5-3B: average accuracy {_KK['grpo']:.2f} after GRPO" if task == "knights_knaves"
             else "the comparison needs a task where GRPO learns")
    out[0] = Signature(f"GRPO learns {name or LOPTI_TASK_NAMES[task]}", paper, out[0].observed, out[0].verdict)
    for variant, (claim, paper) in LOPTI_PAPER[task].items():
        runs_of = by_variant.get(variant, [])
        compare = _better if claim == "beats" else _matches
        out.append(compare(f"{variant} {claim} GRPO", paper, runs_of, grpo, f"score {variant} minus GRPO"))
    out.append(_better("reversed Lopti (high-probability tokens first) does worse than Lopti",
                       papers.LOPTI_REVERSED.text, by_variant.get("lopti", []), by_variant.get("lopti_reversed", []),
                       "score Lopti minus reversed Lopti"))
    return out


GAIN_BAR = 0.10  # chapter 4: the gain GRPO needs on a setting before the variants' comparison can show the paper's size


def gain_against_bar(grpo_runs, bar: float = GAIN_BAR) -> str:
    """GRPO's gain (score minus base, per seed) placed against `bar`: `stats.verdict` with the bar as its margin, in
    words ("0.118 ± 0.006 (n=5): above 0.10 by more than two standard errors")."""
    if not grpo_runs:
        return "no GRPO runs stored"
    g = per_seed(grpo_runs, gain)
    if g.n < stats.MIN_SEEDS:
        return f"{g}: too few seeds to place against {bar:.2f}"
    where = {stats.REPRODUCED: f"above {bar:.2f} by more than two standard errors",
             stats.NOT_REPRODUCED: f"below {bar:.2f} by more than two standard errors",
             stats.WITHIN_NOISE: f"within two standard errors of {bar:.2f}"}[stats.verdict(g, +1, margin=bar)]
    return f"{g}: {where}"


def semi_online_signatures(runs) -> list[Signature]:
    """Chapter 7 (arXiv 2506.21495), per objective: each semi-online sync interval k > 1 matches online (k = 1),
    and online beats offline (k = 0, never synced)."""
    out, paper = [], papers.SEMI_ONLINE_ORDERING.text
    for objective in sorted({r.config.objective for r in runs}):
        online, offline = select(runs, objective, sync_every=1), select(runs, objective, sync_every=0)
        for k in sorted({r.config.sync_every for r in runs if r.config.objective == objective} - {0, 1}):
            out.append(_matches(f"{objective}: semi-online (sync every {k}) matches online", paper,
                                select(runs, objective, sync_every=k), online))
        out.append(_better(f"{objective}: online beats offline (never synced)", paper, online, offline,
                           "score online minus offline"))
    return out


def router_replay_signatures(runs) -> list[Signature]:
    """Chapter 6 (arXiv 2510.11370), the rollout engine mismatched: R3 lowers the train-vs-rollout KL and F(2) (means
    over updates), scores no worse than GRPO without it (non-inferiority at MATCH_BOUND), falls less (deepest fall
    of the 3-evaluation mean), and beats GSPO and TIS."""
    by = group_runs(runs, key=variant)
    r3, grpo = by.get("grpo+r3", []), by.get("grpo", [])
    claims = [("R3 lowers the train-vs-rollout KL (k3)", papers.R3_KL.text),
              ("R3 leaves fewer extreme tokens, F(2)", papers.R3_EXTREME_TOKENS.text),
              ("R3 scores at least as well as GRPO without it", papers.R3_STABILITY.text),
              ("R3 falls less than GRPO without it (deepest fall of the 3-evaluation mean)",
             papers.R3_STABILITY.text)]
    if not (r3 and grpo):
        out = [_missing(claim, paper) for claim, paper in claims]
    else:
        out = []
        for (claim, paper), key in zip(claims, ("kl_k3", "f2")):
            a, b = per_seed(grpo, lambda r: token_share(r, key)), per_seed(r3, lambda r: token_share(r, key))
            out.append(Signature(claim, paper, f"mean over updates {a.mean:.2e} without, {b.mean:.2e} with R3; "
                                 f"difference {(a - b).mean:.2e} ± {(a - b).se:.2e} (n={(a - b).n})",
                                 stats.verdict(a - b)))
        d, fall = difference(r3, grpo), difference(grpo, r3, deepest_fall)
        out.append(Signature(*claims[2], f"score difference {d}; no worse = above -{MATCH_BOUND}",
                             stats.verdict(d, +1, -MATCH_BOUND)))
        out.append(Signature(*claims[3], f"deepest fall of the 3-evaluation mean, without minus with R3: {fall}",
                             stats.verdict(fall)))
    return out + [_better(f"R3 beats {o.upper()}", papers.R3_STABILITY.text, r3, by.get(o, []), "score difference")
                  for o in ("gspo", "tis")]


def markdown(signatures: list[Signature]) -> str:
    rows = ["| the paper found | the paper reports | we observe | verdict |", "|---|---|---|---|"]
    cell = lambda text: text.replace("|", "\\|")  # |r-1| inside a table cell
    rows += [f"| {cell(s.claim)} | {cell(s.paper)} | {cell(s.observed)} | **{s.verdict}** |" for s in signatures]
    return "\n".join(rows)
