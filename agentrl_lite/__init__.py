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
generated encyclopedia, kernel generation, memory), course tooling in `agentrl_lite.course` (profiles, results
files, data files, exercises, runner, generated docs, CLI). Layers point one way: core <- tasks <- course.

`paths` says where files live; `torch_defaults` holds the one import-time effect (environment defaults for
torch's caches, each overridable) and says why.
"""

from agentrl_lite import torch_defaults  # noqa: F401  (sets torch's cache defaults; see that module)

__version__ = "0.1.0"
__all__ = ["__version__"]
