"""Run profiles and seeding (course tooling): every notebook reads its profile from AGENTRL_PROFILE.

| profile | where | budget per notebook |
|---|---|---|
| smoke | CI, `make test` | ≤ 60 s on a 2-core CPU with fast bf16: proves the plumbing, not the method |
| cpu | a laptop | ≤ 20 min: real learning with the embedded model |
| gpu | one GPU | ≤ 30 min: the reproduction numbers |
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

PROFILES = ("smoke", "cpu", "gpu")


def resolve_profile(profile: str | None = None) -> str:
    """`auto` (the default) means `gpu` when CUDA is available, else `cpu`. Read from AGENTRL_PROFILE."""
    profile = profile or os.environ.get("AGENTRL_PROFILE", "auto")
    if profile == "auto":
        profile = "gpu" if torch.cuda.is_available() else "cpu"
    if profile not in PROFILES:
        raise ValueError(f"Unknown profile {profile!r}: choose one of {PROFILES} or 'auto'")
    return profile


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA) so a run repeats exactly on the same machine."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
