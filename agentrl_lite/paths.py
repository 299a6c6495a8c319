"""Where agentrl_lite keeps its files: the cache, the course checkout, its data and its results.

Each place can be moved with an environment variable:

    AGENTRL_CACHE    caches (the converted embedded model, torch's compiler cache); default ~/.cache/agentrl_lite
    AGENTRL_ROOT     the course checkout (notebooks/, data/, results/); default: the folder above this package
    AGENTRL_DATA     the task files; default $AGENTRL_ROOT/data

The library itself needs only the cache. Task files and results live in the course checkout, which an editable
install (`make setup`) finds by itself; after a plain `pip install .` set AGENTRL_ROOT (or AGENTRL_DATA).
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """Where the caches go: $AGENTRL_CACHE, else ~/.cache/agentrl_lite (not created here)."""
    return Path(os.environ.get("AGENTRL_CACHE") or Path.home() / ".cache" / "agentrl_lite")


def course_root() -> Path:
    """The course checkout: $AGENTRL_ROOT, else the folder holding this package when it is a checkout."""
    if root := os.environ.get("AGENTRL_ROOT"):
        path = Path(root).expanduser().resolve()
        if not (path / "data").is_dir():
            raise FileNotFoundError(f"AGENTRL_ROOT={root} has no data/ folder: point it at the agentrl_lite checkout")
        return path
    path = Path(__file__).resolve().parents[1]
    if (path / "data").is_dir() and (path / "notebooks").is_dir():
        return path
    raise FileNotFoundError(
        f"agentrl_lite is installed at {path}, outside the course checkout, so its data/ and results/ cannot be "
        "found: set AGENTRL_ROOT to the checkout (the folder with data/ and notebooks/), or install with "
        "`pip install -e .` from the checkout")


def data_dir() -> Path:
    """The generated task files: $AGENTRL_DATA, else the checkout's data/."""
    if data := os.environ.get("AGENTRL_DATA"):
        return Path(data).expanduser().resolve()
    return course_root() / "data"
