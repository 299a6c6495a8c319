"""agentrl_lite: reinforcement learning for tool-using LLM agents, small enough to read in an afternoon.

The RL library, one module per pipeline stage, in the order data flows through them:

    models      load a policy (the embedded SmolLM2, any Hugging Face id or path, LoRA)
    chat        the chat format: render with the chat template, parse tool calls, read the answer
    tools       Toolbox (the one tool interface), calculator, python, search (BM25) — and sandbox, which runs python
    episode     the record of one episode: token ids, log-probs, model_mask, turns
    env         the Environment protocol: prompt, toolbox_for, score
    rollout     batched multi-turn generation of episodes
    rewards     TRL-signature reward functions; the one definition of a correct answer
    advantages  group-relative and turn-level advantages
    logprobs    per-token log-probabilities and entropy under the policy
    loss        GRPO's clipped policy loss and its aggregations (equal to TRL's)
    grpo        the trainer: rollout → reward → advantage → loss → update
    sft         cold-start supervised fine-tuning
    evaluate    held-out evaluation through an environment, one report per label
    trl_bridge  the same environments and rewards inside TRL's GRPOTrainer
    viz         plots and the trajectory viewer

Task families live in `agentrl_lite.tasks` (arithmetic, word problems, function calls and BFCL, search over a
generated encyclopedia, kernel generation), course tooling in `agentrl_lite.course` (profiles, results files,
data files, exercises, runner, README tables, CLI).
"""

import os
from pathlib import Path


def cache_root() -> Path:
    """Where the course keeps its caches: $AGENTRL_CACHE, else ~/.cache/agentrl_lite (not created here)."""
    return Path(os.environ.get("AGENTRL_CACHE") or Path.home() / ".cache" / "agentrl_lite")


# torch creates its compiler cache when torch._dynamo is first imported (loading a model does it), by default in
# /tmp/torchinductor_<user>, where it outlives every run. Keep it with the course's other caches unless the user
# chose a place (the directory is torch's to create).
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_root() / "torchinductor"))

# Under bf16 on a CPU every new matrix shape compiles a oneDNN kernel, kept in two caches: oneDNN's own (1024
# kernels by default) and that of PyTorch's oneDNN wrapper, ideep (LRU_CACHE_CAPACITY, 1024). RL passes change
# width with every batch, so both fill: about 17 MB a shape, over a gigabyte in one lesson
# (benchmarks/probes/onednn_shapes.py). Small caps keep the memory flat. Both libraries read these variables
# when they first build a kernel, so setting them here works even after torch was imported.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "32")
os.environ.setdefault("LRU_CACHE_CAPACITY", "16")

from agentrl_lite.course.profiles import resolve_profile, seed_everything  # noqa: E402
from agentrl_lite.course.results import write_results  # noqa: E402

__version__ = "0.1.0"
__all__ = ["resolve_profile", "seed_everything", "write_results", "__version__"]
