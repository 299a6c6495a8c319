"""agentrl_lite: reinforcement learning for tool-using LLM agents, small enough to read in an afternoon.

Data flow, one module per stage: task (data, envs) → rollout → rewards → advantages → loss → update.
"""

from agentrl_lite.utils import resolve_profile, seed_everything, write_results

__version__ = "0.1.0"
__all__ = ["resolve_profile", "seed_everything", "write_results", "__version__"]
