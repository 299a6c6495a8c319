"""Course tooling, apart from the RL library: run profiles and the presets lessons share (`profiles`),
results files (`results`), the generated data files (`data`), exercise generation and checks
(`exercises`), notebook execution and reports (`runner`) and the `agentrl-lite` command (`cli`)."""

from agentrl_lite.course.profiles import resolve_profile, seed_everything
from agentrl_lite.course.results import write_results

__all__ = ["resolve_profile", "seed_everything", "write_results"]
