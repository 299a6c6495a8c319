"""Lesson 11 probe: what `manager_reward` pays each kind of reply, per event, on every training turn.

Item 11 of results/notes/11_memory_agents.md: GRPO on the manager's turns drove it to ADD everywhere. This table
shows why that is the safe policy for a manager that cannot tell the events apart: on the turns where ADD is wrong
for the record (a repeated fact, small talk) it costs only the size penalty, while a wrong UPDATE of a new fact costs
the whole answer. Replies: the ideal call; ADD of the ideal content; ADD of the message; NOOP; UPDATE of the first
related memory with the message (no history). No model; a few seconds.

    python benchmarks/probes/p11_reward_table.py     # writes results/notes/11_probes/reward_table.json
"""

from __future__ import annotations

import datetime
import json
from collections import Counter, defaultdict
from pathlib import Path

from agentrl_lite.chat import ToolCall, format_tool_call
from agentrl_lite.course.results import current_command
from agentrl_lite.tasks import DATA_DIR, read_jsonl
from agentrl_lite.tasks.memory import FORMAT_WEIGHT, SIZE_PENALTY, ideal_call, manager_outcome, manager_tasks

OUT = Path(__file__).resolve().parents[2] / "results" / "notes" / "11_probes" / "reward_table.json"


def replies(task: dict) -> dict[str, ToolCall]:
    content = task["ideal"]["content"] or task["text"]
    out = {"ideal": ideal_call(task), "ADD the ideal content": ToolCall("add", {"content": content}),
           "ADD the message": ToolCall("add", {"content": task["text"]}), "NOOP": ToolCall("noop", {})}
    if task["related"]:
        out["UPDATE the first related memory with the message"] = ToolCall(
            "update", {"memory_id": task["related"][0]["id"], "content": task["text"]})
    return out


def main() -> None:
    tasks = manager_tasks(read_jsonl(DATA_DIR / "memory_train.jsonl"))
    table: dict[str, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
    for task in tasks:
        for name, call in replies(task).items():
            table[task["event"]][name][round(manager_outcome(task, format_tool_call(call))["reward"], 2)] += 1
    rows = {event: {name: {str(r): n for r, n in sorted(c.items())} for name, c in by_reply.items()}
            for event, by_reply in sorted(table.items())}
    for event, by_reply in rows.items():
        print(event, json.dumps(by_reply))
    OUT.write_text(json.dumps({
        "command": current_command(), "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "what": "manager_reward of five canned replies on every training turn, by event: {event: {reply: {reward: turns}}}",
        "format_weight": FORMAT_WEIGHT, "size_penalty": SIZE_PENALTY, "turns": len(tasks),
        "events": dict(Counter(t["event"] for t in tasks)), "rewards": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
