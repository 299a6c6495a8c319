"""Agentic search (task family): questions about a generated encyclopedia that no model has read, answered by
searching it with a BM25 tool (`tools.SearchIndex`), as in Search-R1.

The corpus. `encyclopedia(seed)` invents provinces, towns, people, organisations and works, with facts that
link them: a person was born in a town, founded an organisation, created a work; an organisation is based in a
town, which lies in a province. Every name is made of invented syllables, so no answer can come from
pretraining: a closed-book model can only guess. One short titled document per entity states its facts.
Some people's birth years are not recorded anywhere: questions about them have no answer in the corpus.

The questions (`search_questions`), four kinds, each with its gold answer and the ids of the documents that
support it:

- single_hop: one document answers ("In which town was Varo Quen born?");
- two_hop: a bridge entity first ("In which town was the founder of Telmar Works born?": the organisation's
  document names the founder, the founder's document names the town);
- comparison: two documents and a comparison ("Which was founded first, Telmar Works or Osk Press?");
- unanswerable: the fact is not in the corpus; the right answer is "unknown".

Splits are by entity: each question is about an anchor entity (the first one it names; both for a
comparison), and anchors are split into train / validation / held-out, so held-out questions are about
entities no training question mentions.

The environment (`SearchEnv`) offers the `search` tool; the policy answers in `<answer>...</answer>`. Its
score is normalised exact match and token F1 (`rewards.exact_match`, `rewards.token_f1`).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

from agentrl_lite.chat import ANSWER_CLOSE, ANSWER_OPEN, ToolCall, extract_answer, format_tool_call
from agentrl_lite.episode import Episode
from agentrl_lite.rewards import _column, episode_completion, exact_match, normalize_answer, token_f1
from agentrl_lite.tools import SearchIndex, Toolbox

UNKNOWN = "unknown"
"""the gold answer of an unanswerable question"""
KINDS = ("single_hop", "two_hop", "comparison", "unanswerable")
SPLITS = ("train", "validation", "heldout")
SPLIT_SHARES = (0.7, 0.1, 0.2)

_ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "gr", "kr", "st",
           "th", "tr", "sk", "vr", "sh"]
_VOWELS = ["a", "e", "i", "o", "u", "ae", "io", "ou"]
_CODAS = ["", "", "n", "r", "l", "s", "m", "th", "k", "x"]
PROFESSIONS = ["cartographer", "glassblower", "astronomer", "weaver", "composer", "shipwright", "botanist",
               "clockmaker", "engraver", "physician", "architect", "beekeeper"]
INDUSTRIES = ["shipbuilding", "printing", "brewing", "textile", "mining", "clockwork", "porcelain", "rope-making"]
ORG_SUFFIXES = ["Works", "Company", "Guild", "Press", "Foundry", "Brothers", "Trading House", "Mills"]
WORK_KINDS = ["novel", "opera", "atlas", "symphony", "play", "herbarium"]
_ADJECTIVES = ["Silent", "Copper", "Hollow", "Winter", "Crooked", "Amber", "Distant", "Salt", "Ninth", "Pale",
               "Broken", "Velvet", "Iron", "Lantern", "Drowned", "Seventh"]
_NOUNS = ["Harbour", "Orchard", "Lighthouse", "Meridian", "Staircase", "Ferry", "Tide", "Archive", "Garden",
          "Comet", "Bellfounder", "Causeway", "Quarry", "Observatory", "Lantern", "Ledger"]


def _word(rng: random.Random, syllables: int) -> str:
    return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(syllables - 1)) + \
        rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)


def _unique(rng: random.Random, make, taken: set[str]) -> str:
    while True:
        name = make()
        if name.lower() not in taken:
            taken.add(name.lower())
            return name


@dataclass
class Encyclopedia:
    """The generated world: entities with their facts, and one document per entity."""

    provinces: list[str]
    towns: list[dict[str, Any]]
    """name, province, founded"""
    people: list[dict[str, Any]]
    """name, town (birthplace), born (a year, or None when it is not recorded), profession"""
    organisations: list[dict[str, Any]]
    """name, founder (a person's name), founded, town (headquarters), industry"""
    works: list[dict[str, Any]]
    """name (title), creator (a person's name), year, kind"""
    documents: list[dict[str, str]] = field(default_factory=list)
    """id, title, text"""

    def person(self, name: str) -> dict[str, Any]:
        return next(p for p in self.people if p["name"] == name)

    def town(self, name: str) -> dict[str, Any]:
        return next(t for t in self.towns if t["name"] == name)


def encyclopedia(seed: int = 0, n_towns: int = 60, n_people: int = 320, n_organisations: int = 160,
                 n_works: int = 160, unrecorded_share: float = 0.2, state_missing_year: bool = False) -> Encyclopedia:
    """A deterministic invented world; every person founds at most one organisation and creates at most one work.

    state_missing_year: a person without a recorded year of birth has a document that says so ("...; the year of
    birth is not recorded.") instead of one that leaves the year out. The same world and questions either way; only
    those documents' text differs. The course's corpus (`course.data`) states it: with a second search, the other
    people's years its snippets bring in otherwise outvote a gap nothing says (docs/design/09_agentic_search.md,
    items 32 and 42)."""
    if n_organisations + n_works > n_people:
        raise ValueError("encyclopedia: every organisation and work needs its own person (n_people too small)")
    rng = random.Random(seed)
    taken: set[str] = set()
    provinces = [_unique(rng, lambda: _word(rng, 3).capitalize(), taken) for _ in range(8)]
    towns = [{"name": _unique(rng, lambda: _word(rng, rng.choice([2, 3])).capitalize(), taken),
              "province": rng.choice(provinces), "founded": rng.randrange(800, 1500)} for _ in range(n_towns)]
    people = []
    for _ in range(n_people):
        name = _unique(rng, lambda: f"{_word(rng, 2).capitalize()} {_word(rng, rng.choice([2, 3])).capitalize()}",
                       taken)
        born = None if rng.random() < unrecorded_share else rng.randrange(1780, 1950)
        people.append({"name": name, "town": rng.choice(towns)["name"], "born": born,
                       "profession": rng.choice(PROFESSIONS)})
    makers = rng.sample(people, n_organisations + n_works)
    organisations = []
    for founder in makers[:n_organisations]:
        start = (founder["born"] or rng.randrange(1780, 1950)) + rng.randrange(22, 60)
        organisations.append({
            "name": _unique(rng, lambda: f"{_word(rng, 2).capitalize()} {rng.choice(ORG_SUFFIXES)}", taken),
            "founder": founder["name"], "founded": start, "town": rng.choice(towns)["name"],
            "industry": rng.choice(INDUSTRIES)})
    works = []
    for creator in makers[n_organisations:]:
        year = (creator["born"] or rng.randrange(1780, 1950)) + rng.randrange(20, 70)
        works.append({"name": _unique(rng, lambda: f"The {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)} of "
                                                   f"{_word(rng, 2).capitalize()}", taken),
                      "creator": creator["name"], "year": year, "kind": rng.choice(WORK_KINDS)})
    world = Encyclopedia(provinces, towns, people, organisations, works)
    world.documents = _documents(world, state_missing_year)
    return world


def _a(word: str) -> str:
    return f"an {word}" if word[0] in "aeiou" else f"a {word}"


def _documents(world: Encyclopedia, state_missing_year: bool = False) -> list[dict[str, str]]:
    docs = []
    for t in world.towns:
        docs.append((t["name"], f"{t['name']} is a town in the province of {t['province']}, founded in "
                                f"{t['founded']}."))
    for p in world.people:
        gap = "; the year of birth is not recorded" if state_missing_year else ""
        born = f"in {p['town']} in {p['born']}" if p["born"] is not None else f"in {p['town']}{gap}"
        docs.append((p["name"], f"{p['name']} was {_a(p['profession'])}, born {born}."))
    for o in world.organisations:
        docs.append((o["name"], f"{o['name']} is {_a(o['industry'])} firm founded in {o['founded']} by "
                                f"{o['founder']}. Its headquarters are in {o['town']}."))
    for w in world.works:
        docs.append((w["name"], f"{w['name']} is {_a(w['kind'])} by {w['creator']}, first performed or published "
                                f"in {w['year']}."))
    return [{"id": f"d{i:04d}", "title": title, "text": text} for i, (title, text) in enumerate(docs)]


def _doc_id(world: Encyclopedia, title: str) -> str:
    return next(d["id"] for d in world.documents if d["title"] == title)


def search_questions(world: Encyclopedia, seed: int = 0) -> list[dict[str, Any]]:
    """Every question of the four kinds the world supports, with its split (by anchor entity).

    Fields: id, question, answer, kind, split, anchor (the entity the split follows), support (gold document
    ids), queries (the gold search queries, one per hop: the entity names).
    """
    rng = random.Random(seed)
    anchors = [e["name"] for e in world.people + world.organisations + world.works + world.towns]
    order = rng.sample(anchors, len(anchors))
    cut1 = int(SPLIT_SHARES[0] * len(order))
    cut2 = cut1 + int(SPLIT_SHARES[1] * len(order))
    split_of = {name: ("train" if i < cut1 else "validation" if i < cut2 else "heldout")
                for i, name in enumerate(order)}
    questions: list[dict[str, Any]] = []

    def add(kind: str, question: str, answer: str, anchor: str, hops: list[str]) -> None:
        questions.append({"question": question, "answer": str(answer), "kind": kind, "split": split_of[anchor],
                          "anchor": anchor, "support": [_doc_id(world, h) for h in hops], "queries": hops})

    for p in world.people:
        add("single_hop", f"In which town was {p['name']} born?", p["town"], p["name"], [p["name"]])
        add("single_hop", f"What was the profession of {p['name']}?", p["profession"], p["name"], [p["name"]])
        add("single_hop" if p["born"] is not None else "unanswerable", f"In which year was {p['name']} born?",
            p["born"] if p["born"] is not None else UNKNOWN, p["name"], [p["name"]])
    for o in world.organisations:
        founder = world.person(o["founder"])
        add("single_hop", f"Who founded {o['name']}?", o["founder"], o["name"], [o["name"]])
        add("single_hop", f"In which town is {o['name']} headquartered?", o["town"], o["name"], [o["name"]])
        add("two_hop", f"In which town was the founder of {o['name']} born?", founder["town"], o["name"],
            [o["name"], founder["name"]])
        add("two_hop", f"In which province is {o['name']} headquartered?", world.town(o["town"])["province"],
            o["name"], [o["name"], o["town"]])
        add("two_hop" if founder["born"] is not None else "unanswerable",
            f"In which year was the founder of {o['name']} born?",
            founder["born"] if founder["born"] is not None else UNKNOWN, o["name"], [o["name"], founder["name"]])
    for w in world.works:
        creator = world.person(w["creator"])
        add("single_hop", f"Who created {w['name']}?", w["creator"], w["name"], [w["name"]])
        add("two_hop", f"What was the profession of the creator of {w['name']}?", creator["profession"],
            w["name"], [w["name"], creator["name"]])
    for t in world.towns:
        add("single_hop", f"In which province is {t['name']}?", t["province"], t["name"], [t["name"]])
    for split in SPLITS:  # comparisons within a split: both entities are anchors of that split
        orgs = [o for o in world.organisations if split_of[o["name"]] == split]
        for a, b in zip(orgs[0::2], orgs[1::2], strict=False):
            if a["founded"] != b["founded"]:
                first = a if a["founded"] < b["founded"] else b
                add("comparison", f"Which was founded first, {a['name']} or {b['name']}?", first["name"],
                    a["name"], [a["name"], b["name"]])
        people = [p for p in world.people if split_of[p["name"]] == split and p["born"] is not None]
        for a, b in zip(people[0::2], people[1::2], strict=False):
            if a["born"] != b["born"]:
                first = a if a["born"] < b["born"] else b
                add("comparison", f"Who was born first, {a['name']} or {b['name']}?", first["name"], a["name"],
                    [a["name"], b["name"]])
    for i, q in enumerate(questions):
        q["id"] = f"q{i:05d}"
    return questions


HELDOUT_WORLD_SEED = 1
"""the seed of the held-out encyclopedia (`heldout_world`); the course's own world is seed 0"""
HELDOUT_PER_KIND = 50
"""held-out questions of each kind drawn from the held-out world"""


def heldout_world() -> tuple[Encyclopedia, list[dict[str, Any]]]:
    """A second encyclopedia and `HELDOUT_PER_KIND` questions of each kind about it: lesson 09's held-out set.

    The first held-out set, the held-out split of the course's world, was retired: its first 48 questions settled
    choices of the lesson's design (which kinds RL trains on) and it holds only 19 unanswerable questions in all.
    Every question here is about a world that no demonstration, training question or probe has touched, so the
    agent must search a corpus it has never seen; its entities' names appear nowhere in the course's world
    (a test checks). Ids start with `h`, documents' too."""
    world = encyclopedia(seed=HELDOUT_WORLD_SEED, state_missing_year=True)
    world.documents = [{**d, "id": "h" + d["id"]} for d in world.documents]
    questions = search_questions(world, seed=HELDOUT_WORLD_SEED)
    rng = random.Random(HELDOUT_WORLD_SEED)
    sample = [q for kind in KINDS for q in rng.sample([q for q in questions if q["kind"] == kind], HELDOUT_PER_KIND)]
    return world, [{**q, "id": "h" + q["id"], "split": "heldout"} for q in sample]


def retired_heldout() -> list[dict[str, Any]]:
    """The first held-out set, retired (`heldout_world`): the held-out split of the course's world."""
    return [q for q in search_questions(encyclopedia(seed=0, state_missing_year=True), seed=0)
            if q["split"] == "heldout"]


SYSTEM_PROMPT = (
    "You answer questions about an encyclopedia you have never read. Use the search tool to look things up: "
    "search for the names in the question, one at a time. When you know the answer, reply with "
    "<answer>...</answer> holding only the answer (a name, a town, a year, a word). If the encyclopedia does "
    f"not say, reply <answer>{UNKNOWN}</answer>."
)
CITE_PROMPT = SYSTEM_PROMPT.replace("When you know the answer, reply with",
                                   "When you know the answer, first copy the sentence it rests on, then write")
"""the agent's system prompt when its final reply cites the evidence first (`SearchEnv(cite=True)`, `evidence`)"""
PLAN_PROMPT_ADDITION = (
    " Before your first search, write a one-line plan: how many searches the question needs, and what each is for."
)
"""added to the system prompt when the agent plans before its first search (`SearchEnv(plan=True)`, `search_plan`)"""
CLOSED_BOOK_PROMPT = (
    "Answer the question. Reply with <answer>...</answer> holding only the answer (a name, a town, a year, a "
    f"word). If you do not know, reply <answer>{UNKNOWN}</answer>."
)


@dataclass
class SearchEnv:
    """Questions answered with a BM25 `search` tool over the encyclopedia (an `Environment`).

    mode: "agent" (the search tool, multi-turn), "closed_book" (no tool, no documents) or "rag" (no tool; the
    top-k documents for the question itself are pasted into the prompt: one-shot retrieval).
    """

    index: SearchIndex
    mode: str = "agent"
    k: int = 3
    """documents per search (the tool's default, and the RAG baseline's)"""
    cite: bool = False
    """the agent is asked to copy the sentence its answer rests on before answering (`CITE_PROMPT`); pair it with
    demonstrations built with `demonstration(..., cite=True)`"""
    plan: bool = False
    """the agent is asked to write a one-line plan before its first search (`PLAN_PROMPT_ADDITION`); pair it with
    demonstrations built with `demonstration(..., plan=True)`. The number of searches is then decided on the
    question's words, where the kinds differ, rather than after the first tool reply, where they do not"""
    verify: bool = False
    """cite or abstain: an answer counts only when it is `grounded` in the evidence the agent cited, any other
    answer is recorded as `unknown` (`accepted_answer`); `correct` and `f1` then judge the recorded answer, and
    `answered_correct` the agent's own"""

    def __post_init__(self) -> None:
        if self.mode not in ("agent", "closed_book", "rag"):
            raise ValueError(f"mode must be 'agent', 'closed_book' or 'rag', got {self.mode!r}")

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        if self.mode == "agent":
            system = (CITE_PROMPT if self.cite else SYSTEM_PROMPT) + (PLAN_PROMPT_ADDITION if self.plan else "")
            return [{"role": "system", "content": system}, {"role": "user", "content": task["question"]}]
        if self.mode == "closed_book":
            return [{"role": "system", "content": CLOSED_BOOK_PROMPT}, {"role": "user", "content": task["question"]}]
        context = self.index.search(task["question"], self.k)
        return [{"role": "system", "content": CLOSED_BOOK_PROMPT},
                {"role": "user", "content": f"Documents:\n{context}\n\nQuestion: {task['question']}"}]

    def toolbox_for(self, task: dict[str, Any] | None = None) -> Toolbox | None:
        return Toolbox([self.index.search]) if self.mode == "agent" else None

    def score(self, task: dict[str, Any], episode: Episode) -> dict[str, float]:
        """correct: normalised exact match of the `<answer>`; f1: token F1; searches: calls made;
        formatted: an `<answer>` was given; grounded: the answer is read off the evidence it cited (`grounded`).
        With `verify`, correct and f1 judge the answer the protocol records (`accepted_answer`), and
        answered_correct the agent's own."""
        completion = episode_completion(episode)
        is_grounded = grounded(task["question"], completion)
        answer = accepted_answer(task["question"], completion, is_grounded) if self.verify else episode.answer
        return {
            "correct": float(exact_match(answer, task["answer"])),
            "f1": token_f1(answer, task["answer"]),
            "formatted": float(episode.answer is not None),
            "searches": float(episode.num_tool_calls),
            "grounded": float(is_grounded),
            **({"answered_correct": float(exact_match(episode.answer, task["answer"]))} if self.verify else {}),
        }


def _sentences(text: str) -> list[str]:
    return [s if s.endswith(".") else s + "." for s in re.split(r"(?<=\.) ", text.strip()) if s]


def evidence(task: dict[str, Any], index: SearchIndex) -> str:
    """The sentence(s) of the gold documents an answer rests on, as the tool returned them.

    single-hop and two-hop: the sentence of the last hop's document that holds the answer (a two-hop chain's
    last document names the bridge entity too; "Its headquarters are in X." names its organisation);
    comparison: the first sentence of both documents, which hold the two years side by side; unanswerable:
    what the document does say, and that the year is missing.
    """
    documents = {d["id"]: d for d in index.documents}
    docs = [_sentences(documents[i]["text"]) for i in task["support"]]
    if task["kind"] == "comparison":
        return " ".join(d[0] for d in docs)
    if task["answer"] == UNKNOWN:
        said = docs[-1][0]
        return said if said.endswith("not recorded.") else f"{said} No year of birth is given."
    hits = [s for s in docs[-1] if normalize_answer(task["answer"]) in normalize_answer(s)]
    return _quoted(documents[task["support"][-1]]["title"], hits[0] if hits else docs[-1][0])


def _quoted(title: str, sentence: str) -> str:
    """A document's sentence as a citation writes it: standing alone ("Its headquarters are in X." names its
    organisation, whose title the snippet gives)."""
    if sentence.startswith("Its headquarters are in "):
        return sentence.replace("Its headquarters", f"The headquarters of {title}", 1)
    return sentence


def search_plan(task: dict[str, Any]) -> str:
    """The one-line plan written before the first search: the number of searches and what each is for, read
    off the question's words (a two-hop question's second query is a name only the first reply gives)."""
    if task["kind"] == "comparison":
        return "Plan: 2 searches, one for each name."
    if len(task["queries"]) == 2:
        return "Plan: 2 searches, the second for the name the first one gives."
    return "Plan: 1 search, for the name in the question."


def demonstration(task: dict[str, Any], index: SearchIndex, k: int = 3, cite: bool = False,
                  plan: bool = False) -> list[dict[str, Any]]:
    """The gold conversation after the system prompt: the question, one search per gold query with the
    tool's real replies, then the answer; with `cite`, the final reply first copies the evidence (`evidence`),
    so that the answer is read off a sentence the model has just written; with `plan`, the first search is
    preceded by the plan (`search_plan`)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": task["question"]}]
    for i, query in enumerate(task["queries"]):
        ahead = f"{search_plan(task)}\n" if plan and i == 0 else ""
        messages.append({"role": "assistant",
                         "content": ahead + format_tool_call(ToolCall("search", {"query": query}))})
        messages.append({"role": "tool", "content": index.search(query, k)})
    cited = f"{evidence(task, index)}\n" if cite else ""
    messages.append({"role": "assistant", "content": f"{cited}<answer>{task['answer']}</answer>"})
    return messages


# --- grounding: is the answer read off the evidence the agent cited? --------------------------------------
_SNIPPET_LINE = re.compile(r"^\[\d+\] (.+?): (.*)$")


def _snippets(tool_result: str) -> list[tuple[str, str]]:
    """(title, text) of each document in a `search` reply ("[1] Title: text" lines); other lines are skipped."""
    return [(m.group(1), m.group(2)) for line in str(tool_result).splitlines() if (m := _SNIPPET_LINE.match(line))]
_YEAR = re.compile(r"\b\d{3,4}\b")


def _contains(text: str, phrase: str) -> bool:
    return f" {normalize_answer(phrase)} " in f" {normalize_answer(text)} "


# Two-hop questions ask about the entity a document of the question's entity names: its founder or creator ("... by
# P"), or the town its headquarters are in. (question pattern, where that document's sentence names the entity)
_BRIDGES = ((re.compile(r"\b(?:founder|creator) of\b"), re.compile(r"\bby ([^,.]+)")),
            (re.compile(r"\bprovince\b.*\bheadquartered\b"), re.compile(r"\bheadquarters of .+? are in ([^,.]+)")))


def _subjects(question: str, retrieved: list[tuple[str, str]]) -> set[str]:
    """The entities whose documents can answer `question` (normalised titles), read off the question and what the
    searches returned (`retrieved`: normalised title, sentence), not off a gold answer: the titles the question
    names, or, for a two-hop question, the entity that those documents' sentences name in the asked relation
    (`_BRIDGES`)."""
    spoken = f" {normalize_answer(question)} "
    named = {title for title, _ in retrieved if f" {title} " in spoken}
    for asks, link in _BRIDGES:
        if asks.search(question):
            return {normalize_answer(m.group(1)) for title, sentence in retrieved if title in named
                    for m in link.finditer(sentence)}
    return named


def _final_answer(completion: list[dict[str, Any]]) -> tuple[str, str | None]:
    """The last assistant message of a completion and its `<answer>` (None without one)."""
    final = next((m.get("content") or "" for m in reversed(completion) if m.get("role") == "assistant"), "")
    return final, extract_answer(final)


def grounded(question: str, completion: list[dict[str, Any]]) -> bool:
    """Is the final answer read off a sentence the agent cited, copied from what its searches returned, about the
    entity the question asks about?

    The cited sentences are those of the final reply before `<answer>` that are whole sentences of a retrieved
    snippet (as `evidence` quotes them; case and punctuation aside); sentences the agent wrote itself, and
    fragments, do not count. Of them, only those of a document about the asked entity count (`_subjects`: the
    entity the question names, or for a two-hop question the founder, creator or headquarters town that entity's
    retrieved document names). A value is grounded when such a sentence holds it; `unknown` is grounded when the
    question asks for a year and such sentences (at least one) hold none — the one kind of fact this corpus leaves
    out. A question that asks for a year takes a year. It needs no gold answer: it checks the step from evidence to
    answer, the step the cold start skips when it cites a person's sentence and answers with a year from another
    person's snippet (docs/design/09_agentic_search.md). GRPO with an earlier form of this term as a bonus
    found its two holes: a town for a year, and a cited sentence about another entity (the birth town's
    founding year); both are closed. No `<answer>`: not grounded.
    """
    final, answer = _final_answer(completion)
    if answer is None:
        return False
    retrieved = [(normalize_answer(title), _quoted(title, sentence)) for m in completion if m.get("role") == "tool"
                 for title, text in _snippets(m.get("content") or "") for sentence in _sentences(text)]
    subjects = _subjects(question, retrieved)
    about = {normalize_answer(sentence) for title, sentence in retrieved if title in subjects}
    before = final[:final.rfind(ANSWER_OPEN, 0, final.rfind(ANSWER_CLOSE))]
    cited = [s for s in _sentences(before) if normalize_answer(s) in about]
    asks_year, said = "year" in question.lower(), normalize_answer(answer)
    if said == UNKNOWN:
        return bool(cited) and asks_year and not any(_YEAR.search(s) for s in cited)
    if asks_year and not _YEAR.fullmatch(said):
        return False
    return any(_contains(s, answer) for s in cited)


def accepted_answer(question: str, completion: list[dict[str, Any]], is_grounded: bool | None = None) -> str | None:
    """The answer a cite-or-abstain protocol records: the agent's own when it is `grounded` in the sentences it
    cited, else `unknown` (it answered something its evidence does not hold); None when it gave no `<answer>`.
    is_grounded: `grounded(question, completion)` if the caller has it already."""
    _, answer = _final_answer(completion)
    if answer is None:
        return None
    ok = grounded(question, completion) if is_grounded is None else is_grounded
    return answer if ok else UNKNOWN


def verified_exact_match_reward(prompts: list[Any], completions: list[Any], answer: list[str] | None = None,
                                question: list[str] | None = None, **kwargs: Any) -> list[float | None]:
    """Exact match of the answer the cite-or-abstain protocol records (`accepted_answer`) against the gold
    `answer` (TRL's reward signature; needs the task columns `answer` and `question`)."""
    gold = _column("answer", answer, len(completions), "verified_exact_match_reward")
    asked = _column("question", question, len(completions), "verified_exact_match_reward")
    return [float(exact_match(accepted_answer(q, c), a)) if isinstance(c, list) else 0.0
            for q, a, c in zip(asked, gold, completions, strict=True)]


def grounding_reward(prompts: list[Any], completions: list[Any], question: list[str] | None = None,
                     **kwargs: Any) -> list[float | None]:
    """1.0 when the answer is `grounded` in the evidence the agent cited, else 0.0 (a reward with TRL's
    signature; the task's `question` column is passed by the trainer). Meant beside exact match with a small
    weight: within a group it ranks a wrong year copied from a neighbour's snippet below `unknown` said of a
    cited sentence without a year, and below a wrong value the citation does hold."""
    if question is None or len(question) != len(completions):
        raise ValueError("grounding_reward needs the per-sample column 'question' (one per completion)")
    return [float(grounded(q, c)) if isinstance(c, list) else 0.0 for q, c in zip(question, completions, strict=True)]


# --- analysis: what the agent retrieved, recall@k, why an answer was wrong -------------------------------
def retrieved_titles(episode: Episode) -> list[str]:
    """Titles of the documents the search tool returned in an episode, in order (repeats kept)."""
    return [title for turn in episode.turns for result in turn.tool_results for title, _ in _snippets(result)]


def agent_queries(episode: Episode) -> list[str]:
    """The queries of the episode's well-formed search calls, in order."""
    return [str(c.get("arguments", {}).get("query", "")) for t in episode.model_turns for c in t.tool_calls
            if c.get("name") == "search"]


def recall_at_k(index: SearchIndex, queries: list[str], gold: list[str], k: int = 3) -> float:
    """Share of `gold` document ids found in the top k of at least one of `queries` (1.0 for no gold)."""
    if not gold:
        return 1.0
    found = {d["id"] for q in queries if q.strip() for d in index.top(q, k)}
    return sum(g in found for g in gold) / len(gold)


FAILURE_KINDS = ("right", "no search", "gold never retrieved", "retrieved but wrong answer", "gave up", "no answer")


def failure_kind(task: dict[str, Any], episode: Episode, index: SearchIndex) -> str:
    """Why an episode's answer was wrong (or "right"), from what it retrieved and what it answered.

    "no search": answered without searching; "gold never retrieved": none of the supporting documents came
    back (a wrong or missing query); "retrieved but wrong answer": a supporting document was in front of the
    model and it extracted the wrong thing; "gave up": answered unknown to an answerable question; "no
    answer": no `<answer>` tag (ran out of turns or tokens).
    """
    if exact_match(episode.answer, task["answer"]):
        return "right"
    if episode.answer is None:
        return "no answer"
    if normalize_answer(episode.answer) == UNKNOWN and task["answer"] != UNKNOWN:
        return "gave up"
    if episode.num_tool_calls == 0:
        return "no search"
    ids = {d["title"]: d["id"] for d in index.documents}
    seen = {ids[t] for t in retrieved_titles(episode) if t in ids}
    return "retrieved but wrong answer" if seen & set(task["support"]) else "gold never retrieved"
