"""Policy replayers: a manager policy (or a constant-memory policy) run through whole dialogues on the memory
it builds itself, turn by turn, with no teacher forcing. The only module of the memory task that runs a model
(`evaluate`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentrl_lite.episode import Episode
from agentrl_lite.evaluate import evaluate
from agentrl_lite.models import sampling_copy
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.tasks.memory.bank import CAPACITY, MemoryBank, _written
from agentrl_lite.tasks.memory.constant import STATE_WORDS, rewritten_state, state_bank
from agentrl_lite.tasks.memory.manager import MemoryManagerEnv, _manager_task, chosen_op
from agentrl_lite.tasks.memory.questions import gold_answer_in_bank, probes
from agentrl_lite.tools import Toolbox


def replay_policy(dialogues: list[dict[str, Any]], manage: Callable[[list[dict[str, Any]]], list[Episode]],
                  capacity: int = CAPACITY) -> list[dict[str, Any]]:
    """Run a manager policy through whole dialogues, turn by turn, on the banks it builds itself (no teacher
    forcing): the dialogues advance together, one `manage(tasks)` call per turn index, so a model answers
    a batch. Each reply is run on the dialogue's bank as the tool would run it.

    Returns one record per dialogue: bank (the final `MemoryBank`), ops (`chosen_op` per turn), episodes.
    """
    records = [{"bank": MemoryBank(capacity), "ops": [], "episodes": []} for _ in dialogues]
    for t in range(max(len(d["turns"]) for d in dialogues)):
        active = [i for i, d in enumerate(dialogues) if t < len(d["turns"])]
        tasks = [_manager_task(dialogues[i], t, records[i]["bank"]) for i in active]
        for i, episode in zip(active, manage(tasks), strict=True):
            Toolbox(records[i]["bank"].tools()).run(_written(episode))
            records[i]["ops"].append(chosen_op(episode))
            records[i]["episodes"].append(episode)
    return records


def model_manager(model: Any, tokenizer: Any, config: RolloutConfig, dtype: str | None = "auto"
                  ) -> Callable[[list[dict[str, Any]]], list[Episode]]:
    """A language model as the `manage` of `replay_policy`: each batch of tasks is one `evaluate` call in
    `MemoryManagerEnv`, by a sampling copy of the model made once (`models.sampling_copy`), not once per turn."""
    sampler = sampling_copy(model, dtype) or model
    env = MemoryManagerEnv()
    return lambda tasks: evaluate(sampler, tokenizer, env, tasks, config).episodes


def replay_constant_memory(dialogues: list[dict[str, Any]], manage: Callable[[list[dict[str, Any]]], list[Episode]],
                           max_words: int = STATE_WORDS) -> list[dict[str, Any]]:
    """`replay_policy` for the constant memory: each dialogue's state is rewritten by the policy turn by turn.
    Returns per dialogue: state (the final one), probes (the share of the probes answerable after each turn)
    and episodes."""
    records = [{"state": "", "probes": [], "episodes": []} for _ in dialogues]
    for t in range(max(len(d["turns"]) for d in dialogues)):
        active = [i for i, d in enumerate(dialogues) if t < len(d["turns"])]
        tasks = [{"id": f"{dialogues[i]['id']}-s{t:02d}", "state": records[i]["state"], "max_words": max_words,
                  "session": dialogues[i]["turns"][t]["session"], "text": dialogues[i]["turns"][t]["text"],
                  "event": dialogues[i]["turns"][t]["event"], "probes": probes(dialogues[i]["turns"][: t + 1])}
                 for i in active]
        for i, task, episode in zip(active, tasks, manage(tasks), strict=True):
            records[i]["state"], _ = rewritten_state(task, _written(episode))
            passed = [gold_answer_in_bank(state_bank(records[i]["state"]), q) for q in task["probes"]]
            records[i]["probes"].append(sum(passed) / len(passed) if passed else 1.0)
            records[i]["episodes"].append(episode)
    return records
