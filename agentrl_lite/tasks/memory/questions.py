"""The questions a dialogue's facts support, and whether a memory bank lets a careful reader answer them.

Four kinds; no answer appears in its question:
- single_hop: an attribute stated once (maybe repeated) and never changed;
- multi_hop: two facts chained: the city of a friend's employer;
- temporal: the value now, after changes or corrections, or the value before the latest change;
- unanswerable: retracted, or never stated; the gold answer is "unknown".

`probes` are the questions about every fact said so far in a dialogue; `gold_answer_in_bank` grades a bank
against one question (an upper bound on an answer agent that reads the bank).
"""

from __future__ import annotations

import random
from typing import Any

from agentrl_lite.rewards import normalize_answer
from agentrl_lite.tasks.memory.bank import RELATED_K, MemoryBank
from agentrl_lite.tasks.memory.templates import (
    CHAINED_QUESTION,
    PERSON_ATTRIBUTES,
    QUESTION_TEMPLATES,
    read_fact,
)

UNKNOWN = "unknown"
"""the gold answer of an unanswerable question"""
KINDS = ("single_hop", "multi_hop", "temporal", "unanswerable")
QUESTIONS_PER_KIND = 2
"""most questions of one kind per dialogue"""


def _question(kind: str, form: str, question: str, answer: str, entity: str, attribute: str,
              stale: list[str], queries: list[str] | None = None) -> dict[str, Any]:
    return {"kind": kind, "form": form, "question": question, "answer": answer, "entity": entity,
            "attribute": attribute, "stale": stale, "queries": queries or [question]}


def _questions(rng: random.Random, people: list[str], history: dict, wrong: dict, retracted: set) -> list[dict]:
    """Every question the dialogue supports, then up to `QUESTIONS_PER_KIND` of each kind."""
    found = _supported(history, wrong, retracted, people)
    return [q for kind in KINDS for q in _spread(rng, found[kind])]


def _supported(history: dict, wrong: dict, retracted: set, people: list[str] | None) -> dict[str, list[dict]]:
    """kind → every question the facts support (history: (entity, attribute) → its values, the current one
    last; wrong: corrected values; retracted: retracted facts). `people` None leaves out the never-stated
    questions, and chains every entity with an employer.

    stale: values a memory may still hold that are not the answer (earlier or wrong values for a question
    about now; every value ever stated for a retracted fact). queries: what a reader retrieves with, one per
    hop (a chained question's second names the bridge, as if the first hop had found it).
    """
    found: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    for (entity, attribute), values in history.items():
        now, before = QUESTION_TEMPLATES[attribute]
        now, earlier = now.format(e=entity), values[:-1] + wrong[(entity, attribute)]
        if (entity, attribute) in retracted:
            found["unanswerable"].append(_question("unanswerable", "retracted", now, UNKNOWN, entity, attribute,
                                                   values + wrong[(entity, attribute)]))
        elif not earlier:
            found["single_hop"].append(_question("single_hop", "stated", now, values[-1], entity, attribute, []))
        else:
            found["temporal"].append(_question("temporal", "current", now.replace("?", " now?"), values[-1],
                                               entity, attribute, earlier))
            if len(values) > 1:
                found["temporal"].append(_question("temporal", "previous", before.format(e=entity, v=values[-1]),
                                                   values[-2], entity, attribute, []))
    chained = people if people is not None else sorted({e for e, a in history if a == "employer"})
    for person in chained:
        for attribute in PERSON_ATTRIBUTES if people is not None else ():
            if (person, attribute) not in history:
                found["unanswerable"].append(_question(
                    "unanswerable", "never_stated", QUESTION_TEMPLATES[attribute][0].format(e=person), UNKNOWN,
                    person, attribute, []))
        if (person, "employer") in history and (person, "employer") not in retracted:
            org = history[(person, "employer")][-1]
            if (org, "based") not in history or (org, "based") in retracted:
                continue
            city = history[(org, "based")]
            question = CHAINED_QUESTION.format(e=person)
            found["multi_hop"].append(_question(
                "multi_hop", "chained", question, city[-1], org, "based", city[:-1] + wrong[(org, "based")],
                [question, QUESTION_TEMPLATES["based"][0].format(e=org)]))
    return found


def _spread(rng: random.Random, candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Up to `QUESTIONS_PER_KIND` questions, one of each form first (a retracted fact before a second
    never-stated one), chosen at random within a form."""
    order = rng.sample(candidates, len(candidates))
    nth = [sum(p["form"] == q["form"] for p in order[:i]) for i, q in enumerate(order)]  # rank within its form
    return [q for _, _, q in sorted(zip(nth, range(len(order)), order, strict=True))][:QUESTIONS_PER_KIND]


def _facts(turns: list[dict[str, Any]]) -> tuple[dict, dict, set]:
    """What the turns have said, read back with the templates: (history, wrong, retracted) as `_supported`
    takes them."""
    history: dict[tuple[str, str], list[str]] = {}
    wrong: dict[tuple[str, str], list[str]] = {}
    retracted: set[tuple[str, str]] = set()
    for turn in turns:
        if (fact := read_fact(turn["text"])) is None:
            continue
        key = (fact["entity"], fact["attribute"])
        if fact["event"] == "state":
            history[key], wrong[key] = [fact["value"]], []
        elif fact["event"] == "change":
            history[key].append(fact["value"])
        elif fact["event"] == "correct":
            wrong[key].append(history[key][-1])
            history[key][-1] = fact["value"]
        elif fact["event"] == "retract":
            retracted.add(key)
    return history, wrong, retracted


def probes(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The probe questions after these turns: every question about a fact said so far (its value now, the
    value before its latest change, "unknown" once retracted, the employer's city). A bank the ideal
    operations built passes them all (`gold_answer_in_bank`); a wrong operation fails one or more."""
    return [q for kind in KINDS for q in _supported(*_facts(turns), people=None)[kind]]


# --- what a bank can answer -------------------------------------------------------------------------------
def _mentions(text: str, phrase: str) -> bool:
    """Whether the text contains the phrase as whole words, after `normalize_answer`."""
    return f" {normalize_answer(phrase)} " in f" {normalize_answer(text)} "


def gold_answer_in_bank(bank: MemoryBank, question: dict[str, Any], k: int = RELATED_K) -> bool:
    """Whether the memories retrieved for the question (`related`, top k per query) let a careful reader
    answer it: an upper bound on the answer agent.

    Only retrieved memories naming the question's entity count. Answerable: one contains the gold answer
    and none holds a stale value (`question["stale"]`: an earlier, wrong or retracted value) without it.
    Unanswerable: none holds a stale value (a retracted fact still in the bank would be read as true).
    """
    hits = {i: c for query in question["queries"] for i, c in bank.related(query, k)}
    about = [c for c in hits.values() if _mentions(c, question["entity"])]
    misleading = any(_mentions(c, s) and not _mentions(c, question["answer"]) for c in about
                     for s in question["stale"])
    if question["answer"] == UNKNOWN:
        return not misleading
    return not misleading and any(_mentions(c, question["answer"]) for c in about)
