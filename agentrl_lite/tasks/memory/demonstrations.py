"""The memory manager's cold-start data: the ideal call of a task, the note a manager may write before it,
gold conversations with the rarer operations drawn again, and counterfactual copies of tasks whose bank is
changed so that the same message needs the other operation.
"""

from __future__ import annotations

import random
from typing import Any

from agentrl_lite.chat import ToolCall, format_tool_call
from agentrl_lite.tasks.memory.bank import MemoryBank, _op
from agentrl_lite.tasks.memory.manager import (
    _TOOL_OPS,
    MemoryManagerEnv,
    _related,
    _user_message,
    stored_memory,
)
from agentrl_lite.tasks.memory.templates import memory_text, read_fact

SUBJECTS = {"city": "{e}'s home city", "job": "{e}'s job", "pet": "{e}'s pet", "colour": "{e}'s favourite colour",
            "employer": "{e}'s employer", "based": "{e}'s base"}
"""attribute → how a note names the fact ("whose what")"""


def manager_note(task: dict[str, Any]) -> str:
    """The line a manager writes before its call: the fact the message is about, and the memory that holds it.
    "Fact: Tamo Vesk's pet. Memory: [3]." — the operation then follows from reading two lines: no fact, NOOP;
    no memory, ADD; a memory, UPDATE for a new value, NOOP for the same, DELETE for a retraction."""
    fact = read_fact(task["text"])
    if fact is None:
        return "Fact: none."
    memory = stored_memory(task, fact)
    return f"Fact: {SUBJECTS[fact['attribute']].format(e=fact['entity'])}. " \
           f"Memory: {'none' if memory is None else f'[{memory}]'}."


def ideal_call(task: dict[str, Any]) -> ToolCall:
    """The ideal operation of a manager task as a tool call."""
    ideal = task["ideal"]
    name = {op: tool for tool, op in _TOOL_OPS.items()}[ideal["op"]]
    arguments = {"memory_id": ideal["target"]} if ideal["target"] is not None else {}
    if ideal["content"] is not None:
        arguments["content"] = ideal["content"]
    return ToolCall(name, arguments)


def demonstration(task: dict[str, Any], note: bool = False) -> list[dict[str, str]]:
    """The gold conversation after the system prompt: the turn and its related memories, then the ideal call
    (with note: the `manager_note` line first, for `MemoryManagerEnv(note=True)`)."""
    call = format_tool_call(ideal_call(task))
    return [{"role": "user", "content": _user_message(task)},
            {"role": "assistant", "content": f"{manager_note(task)}\n{call}" if note else call}]


def cold_start_conversations(env: MemoryManagerEnv, tasks: list[dict[str, Any]], seed: int,
                             min_share: float = 0.2) -> tuple[list[list[dict[str, str]]], dict[str, int]]:
    """The manager's cold-start data: every task's prompt and ideal call, with the rarer operations' tasks drawn
    again (with replacement) until each operation is at least `min_share` of the tasks' count, then shuffled.
    Retractions (DELETE) and changes (UPDATE) are a small share of the turns; drawn again, a short cold start
    still shows each operation several times.

    Returns the conversations and how many demonstrations show each operation."""
    by_op: dict[str, list[dict[str, Any]]] = {}
    for t in tasks:
        by_op.setdefault(t["ideal"]["op"], []).append(t)
    rng = random.Random(seed)
    floor = int(min_share * len(tasks))
    shown = list(tasks) + [t for ts in by_op.values() for t in rng.choices(ts, k=max(0, floor - len(ts)))]
    conversations = [env.prompt(t) + demonstration(t, note=env.note)[1:] for t in shown]
    rng.shuffle(conversations)
    counts: dict[str, int] = {}
    for t in shown:
        counts[t["ideal"]["op"]] = counts.get(t["ideal"]["op"], 0) + 1
    return conversations, counts


def counterfactual_tasks(tasks: list[dict[str, Any]], seed: int = 0, per_event: int | None = None
                         ) -> list[dict[str, Any]]:
    """Copies of manager tasks whose bank is changed so that the same message needs the other operation: a change
    turn with the memory of its (person, attribute) taken out of the bank (then the fact is new: ADD), and a state
    turn with a memory of its (person, attribute) put in, holding another value (then the fact changed: UPDATE
    that memory, keeping the earlier value). For cold-start demonstrations only (their probes are not built).

    In the generated turns the wording predicts the operation ("has moved to" is a change, "lives in" a new
    fact); with these copies the message alone no longer tells ADD from UPDATE, the related memories do.
    per_event: how many of each (default: as many state copies as there are change turns). The new memory's
    value is another state turn's value of the same attribute."""
    rng = random.Random(seed)
    changes = [t for t in tasks if t["event"] == "change"]
    states = [t for t in tasks if t["event"] == "state"]
    n = len(changes) if per_event is None else per_event
    values: dict[str, list[str]] = {}
    for t in states:
        fact = read_fact(t["text"])
        values.setdefault(fact["attribute"], []).append(fact["value"])
    out = []
    for t in rng.sample(changes, min(n, len(changes))):
        fact = read_fact(t["text"])
        target = t["ideal"]["target"]
        bank = MemoryBank.from_state(t["bank"])
        del bank.entries[target]
        out.append({**_counterfactual(t, bank, "change, memory taken out"),
                    "ideal": _op("ADD", None, memory_text(fact["attribute"], fact["entity"], [fact["value"]]))})
    for t in rng.sample(states, min(n, len(states))):
        fact = read_fact(t["text"])
        old = rng.choice([v for v in values[fact["attribute"]] if v != fact["value"]])
        bank = MemoryBank.from_state(t["bank"])
        if len(bank.entries) >= bank.capacity:
            continue
        target = bank.next_id
        bank.add(memory_text(fact["attribute"], fact["entity"], [old]))
        out.append({**_counterfactual(t, bank, "state, memory put in"), "ideal": _op(
            "UPDATE", target, memory_text(fact["attribute"], fact["entity"], [old, fact["value"]]))})
    return out


def _counterfactual(task: dict[str, Any], bank: MemoryBank, event: str) -> dict[str, Any]:
    """The task with another bank: its probes and ideal size belong to the original bank, so they are left out."""
    kept = {key: value for key, value in task.items() if key not in ("probes", "ideal_size")}
    return {**kept, "id": f"{task['id']}-cf", "event": event, "bank": bank.state(),
            "related": _related(bank, task["text"])}
