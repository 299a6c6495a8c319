"""Memory agents (task family, lesson 11): multi-session dialogues whose facts change, a memory bank a manager
edits with four operations, and a constant-size memory in the style of MEM1.

A conversation spread over several sessions is too long to keep in a small model's context, so an agent keeps
a memory bank instead and answers later questions from it. Memory-R1 splits the agent in two: a *memory
manager* that, for each new piece of information, retrieves the related memories and chooses one operation,
ADD (a new fact), UPDATE (rewrite a memory: the fact changed or was corrected), DELETE (the fact was retracted)
or NOOP (nothing to store: small talk, a repeat), and an *answer agent* that reads the memories retrieved for
a question. Appending everything (no UPDATE, no DELETE) fills the bank with stale and contradicting facts;
overwriting everything loses the history a "what was it before?" question needs. MEM1 takes the other road:
one bounded internal state that the agent rewrites every turn.

- `templates`: the wording of turns, memories, questions and the manager's prompt; `read_fact`, `memory_text`;
- `bank`: the `MemoryBank` tool and its four operations;
- `questions`: the questions a dialogue supports, `probes`, and `gold_answer_in_bank`;
- `dialogues`: the generator, `memory_dialogues`;
- `baselines`: `oracle`, `append_only`, `last_write_wins` and `op_confusion`;
- `manager`: the manager's tasks, rewards and `MemoryManagerEnv`;
- `demonstrations`: the manager's cold-start data and counterfactual tasks;
- `answer`: the answer agent, `AnswerEnv`;
- `constant`: the constant-size memory, `ConstantMemoryEnv`;
- `replay`: policies run through whole dialogues (`replay_policy`, `model_manager`, `replay_constant_memory`).

Why the manager's demonstrations and rewards are built as they are: `docs/design/11_memory_agents.md`.
"""

from agentrl_lite.tasks.memory.answer import (
    ANSWER_PROMPT,
    AnswerEnv,
    answer_demonstrations,
    answer_score,
    answer_tasks,
    evidence,
    retrieved,
)
from agentrl_lite.tasks.memory.bank import CAPACITY, MAX_MEMORY_WORDS, OPS, RELATED_K, MemoryBank
from agentrl_lite.tasks.memory.bank import _written as _written
from agentrl_lite.tasks.memory.baselines import append_only, last_write_wins, op_confusion, oracle
from agentrl_lite.tasks.memory.constant import (
    STATE_PROMPT,
    STATE_WORDS,
    ConstantMemory,
    ConstantMemoryEnv,
    constant_memory_reward,
    constant_memory_tasks,
    rewritten_state,
    state_bank,
    state_of,
)
from agentrl_lite.tasks.memory.demonstrations import (
    SUBJECTS,
    cold_start_conversations,
    counterfactual_tasks,
    demonstration,
    ideal_call,
    manager_note,
)
from agentrl_lite.tasks.memory.dialogues import (
    DIALOGUES,
    SPLIT_SHARES,
    SPLITS,
    heldout_dialogues,
    memory_dialogues,
)
from agentrl_lite.tasks.memory.manager import (
    FORMAT_WEIGHT,
    MARK,
    MARK_PROMPT,
    NOTE_PROMPT,
    SIZE_PENALTY,
    MemoryManagerEnv,
    chosen_op,
    decision_reward,
    decision_right,
    manager_outcome,
    manager_reward,
    manager_tasks,
    stored_memory,
)
from agentrl_lite.tasks.memory.questions import (
    KINDS,
    QUESTIONS_PER_KIND,
    UNKNOWN,
    gold_answer_in_bank,
    probes,
)
from agentrl_lite.tasks.memory.templates import (
    CHAINED_QUESTION,
    CHATS,
    COLOURS,
    ENTITY_CHATS,
    EXAMPLE_NAME,
    JOBS,
    MANAGER_PROMPT,
    MEMORY_TEMPLATES,
    ORG_SUFFIXES,
    PERSON_ATTRIBUTES,
    QUESTION_TEMPLATES,
    TURN_TEMPLATES,
    memory_text,
    read_fact,
)

__all__ = [
    # templates
    "CHAINED_QUESTION", "CHATS", "COLOURS", "ENTITY_CHATS", "EXAMPLE_NAME", "JOBS", "MANAGER_PROMPT",
    "MEMORY_TEMPLATES", "ORG_SUFFIXES", "PERSON_ATTRIBUTES", "QUESTION_TEMPLATES", "TURN_TEMPLATES", "memory_text",
    "read_fact",
    # bank
    "CAPACITY", "MAX_MEMORY_WORDS", "OPS", "RELATED_K", "MemoryBank",
    # questions
    "KINDS", "QUESTIONS_PER_KIND", "UNKNOWN", "gold_answer_in_bank", "probes",
    # dialogues
    "DIALOGUES", "SPLITS", "SPLIT_SHARES", "heldout_dialogues", "memory_dialogues",
    # baselines
    "append_only", "last_write_wins", "op_confusion", "oracle",
    # manager
    "FORMAT_WEIGHT", "MARK", "MARK_PROMPT", "NOTE_PROMPT", "SIZE_PENALTY", "MemoryManagerEnv", "chosen_op",
    "decision_reward", "decision_right", "manager_outcome", "manager_reward", "manager_tasks", "stored_memory",
    # demonstrations
    "SUBJECTS", "cold_start_conversations", "counterfactual_tasks", "demonstration", "ideal_call", "manager_note",
    # answer
    "ANSWER_PROMPT", "AnswerEnv", "answer_demonstrations", "answer_score", "answer_tasks", "evidence", "retrieved",
    # constant
    "STATE_PROMPT", "STATE_WORDS", "ConstantMemory", "ConstantMemoryEnv", "constant_memory_reward",
    "constant_memory_tasks", "rewritten_state", "state_bank", "state_of",
    # replay
    "model_manager", "replay_constant_memory", "replay_policy",
]


_REPLAY = ("model_manager", "replay_constant_memory", "replay_policy")


def __getattr__(name: str):
    # the replayers run a model (`evaluate`, hence transformers' modelling code, seconds to import): loaded on first
    # use, so that the task's data, tools and rewards import without them
    if name in _REPLAY:
        from agentrl_lite.tasks.memory import replay

        return getattr(replay, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
