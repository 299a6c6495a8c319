"""Course tooling, apart from the RL library: run profiles (`profiles`) and the presets lessons share (`presets`),
results files (`results`), the generated data files (`data`), exercise generation and checks (`exercises`),
notebook execution (`runner`, with `budgets` and `memory`), whole-course runs and their records (`course_runs`),
seed studies (`reproduce`), the generated tables of the docs (`docs`) and the `agentrl-lite` command (`cli`)."""

from agentrl_lite.course.profiles import resolve_profile, seed_everything
from agentrl_lite.course.results import write_results

__all__ = ["resolve_profile", "seed_everything", "write_results"]
