"""The wording of the memory task: the sentences a dialogue's turns are written from, the ideal memory of each
fact, the questions, and the manager's instructions; `read_fact` reads a turn back with the same templates.

A template has slots {e} (the entity: a person or an organisation), {v} (a value) and {old} (the wrong value a
correction replaces). Every word here is reserved: no invented name or value can coincide with one.
"""

from __future__ import annotations

import re
from typing import Any

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
MANAGER_PROMPT = (
    "You keep a memory bank of facts about the user's friends and their employers. Read the new message and "
    "the related memories, then call exactly one tool: add for a new fact; update to rewrite a memory whose "
    "fact changed (keep old values as \"(earlier: ...)\") or was corrected; delete when the user retracts a "
    f"fact; noop for small talk or a fact already stored. One short sentence per memory, e.g. \"{EXAMPLE_NAME}'s "
    "home city is Dorim.\""
)
"""the memory manager's system prompt"""


def memory_text(attribute: str, entity: str, values: list[str]) -> str:
    """The ideal memory of a fact: its current value, then the earlier values of real changes."""
    text = MEMORY_TEMPLATES[attribute].format(e=entity, v=values[-1])
    return text if len(values) == 1 else f"{text[:-1]} (earlier: {', '.join(values[:-1])})."


# --- reading a turn back with the templates ---------------------------------------------------------------
_SLOTS = {"e": r"(?P<e>[A-Z][\w-]*(?: [A-Z][\w-]*)*)", "v": r"(?P<v>[\w-]+(?: [A-Z][\w-]*)*)",
          "old": r"(?P<old>[\w-]+(?: [A-Z][\w-]*)*)"}


def _pattern(template: str) -> re.Pattern[str]:
    """A regular expression matching the whole of a template's sentences, one named group per slot."""
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
