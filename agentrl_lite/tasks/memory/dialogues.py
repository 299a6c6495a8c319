"""The dialogue generator (`memory_dialogues`): deterministic multi-session conversations whose facts are
stated, repeated, changed, corrected and retracted, each turn with its ideal memory operation.

The user talks about two or three friends and two organisations, all with invented-syllable names (as in
`tasks.search`), so no answer can come from pretraining. Facts are stated, repeated, changed ("X has moved to
Y"), corrected ("Correction: ..., not Z"), retracted ("Forget what I said about X's pet") and mixed with small
talk, over two to four sessions of 14 to 27 short turns. Every turn records its ideal memory operation
({"op", "target", "content"}, target a memory id of the bank that replaying the ideal operations builds). Each
(entity, attribute) lives in one memory; a real change keeps the earlier values ("... is Skal (earlier:
Telmar)."), a correction replaces the wrong one. Up to `QUESTIONS_PER_KIND` questions of each kind follow.
Splits are by dialogue (70/10/20); no invented word appears in two dialogues.
"""

from __future__ import annotations

import random
import re
from typing import Any

from agentrl_lite.tasks.memory.bank import MemoryBank, _op
from agentrl_lite.tasks.memory.questions import UNKNOWN, _questions
from agentrl_lite.tasks.memory.templates import (
    CHAINED_QUESTION,
    CHATS,
    COLOURS,
    ENTITY_CHATS,
    JOBS,
    MANAGER_PROMPT,
    MEMORY_TEMPLATES,
    ORG_SUFFIXES,
    PERSON_ATTRIBUTES,
    QUESTION_TEMPLATES,
    TURN_TEMPLATES,
    memory_text,
)

SPLITS = ("train", "validation", "heldout")
SPLIT_SHARES = (0.7, 0.1, 0.2)
DIALOGUES = 200
"""dialogues in the course's first data set (140 train, 20 validation, 40 held out: retired, `heldout_dialogues`)"""
HELDOUT_DIALOGUES = 40
"""dialogues in the held-out set (`heldout_dialogues`)"""
HELDOUT_SEED = 1
"""the held-out dialogues' seed; the course's first data set is seed 0"""

_ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "gr", "kl", "st",
           "th", "tr", "sk", "vr", "sh"]
_VOWELS = ["a", "e", "i", "o", "u", "ae", "io", "ou"]
_CODAS = ["", "", "n", "r", "l", "s", "m", "th", "k", "x"]


def _invented(rng: random.Random, taken: set[str]) -> str:
    """A capitalised word of invented syllables that no other name, value or template word uses."""
    while True:
        word = (rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_ONSETS) + rng.choice(_VOWELS)
                + rng.choice(_CODAS)).capitalize()
        if word.lower() not in taken:
            taken.add(word.lower())
            return word


def _reserved_words() -> set[str]:
    """Every word the templates, values and examples use, so no invented word can coincide with one."""
    texts = [*MEMORY_TEMPLATES.values(), *CHATS, *ENTITY_CHATS, CHAINED_QUESTION, MANAGER_PROMPT, *JOBS, *COLOURS,
             *ORG_SUFFIXES, UNKNOWN, *(f.__doc__ or "" for f in (MemoryBank.add, MemoryBank.update)),
             *(t for q in QUESTION_TEMPLATES.values() for t in q),
             *(t for events in TURN_TEMPLATES.values() for ts in events.values() for t in ts)]
    return {w for text in texts for w in re.findall(r"[a-z]+", text.lower())}


def _plan(rng: random.Random, taken: set[str]) -> tuple[list[str], list[str], list[tuple[Any, ...]]]:
    """Who the dialogue is about, and its events in order: (entity, attribute, event, value) or a chat line."""
    people = [f"{_invented(rng, taken)} {_invented(rng, taken)}" for _ in range(rng.choice([2, 3]))]
    orgs = [f"{_invented(rng, taken)} {suffix}" for suffix in rng.sample(ORG_SUFFIXES, 2)]
    jobs, colours = rng.sample(JOBS, len(JOBS)), rng.sample(COLOURS, len(COLOURS))
    fresh = {"job": jobs.pop, "colour": colours.pop, "city": lambda: _invented(rng, taken),
             "pet": lambda: _invented(rng, taken), "based": lambda: _invented(rng, taken)}
    first: dict[tuple[str, str], str] = {}  # (entity, attribute) → the value first stated
    for i, person in enumerate(people):
        others = [a for a in PERSON_ATTRIBUTES if a != "employer"]
        attributes = (["employer"] + rng.sample(others, rng.choice([2, 3])) if i == 0  # the chained question
                      else rng.sample(PERSON_ATTRIBUTES, rng.choice([3, 4])))
        for a in attributes:
            first[(person, a)] = orgs[0] if i == 0 and a == "employer" else \
                rng.choice(orgs) if a == "employer" else fresh[a]()
    for org in orgs:
        first[(org, "based")] = fresh["based"]()
    chains = {key: [(*key, "state", value)] for key, value in first.items()}
    plain = rng.choice(list(chains))  # never touched again: a single_hop question always exists
    protected = {plain, (people[0], "employer"), *((org, "based") for org in orgs)}
    retracted = rng.sample([k for k in chains if k not in protected], rng.choice([1, 1, 2]))
    current = dict(first)
    changeable = [k for k in chains if k != plain and k not in retracted]
    for _ in range(rng.choice([1, 2, 2, 3])):
        key = rng.choice(changeable)
        if key[1] == "employer":  # two organisations: an employer changes at most once
            changeable.remove(key)
            value = orgs[1] if current[key] == orgs[0] else orgs[0]
        else:
            value = fresh[key[1]]()
        current[key] = value
        chains[key].append((*key, "correct" if rng.random() < 0.25 else "change", value))
    for key in rng.sample(list(chains), rng.choice([1, 2])):
        chains[key].insert(rng.randrange(1, len(chains[key]) + 1), (*key, "repeat", None))
    for key in retracted:
        chains[key].append((*key, "retract", None))
    queues = list(chains.values())
    events: list[tuple[Any, ...]] = []
    while any(queues):  # a random interleaving that keeps each fact's own events in order
        events.append(rng.choice([q for q in queues if q]).pop(0))
    for _ in range(rng.randint(3, 6)):
        line = rng.choice(ENTITY_CHATS).format(e=rng.choice(people)) if rng.random() < 0.5 else rng.choice(CHATS)
        events.insert(rng.randrange(len(events) + 1), (line,))
    return people, orgs, events


def _dialogue(rng: random.Random, taken: set[str], dialogue_id: str) -> dict[str, Any]:
    """One dialogue: its turns (split into sessions, each with its ideal operation), then its questions."""
    people, orgs, events = _plan(rng, taken)
    cuts = sorted(rng.sample(range(1, len(events)), rng.choice([1, 2, 3])))  # session boundaries
    ids: dict[tuple[str, str], int] = {}
    history: dict[tuple[str, str], list[str]] = {}  # real changes; the last value is the current one
    wrong: dict[tuple[str, str], list[str]] = {}  # values stated, then corrected
    retracted: set[tuple[str, str]] = set()
    turns = []
    for i, event in enumerate(events):
        session = 1 + sum(i >= c for c in cuts)
        if len(event) == 1:
            turns.append({"session": session, "text": event[0], "event": "chat", "op": _op("NOOP")})
            continue
        entity, attribute, kind, value = event
        key = (entity, attribute)
        old = history[key][-1] if key in history else None
        if kind == "state":
            ids[key], history[key], wrong[key] = len(ids) + 1, [value], []
        elif kind == "change":
            history[key].append(value)
        elif kind == "correct":
            wrong[key].append(old)
            history[key][-1] = value
        shown = value if value is not None else old
        text = rng.choice(TURN_TEMPLATES[attribute][kind]).format(e=entity, v=shown, old=old)
        content = memory_text(attribute, entity, history[key])
        op = {"state": _op("ADD", None, content), "repeat": _op("NOOP"), "change": _op("UPDATE", ids[key], content),
              "correct": _op("UPDATE", ids[key], content), "retract": _op("DELETE", ids[key])}[kind]
        if kind == "retract":
            retracted.add(key)
        turns.append({"session": session, "text": text, "event": kind, "op": op})
    questions = _questions(rng, people, history, wrong, retracted)
    for j, q in enumerate(questions):
        q["id"] = f"{dialogue_id}-q{j}"
    return {"id": dialogue_id, "people": people, "organisations": orgs, "turns": turns, "questions": questions}


def memory_dialogues(seed: int = 0, n: int = DIALOGUES) -> list[dict[str, Any]]:
    """`n` deterministic dialogues, each with its split (by dialogue, `SPLIT_SHARES`).

    Fields: id, split, people, organisations, turns (session, text, event, op: the ideal {"op", "target",
    "content"}), questions (id, question, answer, kind, form, entity, attribute, stale, queries).
    """
    rng = random.Random(seed)
    taken = _reserved_words()
    dialogues = [_dialogue(rng, taken, f"mem{i:04d}") for i in range(n)]
    cut1 = round(SPLIT_SHARES[0] * n)
    cut2 = cut1 + round(SPLIT_SHARES[1] * n)
    for rank, i in enumerate(rng.sample(range(n), n)):
        dialogues[i] = {"split": "train" if rank < cut1 else "validation" if rank < cut2 else "heldout",
                        **dialogues[i]}
    return dialogues


def heldout_dialogues(n: int = HELDOUT_DIALOGUES, seed: int = HELDOUT_SEED) -> list[dict[str, Any]]:
    """`n` held-out dialogues drawn after the course's first data set (`memory_dialogues(0)`), from their own seed.

    They replace the first data set's held-out split (retired: design probes and the first seed studies read it)
    and use no invented word of any of its 200 dialogues. Ids are `memh0000`, ...; split "heldout"."""
    taken = _reserved_words()
    first = random.Random(0)
    for i in range(DIALOGUES):  # replaying the first data set's draws reserves every word it invented
        _dialogue(first, taken, f"mem{i:04d}")
    rng = random.Random(seed)
    return [{"split": "heldout", **_dialogue(rng, taken, f"memh{i:04d}")} for i in range(n)]


def retired_heldout() -> list[dict[str, Any]]:
    """The first data set's held-out split, retired (`heldout_dialogues`)."""
    return [d for d in memory_dialogues(seed=0) if d["split"] == "heldout"]

