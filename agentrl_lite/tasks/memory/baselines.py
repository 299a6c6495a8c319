"""Baseline memory managers run through a whole dialogue, and the table that compares a manager's operations
with the ideal ones.

- `oracle`: the recorded ideal operations;
- `append_only`: every fact-bearing turn stored as said, never updated or deleted (stale and contradicting
  facts pile up);
- `last_write_wins`: one memory per fact, overwritten by the newest value (the history a "what was it
  before?" question needs is lost).
Each returns (the final `MemoryBank`, the operations it chose); `op_confusion` tabulates the choices.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentrl_lite.tasks.memory.bank import CAPACITY, OPS, MemoryBank, _op
from agentrl_lite.tasks.memory.templates import memory_text, read_fact


def _run(dialogue: dict[str, Any], choose: Callable[[MemoryBank, dict[str, Any]], dict[str, Any]],
         capacity: int) -> tuple[MemoryBank, list[dict[str, Any]]]:
    """A manager `choose(bank, turn) -> operation` applied turn by turn to a fresh bank."""
    bank, chosen = MemoryBank(capacity), []
    for turn in dialogue["turns"]:
        op = choose(bank, turn)
        bank.apply(op)
        chosen.append(op)
    return bank, chosen


def oracle(dialogue: dict[str, Any], capacity: int = CAPACITY) -> tuple[MemoryBank, list[dict[str, Any]]]:
    """The ideal manager: applies each turn's recorded ideal operation. Returns (final bank, operations)."""
    return _run(dialogue, lambda bank, turn: turn["op"], capacity)


def append_only(dialogue: dict[str, Any], capacity: int = CAPACITY) -> tuple[MemoryBank, list[dict[str, Any]]]:
    """Store every fact-bearing turn as it was said (ADD), never update or delete; NOOP on small talk."""
    return _run(dialogue, lambda bank, turn: _op("ADD", None, turn["text"]) if read_fact(turn["text"])
                else _op("NOOP"), capacity)


def last_write_wins(dialogue: dict[str, Any],
                    capacity: int = CAPACITY) -> tuple[MemoryBank, list[dict[str, Any]]]:
    """One memory per (entity, attribute) read from the turn's text: the newest value overwrites the memory
    (so history is lost), a retraction deletes it, the same value again is a NOOP."""
    slots: dict[tuple[str, str], tuple[int, str]] = {}  # (entity, attribute) → (memory id, value)

    def choose(bank: MemoryBank, turn: dict[str, Any]) -> dict[str, Any]:
        fact = read_fact(turn["text"])
        if fact is None:
            return _op("NOOP")
        key = (fact["entity"], fact["attribute"])
        if fact["event"] == "retract":
            return _op("DELETE", slots.pop(key)[0]) if key in slots else _op("NOOP")
        content = memory_text(fact["attribute"], fact["entity"], [fact["value"]])
        if key not in slots:
            slots[key] = (bank.next_id, fact["value"])
            return _op("ADD", None, content)
        memory_id, value = slots[key]
        if value == fact["value"]:
            return _op("NOOP")
        slots[key] = (memory_id, fact["value"])
        return _op("UPDATE", memory_id, content)

    return _run(dialogue, choose, capacity)


def op_confusion(chosen: list[dict[str, Any]], ideal: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Ideal operation → chosen operation → count (operation names only; targets are not compared)."""
    table = {i: dict.fromkeys((*OPS, "other"), 0) for i in OPS}
    for c, i in zip(chosen, ideal, strict=True):
        table[i["op"]][c["op"] if c["op"] in OPS else "other"] += 1
    return table
