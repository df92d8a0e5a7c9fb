"""The profiles: one code path, different sizes; and `reference`, which shows the stored reference runs and trains none.

reference: the cpu profile's settings, replayed from data/runs (the rendered book; never trains).
smoke: nano-tiny, about a minute per notebook on 2 CPU cores (CI).   cpu: nano-small, minutes per run on a CPU.
standard: nano-base (25M parameters), one GPU; UNCALIBRATED (no pilot chose its settings).
paper: Qwen3-1.7B-Base with LoRA, one GPU; uncalibrated at our scale (the papers' settings).
Chapter 6 trains OLMoE-1B-7B in both GPU profiles (rlbook.experiments.ROUTER_BASE), which run on the GPU (device
'cuda', part of a run's identity: their runs are never the reference runs). `auto` is `cpu` on any machine, GPU or
not: the calibrated settings of the reference runs, on the CPU where the reference runs were made.
"""
from __future__ import annotations

PROFILES = ("smoke", "cpu", "standard", "paper")
REFERENCE = "reference"  # not a size: the reference runs (cpu settings), replayed
CALIBRATED = ("smoke", "cpu")  # settings chosen by recorded pilots (bench/results/)
DESCRIPTIONS = {
    REFERENCE: "reference: the stored reference runs (cpu profile settings) are shown; nothing is trained",
    "smoke": "smoke: tiny model and budgets (CI); trains what is not stored",
    "cpu": "cpu: the reference runs' calibrated settings; trains what is not stored",
    "standard": "standard (UNCALIBRATED: no pilot chose these settings): nano-base (chapter 6: OLMoE-1B-7B) on one "
                "GPU; trains what is not stored",
    "paper": "paper (UNCALIBRATED at this scale: the papers' settings): Qwen3-1.7B-Base (chapter 6: OLMoE-1B-7B) with "
             "LoRA on one GPU; trains what is not stored",
}


def resolve_profile(profile: str = "auto") -> str:
    """The sizes a profile trains with: auto -> cpu (calibrated, on any machine)."""
    if profile == "auto":
        return "cpu"
    if profile not in PROFILES:
        hint = " (reference trains nothing: use rlbook.profiles.book_profile)" if profile == REFERENCE else ""
        raise ValueError(f"profile={profile!r}{hint}; choose one of: auto, {', '.join(PROFILES)}")
    return profile


def book_profile(profile: str) -> tuple[str, bool]:
    """A notebook's PROFILE parameter as (the profile whose settings it uses, whether it may train).

    `reference` uses the cpu profile's settings and never trains; every other profile trains what is not stored."""
    if profile == REFERENCE:
        return "cpu", False
    return resolve_profile(profile), True


def describe(profile: str) -> str:
    """One line naming a notebook's profile, and saying when no pilot chose its settings."""
    name = profile if profile == REFERENCE else resolve_profile(profile)
    return "profile " + DESCRIPTIONS[name]
