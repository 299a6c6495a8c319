"""The memory manager's step (`MemoryManagerEnv`): the new turn and its related memories in, one operation on
the bank out, with the tasks it is trained on and its rewards.

Teacher-forced: each task (`manager_tasks`) holds the bank as the ideal operations left it before its turn.
Two measures of a reply: the decision (exactly one call whose operation, and for update and delete memory id,
is the ideal one: `decision_right`, `decision_reward`) and the outcome (run the call on a copy of the bank and
ask whether a careful reader still answers every probe question: `manager_outcome`, `manager_reward`).
"""

from __future__ import annotations

from typing import Any

from agentrl_lite.chat import parse_tool_calls
from agentrl_lite.episode import Episode
from agentrl_lite.rewards import completion_text
from agentrl_lite.tasks.memory.bank import RELATED_K, MemoryBank, _op, _written
from agentrl_lite.tasks.memory.questions import gold_answer_in_bank, probes
from agentrl_lite.tasks.memory.templates import MANAGER_PROMPT, MEMORY_TEMPLATES, read_fact
from agentrl_lite.tools import Toolbox

_TOOL_OPS = {"add": "ADD", "update": "UPDATE", "delete": "DELETE", "noop": "NOOP"}


# --- the tasks: one per turn, teacher-forced ------------------------------------------------------------
def _manager_task(dialogue: dict[str, Any], t: int, bank: MemoryBank, k: int = RELATED_K) -> dict[str, Any]:
    """The manager task of turn t, over the given bank."""
    turn = dialogue["turns"][t]
    return {"id": f"{dialogue['id']}-t{t:02d}", "dialogue_id": dialogue["id"], "split": dialogue["split"],
            "turn_index": t, "session": turn["session"], "text": turn["text"], "event": turn["event"],
            "bank": bank.state(), "related": _related(bank, turn["text"], k), "ideal": turn["op"]}


def _related(bank: MemoryBank, text: str, k: int = RELATED_K) -> list[dict[str, Any]]:
    """The related memories a manager task shows: `bank.related` as [{"id", "content"}]."""
    return [{"id": i, "content": c} for i, c in bank.related(text, k)]


def manager_tasks(dialogues: list[dict[str, Any]], k: int = RELATED_K) -> list[dict[str, Any]]:
    """One task per turn, with the bank that the ideal operations built before it (teacher forcing).

    Fields: id, dialogue_id, split, turn_index, session, text, event, bank (`MemoryBank.state()`),
    related ([{"id", "content"}], top k for the turn's text), ideal ({"op", "target", "content"}),
    probes (`probes` after this turn) and ideal_size (memories in the bank after the ideal operation).
    """
    tasks = []
    for dialogue in dialogues:
        bank = MemoryBank()
        for t, turn in enumerate(dialogue["turns"]):
            task = _manager_task(dialogue, t, bank, k)
            if (observation := bank.apply(turn["op"])).startswith("Error:"):
                raise RuntimeError(f"{dialogue['id']} turn {t}: the ideal operation failed: {observation}")
            tasks.append({**task, "probes": probes(dialogue["turns"][: t + 1]), "ideal_size": len(bank.entries)})
    return tasks


# --- the rewards: what a careful reader can still answer after the operation, or the decision alone ---------
FORMAT_WEIGHT = 0.1
"""reward for exactly one tool call that the bank accepts (Mem-α's format term)"""
SIZE_PENALTY = 0.1
"""reward taken per memory beyond what the ideal operations keep (Mem-α's compression term)"""


def manager_outcome(task: dict[str, Any], text: str) -> dict[str, float]:
    """Run the manager's reply on a copy of the task's bank, as the tool would, and judge the bank it leaves.

    formatted: exactly one call, and the bank accepted it; probes: the share of the task's probe questions a
    careful reader still answers (`gold_answer_in_bank`); answers_all: 1.0 when it answers them all; extra:
    memories beyond the ideal bank's; reward: answers_all + FORMAT_WEIGHT·formatted − SIZE_PENALTY·extra.
    """
    bank = MemoryBank.from_state(task["bank"])
    calls, observations = Toolbox(bank.tools()).run(text)
    formatted = float(len(observations) == 1 and not observations[0].startswith("Error:"))
    passed = [gold_answer_in_bank(bank, q) for q in task["probes"]]
    share = sum(passed) / len(passed) if passed else 1.0
    extra = float(max(0, len(bank.entries) - task["ideal_size"]))
    answers_all = float(all(passed))
    return {"formatted": formatted, "probes": share, "answers_all": answers_all, "extra": extra,
            "reward": answers_all + FORMAT_WEIGHT * formatted - SIZE_PENALTY * extra}


def manager_reward(prompts: list[Any], completions: list[Any], bank: list[dict] | None = None,
                   probes: list[list[dict]] | None = None, ideal_size: list[int] | None = None,
                   **kwargs: Any) -> list[float]:
    """A TRL-style reward for the manager (`manager_outcome`'s reward); needs the task columns bank, probes
    and ideal_size."""
    if bank is None or probes is None or ideal_size is None or len(bank) != len(completions):
        raise ValueError("manager_reward needs the per-sample columns bank, probes and ideal_size of manager_tasks")
    return [manager_outcome({"bank": b, "probes": p, "ideal_size": n}, completion_text(c))["reward"]
            for b, p, n, c in zip(bank, probes, ideal_size, completions, strict=True)]


def _decided(ideal: dict[str, Any], calls: list[dict[str, Any]]) -> bool:
    """Exactly one call, whose operation (and, for update and delete, memory id) is the ideal one."""
    if len(calls) != 1 or _TOOL_OPS.get(calls[0].get("name")) != ideal["op"]:
        return False
    return ideal["op"] not in ("UPDATE", "DELETE") or calls[0].get("arguments", {}).get("memory_id") == ideal["target"]


def decision_right(ideal: dict[str, Any], text: str) -> bool:
    """Whether the reply is exactly one call whose operation (and, for update and delete, memory id) is the ideal
    one: the decision, whatever the content written (what `MemoryManagerEnv.score` calls correct)."""
    return _decided(ideal, [c.to_dict() for c in parse_tool_calls(text).calls])


def decision_reward(prompts: list[Any], completions: list[Any], ideal: list[dict] | None = None,
                    **kwargs: Any) -> list[float]:
    """A TRL-style reward for the manager's decision alone: 1.0 when `decision_right`, else 0.0; needs the task
    column ideal. Unlike `manager_reward`, it credits the right operation on the right memory even when the
    careful reader rejects the content written (an UPDATE of a change that drops the earlier value)."""
    if ideal is None or len(ideal) != len(completions):
        raise ValueError("decision_reward needs the per-sample column ideal of manager_tasks")
    return [float(decision_right(i, completion_text(c))) for i, c in zip(ideal, completions, strict=True)]


# --- the environment ----------------------------------------------------------------------------------
MARK = " <- same fact"
"""what `MemoryManagerEnv(mark=True)` appends to the related memory that holds the message's person and attribute"""
MARK_PROMPT = MANAGER_PROMPT + (
    f" A related memory ending in \"{MARK.strip()}\" is about the same person and the same attribute as the "
    "message; no mark means no memory holds that attribute yet."
)
"""the manager's prompt when the memory of the message's (person, attribute) is marked (`MemoryManagerEnv(mark=True)`)"""
NOTE_PROMPT = MANAGER_PROMPT + (
    " Before the call write one line: \"Fact: <whose what>. Memory: <[id] of the memory that holds it, or "
    "none>.\", or \"Fact: none.\" for small talk."
)
"""the manager's prompt when it writes a note before its call (`MemoryManagerEnv(note=True)`)"""


def stored_memory(task: dict[str, Any], fact: dict[str, Any] | None = None) -> int | None:
    """The id of the memory in the task's bank that holds the fact its message is about (same person and
    attribute), None when none does or the message states no fact. fact: `read_fact(task["text"])` if the caller
    has it already."""
    fact = fact or read_fact(task["text"])
    if fact is None:
        return None
    prefix = MEMORY_TEMPLATES[fact["attribute"]].format(e=fact["entity"], v="\0").split("\0")[0]
    return next((e["id"] for e in task["bank"]["entries"] if e["content"].startswith(prefix)), None)


def _user_message(task: dict[str, Any], mark: bool = False) -> str:
    """The manager's user turn: the related memories (with `MARK` on the stored fact when mark), then the message."""
    marked = stored_memory(task) if mark else None
    related = "\n".join(f"[{m['id']}] {m['content']}{MARK if m['id'] == marked else ''}"
                        for m in task["related"]) or "(none)"
    return f"Related memories:\n{related}\n\nNew message (session {task['session']}): {task['text']}"


class MemoryManagerEnv:
    """One memory-manager step (an `Environment`): the new turn and related memories in, one operation out.

    note: the prompt asks for a `manager_note` line before the call (the fact the message is about, the memory
    that holds it). mark: the related memory that holds the message's person and attribute ends in `MARK` (what a
    store keyed by person and attribute would show), so that whether the fact is stored is read off the prompt;
    the manager still decides between a new value, a repeat, a correction, a retraction and small talk, and
    writes the memory."""

    def __init__(self, note: bool = False, mark: bool = False) -> None:
        if note and mark:
            raise ValueError("MemoryManagerEnv takes note or mark, not both")
        self.note = note
        self.mark = mark

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        system = NOTE_PROMPT if self.note else MARK_PROMPT if self.mark else MANAGER_PROMPT
        return [{"role": "system", "content": system}, {"role": "user", "content": _user_message(task, self.mark)}]

    def toolbox_for(self, task: dict[str, Any]) -> Toolbox:
        """The four operations over a fresh copy of the task's bank."""
        return Toolbox(MemoryBank.from_state(task["bank"]).tools())

    def score(self, task: dict[str, Any], episode: Episode) -> dict[str, Any]:
        """correct: exactly one call, whose operation (and, for update and delete, memory id) is the ideal one;
        op: the first call's operation ("none" without a call, "other" for an unknown tool); calls: how many;
        and `manager_outcome`'s measures when the task has probes (formatted, probes, answers_all, extra, reward)."""
        calls = [c for turn in episode.model_turns for c in turn.tool_calls]
        outcome = manager_outcome(task, _written(episode)) if "probes" in task else {}
        if not calls:
            return {"correct": 0.0, "op": "none", "calls": 0.0, **outcome}
        op = _TOOL_OPS.get(calls[0].get("name"), "other")
        return {"correct": float(_decided(task["ideal"], calls)), "op": op, "calls": float(len(calls)), **outcome}


def chosen_op(episode: Episode) -> dict[str, Any]:
    """The operation of an episode's first tool call as {"op", "target", "content"} ("none" without a call,
    "other" for an unknown tool)."""
    calls = [c for turn in episode.model_turns for c in turn.tool_calls]
    if not calls:
        return _op("none")
    arguments = calls[0].get("arguments") or {}
    return _op(_TOOL_OPS.get(calls[0].get("name"), "other"), arguments.get("memory_id"), arguments.get("content"))
