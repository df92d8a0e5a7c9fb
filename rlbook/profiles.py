"""The profiles: one code path, different sizes. `resolve_profile("auto")` picks standard with CUDA, else smoke.

smoke: nano-tiny, about a minute per notebook on 2 CPU cores (CI).   cpu: nano-small, minutes on a CPU.
standard: nano-base (25M parameters), one GPU.                      paper: Qwen3-1.7B-Base with LoRA, one GPU.
"""
from __future__ import annotations

PROFILES = ("smoke", "cpu", "standard", "paper")


def resolve_profile(profile: str = "auto") -> str:
    if profile == "auto":
        import torch

        return "standard" if torch.cuda.is_available() else "smoke"
    if profile not in PROFILES:
        raise ValueError(f"profile={profile!r}; choose one of: auto, {', '.join(PROFILES)}")
    return profile
