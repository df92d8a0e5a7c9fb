"""The three profiles: one code path, different sizes. `resolve_profile("auto")` picks standard with CUDA, else smoke."""
from __future__ import annotations

PROFILES = ("smoke", "standard", "paper")


def resolve_profile(profile: str = "auto") -> str:
    if profile == "auto":
        import torch

        return "standard" if torch.cuda.is_available() else "smoke"
    if profile not in PROFILES:
        raise ValueError(f"profile={profile!r}; choose one of: auto, {', '.join(PROFILES)}")
    return profile
