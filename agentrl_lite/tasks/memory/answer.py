"""The answer agent (`AnswerEnv`): a question and the memories retrieved for it in, the answer out, with its
tasks (from any manager's bank, or the whole dialogue as full context), its demonstrations and its score.
"""

from __future__ import annotations

import re
from typing import Any

from agentrl_lite.episode import Episode
from agentrl_lite.rewards import exact_match, token_f1
from agentrl_lite.tasks.memory.bank import RELATED_K, MemoryBank, _written
from agentrl_lite.tasks.memory.baselines import append_only, oracle
from agentrl_lite.tasks.memory.questions import UNKNOWN, _facts, _mentions
from agentrl_lite.tasks.memory.templates import CHAINED_QUESTION, _pattern, memory_text, read_fact

ANSWER_PROMPT = (
    "Answer the question from the memories below; a later memory is newer than an earlier one. First write "
    "\"Memory:\" and the fact the answer rests on (its value unknown when the memories do not give it), then "
    "\"Answer:\" and the answer alone (a name, a word or a city, or unknown)."
)
"""the answer agent's system prompt"""


def answer_score(predicted: str | None, question: dict[str, Any]) -> dict[str, float]:
    """The answer agent's score: normalised exact match ("correct") and token F1 against the gold answer."""
    return {"correct": float(exact_match(predicted, question["answer"])),
            "f1": token_f1(predicted, question["answer"])}


def retrieved(bank: MemoryBank, question: dict[str, Any], k: int = RELATED_K) -> list[tuple[int, str]]:
    """The memories an answer agent reads: the top k for each of the question's queries, in the order they
    were stored."""
    return sorted({i: c for query in question["queries"] for i, c in bank.related(query, k)}.items())


def evidence(question: dict[str, Any], history: dict[tuple[str, str], list[str]]) -> str:
    """The facts a question's answer rests on, as the oracle bank words them (`memory_text`): the fact
    itself with its earlier values, or both hops of a chained question. An unanswerable question's fact is
    worded the same way with the value unknown ("X's job is unknown."), so every reply names what it looks
    for before it copies a value, and the choice between a value and unknown comes after the name.
    history: (entity, attribute) → values, as `_facts` reads them from the dialogue."""
    if question["answer"] == UNKNOWN:
        return memory_text(question["attribute"], question["entity"], [UNKNOWN])
    facts = [(question["entity"], question["attribute"], question["answer"])]
    if question["form"] == "chained":  # the person's employer first: the bridge to the organisation's city
        person = re.fullmatch(_pattern(CHAINED_QUESTION), question["question"])["e"]
        facts.insert(0, (person, "employer", question["entity"]))
    # history lacks a fact only when the dialogue was cut short: the answer alone stands in
    return " ".join(memory_text(attribute, entity, history.get((entity, attribute), [answer]))
                    for entity, attribute, answer in facts)


def answer_tasks(dialogue: dict[str, Any], bank: MemoryBank | None, source: str,
                 k: int = RELATED_K) -> list[dict[str, Any]]:
    """One answer-agent task per question of the dialogue: the question's fields plus memories (the text the
    agent reads), evidence (`evidence`: what a demonstration cites before answering) and source (which
    manager built the bank). bank None: full context, the whole dialogue as the memories, one line per turn."""
    if bank is None:
        shown = "\n".join(f"[{i}] (session {t['session']}) {t['text']}" for i, t in enumerate(dialogue["turns"], 1))
    history = _facts(dialogue["turns"])[0]
    return [{**q, "dialogue_id": dialogue["id"], "source": source, "evidence": evidence(q, history),
             "memories": shown if bank is None else bank.to_text(retrieved(bank, q, k))}
            for q in dialogue["questions"]]


DEMONSTRATION_SOURCES = ("oracle", "append-only", "full context")
"""the memories an answer agent's cold start can be shown (`answer_demonstrations`)"""


def answer_demonstrations(dialogues: list[dict[str, Any]], k: int = RELATED_K,
                          sources: tuple[str, ...] = DEMONSTRATION_SOURCES) -> list[dict[str, Any]]:
    """Answer-agent tasks with a gold answer its memories support, for a cold start, from each of `sources`: the
    oracle bank, the append-only bank and the full context (all three by default, so the agent can read all
    three), keeping an append-only question only when its memories hold the answer, or the retraction for a
    retracted fact. Per dialogue, in that order: oracle, full context, append-only."""
    unknown = set(sources) - set(DEMONSTRATION_SOURCES)
    if unknown:
        raise ValueError(f"answer_demonstrations: unknown sources {sorted(unknown)}; the sources are "
                         f"{DEMONSTRATION_SOURCES}")
    demos = []
    for d in dialogues:
        if "oracle" in sources:
            demos += answer_tasks(d, oracle(d)[0], "oracle", k)
        if "full context" in sources:
            demos += answer_tasks(d, None, "full context")
        if "append-only" not in sources:
            continue
        for task in answer_tasks(d, append_only(d)[0], "append-only", k):
            facts = [read_fact(line.split("] ", 1)[1]) for line in task["memories"].splitlines()]
            retraction = any(f is not None and f["event"] == "retract" and f["entity"] == task["entity"] for f in facts)
            if (task["form"] == "never_stated" or (task["form"] == "retracted" and retraction)
                    or (task["answer"] != UNKNOWN and _mentions(task["memories"], task["answer"]))):
                demos.append(task)
    return demos


class AnswerEnv:
    """The answer agent (an `Environment`): a question and the memories retrieved for it in, the answer out."""

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        return [{"role": "system", "content": ANSWER_PROMPT},
                {"role": "user", "content": f"Memories:\n{task['memories']}\n\nQuestion: {task['question']}"}]

    def toolbox_for(self, task: dict[str, Any]) -> None:
        return None

    def score(self, task: dict[str, Any], episode: Episode) -> dict[str, Any]:
        """correct: normalised exact match; f1: token F1 (`answer_score` of what follows the reply's last
        "Answer:", or of the whole reply without one)."""
        return answer_score(_written(episode).rsplit("Answer:", 1)[-1].strip(), task)

    @staticmethod
    def demonstration(task: dict[str, Any]) -> list[dict[str, str]]:
        """The reply of a careful reader: the facts the answer rests on (Memory-R1's answer agent selects
        memories before it answers), then the gold answer."""
        return [{"role": "assistant", "content": f"Memory: {task['evidence']}\nAnswer: {task['answer']}"}]
