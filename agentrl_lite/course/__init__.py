"""Course tooling, apart from the RL library: run profiles and the presets lessons share (`profiles`),
results files (`results`), the generated data files (`data`), exercise generation and checks
(`exercises`), notebook execution and reports (`runner`) and the `agentrl-lite` command (`cli`)."""
