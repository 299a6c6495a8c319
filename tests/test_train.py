"""`agentrl-lite train`: every lesson's environment outside its notebook, with our trainer or TRL's, saving a
policy `load_policy` reloads; the accelerate configurations and commands of docs/scale.md are consistent."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from agentrl_lite.course.cli import main as cli_main
from agentrl_lite.course.train import RECIPES, config_from, parser
from agentrl_lite.models import load_policy

REPO = Path(__file__).resolve().parent.parent
TINY = ["--model", "tiny", "--steps", "1", "--prompts", "2", "--group", "2", "--tasks", "4", "--max-new-tokens", "8",
        "--lr", "1e-3"]


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_recipe_builds_its_lessons_environment(name):
    env, tasks, rewards, weights = RECIPES[name].build()
    assert tasks and len(rewards) == len(weights) and all(callable(r) for r in rewards)
    assert env.prompt(tasks[0]), f"{name}: no prompt"
    assert (REPO / "notebooks" / f"{RECIPES[name].lesson}.ipynb").exists()


def test_the_lessons_budgets_and_the_command_lines_size_make_the_config(tmp_path):
    args = parser().parse_args(["--env", "memory", "--output-dir", str(tmp_path), "--steps", "3", "--group", "4"])
    config = config_from(args)
    assert (config.steps, config.group_size, config.prompts_per_step) == (3, 4, 4)
    assert (config.rollout.max_turns, config.rollout.max_new_tokens) == (1, 64) and config.scale_rewards == "none"
    with pytest.raises(SystemExit):
        parser().parse_args(["--env", "chess", "--output-dir", str(tmp_path)])


@pytest.mark.slow
@pytest.mark.parametrize("trainer", ["ours", "trl"])
def test_train_saves_a_policy_that_load_policy_reloads(tmp_path, trainer):
    cli_main(["train", "--env", "function_calls", "--trainer", trainer, "--output-dir", str(tmp_path), *TINY])
    final = tmp_path / "final"
    assert (final / "model.safetensors").is_file() and (final / "tokenizer_config.json").is_file()
    model, _ = load_policy(str(final), device="cpu")
    assert all(torch.isfinite(p).all() for p in model.parameters())
    if trainer == "ours":
        assert (final / "trainer_state.pt").is_file()  # a checkpoint it can also resume from


def test_our_trainer_refuses_several_processes(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(SystemExit, match="one process"):
        cli_main(["train", "--env", "arithmetic", "--output-dir", str(tmp_path), *TINY])
    with pytest.raises(SystemExit, match="--trainer trl"):
        monkeypatch.setenv("WORLD_SIZE", "1")
        cli_main(["train", "--env", "arithmetic", "--vllm", "colocate", "--output-dir", str(tmp_path), *TINY])


def test_the_accelerate_configurations_load_and_the_docs_commands_use_them():
    from accelerate.commands.config.config_args import ClusterConfig

    expected = {"ddp.yaml": "MULTI_GPU", "zero2.yaml": "DEEPSPEED", "zero3.yaml": "DEEPSPEED", "fsdp2.yaml": "FSDP"}
    for name, kind in expected.items():
        config = ClusterConfig.from_yaml_file(REPO / "configs" / "accelerate" / name)  # unknown keys raise
        assert config.num_processes == 8 and str(config.distributed_type).endswith(kind), name
    page = (REPO / "docs" / "scale.md").read_text()
    used = set(re.findall(r"configs/accelerate/([\w.]+)", page))
    assert used == set(expected), f"docs/scale.md names {used}"
    for env in re.findall(r"--env (\w+)", page):
        assert env in RECIPES, f"docs/scale.md trains --env {env}, which agentrl_lite.course.train does not know"
    known = {a for action in parser()._actions for a in action.option_strings}
    commands = [line.split("agentrl_lite.course.train", 1)[1] for line in page.replace("\\\n", " ").splitlines()
                if "agentrl_lite.course.train " in line]
    assert len(commands) >= 6
    for command in commands:
        assert {w for w in command.split() if w.startswith("--")} <= known, command
