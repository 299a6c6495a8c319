"""Memory agents (task family, lesson 11): multi-session dialogues whose facts change, a memory bank a manager
edits with four operations, and a constant-size memory in the style of MEM1.

The problem. A conversation spread over several sessions is too long to keep in a small model's context, so
an agent keeps a memory bank instead and answers later questions from it. Memory-R1 splits the agent in two:
a *memory manager* that, for each new piece of information, retrieves the related memories and chooses one
operation, ADD (a new fact), UPDATE (rewrite a memory: the fact changed or was corrected), DELETE (the fact
was retracted) or NOOP (nothing to store: small talk, a repeat), and an *answer agent* that reads the memories
retrieved for a question. Appending everything (no UPDATE, no DELETE) fills the bank with stale and
contradicting facts; overwriting everything loses the history a "what was it before?" question needs.
MEM1 takes the other road: one bounded internal state that the agent rewrites every turn (`ConstantMemory`).

The dialogues (`memory_dialogues`). The user talks about two or three friends and two organisations, all
with invented-syllable names (as in `tasks.search`), so no answer can come from pretraining. Facts are
stated, repeated, changed ("X has moved to Y"), corrected ("Correction: ..., not Z"), retracted ("Forget
what I said about X's pet") and mixed with small talk, over two to four sessions of 14 to 27 short turns.
Every turn records its ideal memory operation ({"op", "target", "content"}, target a memory id of the bank
that replaying the ideal operations builds), so an oracle bank can be rebuilt and a manager's choices
compared with the ideal ones (`op_confusion`). Each (entity, attribute) lives in one memory; a real change
keeps the earlier values ("... is Skal (earlier: Telmar)."), a correction replaces the wrong one.

The questions, four kinds, up to two of each per dialogue; no answer appears in its question:
- single_hop: an attribute stated once (maybe repeated) and never changed;
- multi_hop: two facts chained: the city of a friend's employer;
- temporal: the value now, after changes or corrections, or the value before the latest change;
- unanswerable: retracted, or never stated; the gold answer is "unknown".
Splits are by dialogue (70/10/20); no invented word appears in two dialogues.

The bank (`MemoryBank`) is the tool: its four methods are typed, documented functions, so a `Toolbox`
shows them to the model as schemas, and a bad call (unknown id, full bank, empty content, wrong types,
broken JSON) is an `Error:` observation that changes nothing. `related` is BM25 over the memories
(`tools.SearchIndex`, rebuilt when the bank changes).

The environment (`MemoryManagerEnv`) is one manager step, teacher-forced: the bank as the ideal operations
left it, the new turn and its related memories; the score is whether the chosen operation (and its target
memory) is the ideal one. This is denser than Memory-R1's reward, the exact match of the answer agent's
final answer (which needs the whole dialogue replayed), and it is what the baselines here are measured by.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentrl_lite.chat import ToolCall, format_tool_call, parse_tool_calls
from agentrl_lite.episode import Episode
from agentrl_lite.evaluate import evaluate
from agentrl_lite.models import sampling_copy
from agentrl_lite.rewards import completion_text, exact_match, normalize_answer, token_f1
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.tools import SearchIndex, Toolbox, import_bm25s

UNKNOWN = "unknown"
"""the gold answer of an unanswerable question"""
KINDS = ("single_hop", "multi_hop", "temporal", "unanswerable")
OPS = ("ADD", "UPDATE", "DELETE", "NOOP")
SPLITS = ("train", "validation", "heldout")
SPLIT_SHARES = (0.7, 0.1, 0.2)
DIALOGUES = 200
"""dialogues in the course's data set (140 train, 20 validation, 40 held out)"""
CAPACITY = 32
"""memories a bank holds by default (a dialogue has at most 27 turns, so even append-only fits)"""
MAX_MEMORY_WORDS = 30
"""longest memory accepted: one fact per memory, not the transcript"""
RELATED_K = 5
"""memories retrieved per turn or question (an entity has at most five memories)"""
QUESTIONS_PER_KIND = 2
"""most questions of one kind per dialogue"""

PERSON_ATTRIBUTES = ("city", "job", "pet", "colour", "employer")
JOBS = ["cartographer", "glassblower", "astronomer", "weaver", "composer", "shipwright", "botanist",
        "clockmaker", "engraver", "beekeeper", "bookbinder", "locksmith"]
COLOURS = ["teal", "crimson", "ochre", "indigo", "saffron", "olive", "lilac", "scarlet", "turquoise", "maroon",
           "violet", "charcoal"]
ORG_SUFFIXES = ["Works", "Press", "Foundry", "Guild", "Mills", "Brewery", "Studio", "Bakery"]

MEMORY_TEMPLATES = {
    "city": "{e}'s home city is {v}.",
    "job": "{e}'s job is {v}.",
    "pet": "{e}'s pet is called {v}.",
    "colour": "{e}'s favourite colour is {v}.",
    "employer": "{e}'s employer is {v}.",
    "based": "{e} is based in the city of {v}.",
}
"""the ideal memory of one (entity, attribute): what the oracle stores"""
_STATE = {
    "city": ("My friend {e} lives in {v}.", "{e}'s home city is {v}, by the way."),
    "job": ("{e}'s job is {v}.", "{e} has the job of {v}."),
    "pet": ("{e} has a pet called {v}.", "{e}'s pet is called {v}."),
    "colour": ("{e}'s favourite colour is {v}.", "{e} loves the colour {v} more than any other."),
    "employer": ("{e} works for {v}.", "{e}'s employer is {v}."),
    "based": ("{e} is based in {v}.", "The offices of {e} are in {v}."),
}
TURN_TEMPLATES: dict[str, dict[str, tuple[str, ...]]] = {
    attribute: {
        "state": state,
        "repeat": tuple(f"{lead} {s[0].lower()}{s[1:]}" for lead in ("As I said,", "Again,") for s in state),
    } for attribute, state in _STATE.items()
}
"""attribute → event → the sentences a turn is written from ({e} entity, {v} value, {old} the wrong value)"""
for _attribute, _events in {
    "city": {"change": ("{e} moved house; the new home city is {v}.", "Big news: {e} has moved to {v}."),
             "correct": ("Correction: {e}'s home city is {v}, not {old}.",
                         "Sorry, I was wrong: {e} lives in {v}, not {old}."),
             "retract": ("Forget what I said about {e}'s home city; I am not sure of it.",
                         "Please ignore what I told you about where {e} lives.")},
    "job": {"change": ("{e} changed careers; the new job is {v}.", "{e} retrained and has the job of {v} now."),
            "correct": ("Correction: {e}'s job is {v}, not {old}.",),
            "retract": ("Forget what I said about {e}'s job; it was only a rumour.",)},
    "pet": {"change": ("{e} adopted a new pet called {v}; the old one went to a farm.",),
            "correct": ("Correction: {e}'s pet is called {v}, not {old}.",),
            "retract": ("Forget what I said about {e}'s pet.",)},
    "colour": {"change": ("These days {e}'s favourite colour is {v}.", "{e} has a new favourite colour: {v}."),
               "correct": ("Correction: {e}'s favourite colour is {v}, not {old}.",),
               "retract": ("Forget what I said about {e}'s favourite colour.",)},
    "employer": {"change": ("{e} changed employer and now works for {v}.",),
                 "correct": ("Correction: {e} works for {v}, not {old}.",),
                 "retract": ("Forget what I said about {e}'s employer.",)},
    "based": {"change": ("{e} moved its offices to {v}.",),
              "correct": ("Correction: {e} is based in {v}, not {old}.",)},
}.items():
    TURN_TEMPLATES[_attribute].update(_events)
CHATS = ("The weather has been grey all week.", "I finally finished that long novel.",
         "Lunch today was a bowl of soup.", "My train was late again this morning.",
         "I should really water my plants more often.", "Do you think it will rain tomorrow?",
         "I spent the whole evening cleaning the kitchen.", "The market was busy this weekend.",
         "Thanks for listening, as always.", "Hello again, it has been a while.",
         "I watched a documentary about bridges.", "I am trying to go to bed earlier.")
ENTITY_CHATS = ("I had coffee with {e} yesterday.", "I keep forgetting to call {e}.",
                "{e} told me a funny story last week.", "I might visit {e} next month.")
"""small talk that names a friend but states no fact: the ideal operation is NOOP"""
QUESTION_TEMPLATES = {
    "city": ("What is {e}'s home city?", "What was {e}'s home city before {v}?"),
    "job": ("What is {e}'s job?", "What was {e}'s job before {v}?"),
    "pet": ("What is {e}'s pet called?", "What was {e}'s pet called before {v}?"),
    "colour": ("What is {e}'s favourite colour?", "What was {e}'s favourite colour before {v}?"),
    "employer": ("Who is {e}'s employer?", "Who was {e}'s employer before {v}?"),
    "based": ("In which city is {e} based?", "In which city was {e} based before {v}?"),
}
"""attribute → (the question about the current value, the question about the value before {v})"""
CHAINED_QUESTION = "In which city is the employer of {e} based?"
EXAMPLE_NAME = "Tamo Vesk"
"""the name in the examples of the prompt and the tool descriptions; never generated"""

_ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "gr", "kl", "st",
           "th", "tr", "sk", "vr", "sh"]
_VOWELS = ["a", "e", "i", "o", "u", "ae", "io", "ou"]
_CODAS = ["", "", "n", "r", "l", "s", "m", "th", "k", "x"]


# --- the dialogues ----------------------------------------------------------------------------------------
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


def memory_text(attribute: str, entity: str, values: list[str]) -> str:
    """The ideal memory of a fact: its current value, then the earlier values of real changes."""
    text = MEMORY_TEMPLATES[attribute].format(e=entity, v=values[-1])
    return text if len(values) == 1 else f"{text[:-1]} (earlier: {', '.join(values[:-1])})."


def _op(op: str, target: int | None = None, content: str | None = None) -> dict[str, Any]:
    return {"op": op, "target": target, "content": content}


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


# --- the memory bank: the manager's four operations as tools ---------------------------------------------
def _searchable(content: str) -> bool:
    """Whether BM25 can index the text: it has a word that is not a stop word."""
    return bool(import_bm25s().tokenize([content], stopwords="en", return_ids=False, show_progress=False)[0])


class MemoryBank:
    """Memories with integer ids (never reused) and a capacity; a bad operation changes nothing.

    `add`, `update`, `delete` and `noop` return the observation the manager reads; every failure is an
    observation starting with "Error:". `tools()` offers the four to a `Toolbox`.
    """

    def __init__(self, capacity: int = CAPACITY, entries: dict[int, str] | None = None,
                 next_id: int | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"a memory bank needs a capacity of at least 1, got {capacity}")
        self.capacity = capacity
        self.entries: dict[int, str] = dict(entries or {})
        """id → memory, in the order they were added"""
        self.next_id = next_id if next_id is not None else max(self.entries, default=0) + 1
        """the id the next `add` gets"""
        self._index: tuple[SearchIndex, list[int]] | None = None  # BM25 over the entries, None when stale

    # the state a task stores, and back
    def state(self) -> dict[str, Any]:
        return {"entries": [{"id": i, "content": c} for i, c in self.entries.items()], "next_id": self.next_id,
                "capacity": self.capacity}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> MemoryBank:
        return cls(state["capacity"], {e["id"]: e["content"] for e in state["entries"]}, state["next_id"])

    def _check_content(self, content: Any) -> str | None:
        if not isinstance(content, str):
            return f"Error: content must be a string (one short sentence), got {type(content).__name__}."
        if not content.strip():
            return "Error: content is empty; write the fact as one short sentence."
        if len(content.split()) > MAX_MEMORY_WORDS:
            return f"Error: content has {len(content.split())} words; keep a memory under {MAX_MEMORY_WORDS}."
        if not _searchable(content):
            return "Error: content has no searchable words; name the person or thing and the fact."
        return None

    def _check_id(self, memory_id: Any) -> str | None:
        if isinstance(memory_id, bool) or not isinstance(memory_id, int):
            return f"Error: memory_id must be an integer, got {memory_id!r}."
        if memory_id not in self.entries:
            known = ", ".join(map(str, self.entries)) or "none (the bank is empty)"
            return f"Error: there is no memory with id {memory_id}. Existing ids: {known}."
        return None

    def add(self, content: str) -> str:
        """Store a new fact in the memory bank.

        Args:
            content: The fact as one short sentence, e.g. "Tamo Vesk's home city is Dorim."
        """
        if (error := self._check_content(content)) is not None:
            return error
        if len(self.entries) >= self.capacity:
            return f"Error: the memory bank is full ({self.capacity} memories); update or delete one instead."
        memory_id, self.next_id = self.next_id, self.next_id + 1
        self.entries[memory_id] = content.strip()
        self._index = None
        return f"Added memory {memory_id}."

    def update(self, memory_id: int, content: str) -> str:
        """Rewrite a stored memory whose fact changed or was corrected.

        Args:
            memory_id: The id of the memory to rewrite, as shown in [brackets].
            content: The new memory, e.g. "Tamo Vesk's home city is Sarn (earlier: Dorim)."
        """
        if (error := self._check_id(memory_id) or self._check_content(content)) is not None:
            return error
        self.entries[memory_id] = content.strip()
        self._index = None
        return f"Updated memory {memory_id}."

    def delete(self, memory_id: int) -> str:
        """Remove a stored memory whose fact the user retracted.

        Args:
            memory_id: The id of the memory to remove, as shown in [brackets].
        """
        if (error := self._check_id(memory_id)) is not None:
            return error
        del self.entries[memory_id]
        self._index = None
        return f"Deleted memory {memory_id}."

    def noop(self) -> str:
        """Leave the memory bank unchanged: the message holds no new fact (small talk or a repeat)."""
        return "Memory unchanged."

    def tools(self) -> list[Callable[..., str]]:
        """The four operations, for `Toolbox(bank.tools())`; tool names add, update, delete, noop."""
        return [self.add, self.update, self.delete, self.noop]

    def apply(self, op: dict[str, Any]) -> str:
        """Run one operation written as {"op": "ADD"|"UPDATE"|"DELETE"|"NOOP", "target", "content"}."""
        if op.get("op") == "ADD":
            return self.add(op.get("content"))
        if op.get("op") == "UPDATE":
            return self.update(op.get("target"), op.get("content"))
        if op.get("op") == "DELETE":
            return self.delete(op.get("target"))
        if op.get("op") == "NOOP":
            return self.noop()
        return f"Error: unknown operation {op.get('op')!r}; use one of {', '.join(OPS)}."

    def related(self, text: str, k: int = RELATED_K) -> list[tuple[int, str]]:
        """The k memories most related to `text` by BM25, best first, as (id, memory); [] when none matches."""
        if not self.entries or not isinstance(text, str) or not text.strip() or k < 1:
            return []
        if self._index is None:
            ids = list(self.entries)
            self._index = (SearchIndex([{"id": str(i), "title": "", "text": self.entries[i]} for i in ids]), ids)
        index, _ = self._index
        return [(int(d["id"]), d["text"]) for d in index.top(text, k)]

    def to_text(self, entries: list[tuple[int, str]] | None = None) -> str:
        """Memories for a prompt, one per line as "[id] memory" (all of them unless `entries` is given)."""
        shown = list(self.entries.items()) if entries is None else entries
        return "\n".join(f"[{i}] {c}" for i, c in shown) or "(no memories)"


# --- reading a turn with the generator's templates, and the baseline managers ---------------------------
_SLOTS = {"e": r"(?P<e>[A-Z][\w-]*(?: [A-Z][\w-]*)*)", "v": r"(?P<v>[\w-]+(?: [A-Z][\w-]*)*)",
          "old": r"(?P<old>[\w-]+(?: [A-Z][\w-]*)*)"}


def _pattern(template: str) -> re.Pattern[str]:
    parts = re.split(r"\{(e|v|old)\}", template)  # literal, slot, literal, slot, ...
    return re.compile("".join(_SLOTS[p] if i % 2 else re.escape(p) for i, p in enumerate(parts)) + "$")


_PATTERNS = [(attribute, event, _pattern(t)) for attribute, events in TURN_TEMPLATES.items()
             for event, templates in events.items() for t in templates]


def read_fact(text: str) -> dict[str, Any] | None:
    """What a turn states, read with the generator's own templates: {"entity", "attribute", "event",
    "value"} (value None for a retraction), or None for small talk."""
    for attribute, event, pattern in _PATTERNS:
        if (m := pattern.match(text)) is not None:
            return {"entity": m["e"], "attribute": attribute, "event": event,
                    "value": None if event == "retract" else m["v"]}
    return None


def _run(dialogue: dict[str, Any], choose: Callable[[MemoryBank, dict[str, Any]], dict[str, Any]],
         capacity: int) -> tuple[MemoryBank, list[dict[str, Any]]]:
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


# --- what a bank can answer ------------------------------------------------------------------------------
def _mentions(text: str, phrase: str) -> bool:
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


def answer_score(predicted: str | None, question: dict[str, Any]) -> dict[str, float]:
    """The answer agent's score: normalised exact match ("correct") and token F1 against the gold answer."""
    return {"correct": float(exact_match(predicted, question["answer"])),
            "f1": token_f1(predicted, question["answer"])}


# --- the manager environment: one operation per turn, teacher-forced ------------------------------------
MANAGER_PROMPT = (
    "You keep a memory bank of facts about the user's friends and their employers. Read the new message and "
    "the related memories, then call exactly one tool: add for a new fact; update to rewrite a memory whose "
    "fact changed (keep old values as \"(earlier: ...)\") or was corrected; delete when the user retracts a "
    f"fact; noop for small talk or a fact already stored. One short sentence per memory, e.g. \"{EXAMPLE_NAME}'s "
    "home city is Dorim.\""
)
_TOOL_OPS = {"add": "ADD", "update": "UPDATE", "delete": "DELETE", "noop": "NOOP"}


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


def _manager_task(dialogue: dict[str, Any], t: int, bank: MemoryBank, k: int = RELATED_K) -> dict[str, Any]:
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


# --- the manager's reward: what a careful reader can still answer after the operation -------------------
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
    column ideal. Beside `manager_reward` it gives partial credit to the right operation on the right memory
    whose content the careful reader still rejects (an UPDATE of a change that drops the earlier value), which
    `manager_reward` scores as low as a wrong operation (results/notes/11_memory_agents.md, item 13)."""
    if ideal is None or len(ideal) != len(completions):
        raise ValueError("decision_reward needs the per-sample column ideal of manager_tasks")
    return [float(decision_right(i, completion_text(c))) for i, c in zip(ideal, completions, strict=True)]


MARK = " <- same fact"
"""what `MemoryManagerEnv(mark=True)` appends to the related memory that holds the message's person and attribute"""


def _user_message(task: dict[str, Any], mark: bool = False) -> str:
    marked = stored_memory(task) if mark else None
    related = "\n".join(f"[{m['id']}] {m['content']}{MARK if m['id'] == marked else ''}"
                        for m in task["related"]) or "(none)"
    return f"Related memories:\n{related}\n\nNew message (session {task['session']}): {task['text']}"


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
SUBJECTS = {"city": "{e}'s home city", "job": "{e}'s job", "pet": "{e}'s pet", "colour": "{e}'s favourite colour",
            "employer": "{e}'s employer", "based": "{e}'s base"}
"""attribute → how a note names the fact ("whose what")"""


def stored_memory(task: dict[str, Any], fact: dict[str, Any] | None = None) -> int | None:
    """The id of the memory in the task's bank that holds the fact its message is about (same person and
    attribute), None when none does or the message states no fact. fact: `read_fact(task["text"])` if the caller
    has it already."""
    fact = fact or read_fact(task["text"])
    if fact is None:
        return None
    prefix = MEMORY_TEMPLATES[fact["attribute"]].format(e=fact["entity"], v="\0").split("\0")[0]
    return next((e["id"] for e in task["bank"]["entries"] if e["content"].startswith(prefix)), None)


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

    DELETE is about 7% of the training turns and UPDATE 10%: in proportion, the cpu profile's 128 demonstrations
    show about eight retractions, and that cold start never chose DELETE (results/notes/11_memory_agents.md, run 1).
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

    Why: in the training turns the wording predicts the operation ("has moved to" is a change, "lives in" a new
    fact), so a cold start can fit the demonstrations without reading the related memories, and GRPO then moves
    change turns with the new facts they sound like (results/notes/11_memory_agents.md, items 11-14). With these
    copies the message alone no longer tells ADD from UPDATE; the memories do. per_event: how many of each (default:
    as many state copies as there are change turns). The new memory's value is another state turn's value of the
    same attribute."""
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


class MemoryManagerEnv:
    """One memory-manager step (an `Environment`): the new turn and related memories in, one operation out.

    note: the prompt asks for a `manager_note` line before the call (the fact the message is about, the memory that
    holds it), meant to turn the operation into a reading of what the manager has just written. Measured on the
    cold start, it did not: each seed's prior moved into the note (results/notes/11_memory_agents.md, item 10).
    mark: the related memory that holds the message's person and attribute ends in `MARK` (what a store keyed by
    person and attribute would show), so that whether the fact is stored is read off the prompt; the manager still
    decides between a new value, a repeat, a correction, a retraction and small talk, and writes the memory."""

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


def _written(episode: Episode) -> str:
    """What the policy wrote in its turns (no end-of-turn tokens)."""
    return "\n".join(turn.content for turn in episode.model_turns)


def chosen_op(episode: Episode) -> dict[str, Any]:
    """The operation of an episode's first tool call as {"op", "target", "content"} ("none" without a call,
    "other" for an unknown tool)."""
    calls = [c for turn in episode.model_turns for c in turn.tool_calls]
    if not calls:
        return _op("none")
    arguments = calls[0].get("arguments") or {}
    return _op(_TOOL_OPS.get(calls[0].get("name"), "other"), arguments.get("memory_id"), arguments.get("content"))


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


# --- the answer agent: reads the memories retrieved for a question -------------------------------------
ANSWER_PROMPT = (
    "Answer the question from the memories below; a later memory is newer than an earlier one. First write "
    "\"Memory:\" and the fact the answer rests on (its value unknown when the memories do not give it), then "
    "\"Answer:\" and the answer alone (a name, a word or a city, or unknown)."
)


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
    # history lacks a fact only for dialogues cut short (the smoke profile): the answer alone stands in
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


def answer_demonstrations(dialogues: list[dict[str, Any]], k: int = RELATED_K) -> list[dict[str, Any]]:
    """Answer-agent tasks with a gold answer its memories support, for a cold start: from the oracle bank,
    the append-only bank and the full context (so the agent can read all three), keeping an append-only
    question only when its memories hold the answer, or the retraction for a retracted fact."""
    demos = []
    for d in dialogues:
        demos += answer_tasks(d, oracle(d)[0], "oracle", k) + answer_tasks(d, None, "full context")
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


# --- MEM1: one bounded internal state, rewritten every turn ----------------------------------------------
@dataclass
class ConstantMemory:
    """A constant-size memory (MEM1): the agent's whole memory is one text of at most `max_words` words that
    it rewrites each turn, so the context stays the same size however long the conversation runs."""

    max_words: int = 60
    """longest internal state; a longer rewrite is cut to its first max_words words"""
    state: str = ""
    """the current internal state"""

    def __post_init__(self) -> None:
        if self.max_words < 1:
            raise ValueError(f"max_words must be at least 1, got {self.max_words}")

    def rewrite(self, state: str) -> str:
        """Replace your internal state with a new one that keeps everything still worth remembering.

        Args:
            state: The whole new internal state (it replaces the old one), at most the word limit.
        """
        if not isinstance(state, str):
            return f"Error: state must be a string, got {type(state).__name__}; the state is unchanged."
        words = state.split()
        self.state = " ".join(words[: self.max_words])
        if len(words) > self.max_words:
            return f"State saved, cut to its first {self.max_words} of {len(words)} words."
        return f"State saved ({len(words)} words)."

    def tools(self) -> list[Callable[..., str]]:
        return [self.rewrite]

    def to_text(self) -> str:
        return self.state or "(empty)"


STATE_WORDS = 60
"""the constant memory's bound in the lesson: about six facts, fewer than most dialogues state"""
STATE_PROMPT = (
    "You keep one short internal state about the user's friends and their employers; it is all you will remember. "
    "Read the new message, then call rewrite once with the whole new state: keep every fact still true, write a "
    "changed fact's old value as \"(earlier: ...)\", drop a retracted fact, ignore small talk. One short sentence per "
    f"fact, e.g. \"{EXAMPLE_NAME}'s home city is Dorim.\""
)


def state_of(bank: MemoryBank, max_words: int = STATE_WORDS) -> str:
    """The ideal internal state: the oracle bank's memories in order, cut to the first max_words words (a fact
    that does not fit is lost, as in any bounded memory)."""
    return " ".join(" ".join(bank.entries.values()).split()[:max_words])


def state_bank(state: str) -> MemoryBank:
    """An internal state read as a bank of its sentences, so `gold_answer_in_bank` can grade it."""
    sentences = [s for s in re.split(r"(?<=\.)\s+", state.strip()) if s and _searchable(s)]
    return MemoryBank(max(len(sentences), 1), dict(enumerate(sentences, 1)))


def constant_memory_tasks(dialogues: list[dict[str, Any]], max_words: int = STATE_WORDS) -> list[dict[str, Any]]:
    """One task per turn, teacher-forced: the ideal state before the turn (`state_of` the oracle bank), the turn,
    its probes and the ideal state after it (the rewrite a demonstration makes)."""
    tasks = []
    for dialogue in dialogues:
        bank = MemoryBank()
        for t, turn in enumerate(dialogue["turns"]):
            before = state_of(bank, max_words)
            bank.apply(turn["op"])
            tasks.append({"id": f"{dialogue['id']}-s{t:02d}", "dialogue_id": dialogue["id"], "split": dialogue["split"],
                          "turn_index": t, "session": turn["session"], "text": turn["text"], "event": turn["event"],
                          "state": before, "ideal_state": state_of(bank, max_words), "max_words": max_words,
                          "probes": probes(dialogue["turns"][: t + 1])})
    return tasks


class ConstantMemoryEnv:
    """MEM1's constant memory (an `Environment`): the internal state and the new turn in, one rewrite out."""

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        return [{"role": "system", "content": STATE_PROMPT},
                {"role": "user", "content": f"Internal state: {task['state'] or '(empty)'}\n\n"
                                            f"New message (session {task['session']}): {task['text']}"}]

    def toolbox_for(self, task: dict[str, Any]) -> Toolbox:
        return Toolbox(ConstantMemory(task["max_words"], task["state"]).tools())

    def score(self, task: dict[str, Any], episode: Episode) -> dict[str, Any]:
        """correct: the careful reader answers every probe from the rewritten state; probes: the share it
        answers; formatted: exactly one accepted rewrite; words: the new state's length."""
        state, formatted = rewritten_state(task, _written(episode))
        passed = [gold_answer_in_bank(state_bank(state), q) for q in task["probes"]]
        return {"correct": float(all(passed)), "probes": sum(passed) / len(passed) if passed else 1.0,
                "formatted": formatted, "words": float(len(state.split()))}

    @staticmethod
    def demonstration(task: dict[str, Any]) -> list[dict[str, str]]:
        return [{"role": "assistant", "content": format_tool_call(ToolCall("rewrite", {"state": task["ideal_state"]}))}]


def rewritten_state(task: dict[str, Any], text: str) -> tuple[str, float]:
    """The state after running the reply on the task's state as the tool would, and whether the reply was
    exactly one accepted rewrite (1.0) or not (0.0; then the old state stays, or the last accepted rewrite)."""
    memory = ConstantMemory(task["max_words"], task["state"])
    _, observations = Toolbox(memory.tools()).run(text)
    return memory.state, float(len(observations) == 1 and not observations[0].startswith("Error:"))


def constant_memory_reward(prompts: list[Any], completions: list[Any], state: list[str] | None = None,
                           probes: list[list[dict]] | None = None, max_words: list[int] | None = None,
                           **kwargs: Any) -> list[float]:
    """A TRL-style reward for the constant memory: 1.0 when the careful reader answers every probe from the
    rewritten state, plus FORMAT_WEIGHT for exactly one accepted rewrite (the bound is the tool's, so no size term)."""
    if state is None or probes is None or max_words is None or len(state) != len(completions):
        raise ValueError("constant_memory_reward needs the per-sample columns state, probes and max_words")
    rewards = []
    for s, p, n, c in zip(state, probes, max_words, completions, strict=True):
        new, formatted = rewritten_state({"state": s, "max_words": n}, completion_text(c))
        rewards.append(float(all(gold_answer_in_bank(state_bank(new), q) for q in p)) + FORMAT_WEIGHT * formatted)
    return rewards


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
