"""Agentic search: the generated encyclopedia, its questions and splits, the BM25 tool, the environment."""

from __future__ import annotations

import re

import pytest

from agentrl_lite.chat import ToolCall, parse_tool_calls
from agentrl_lite.episode import Episode
from agentrl_lite.rewards import exact_match, exact_match_reward, f1_reward, normalize_answer, token_f1
from agentrl_lite.tasks import DATA_DIR, read_jsonl
from agentrl_lite.tasks.search import (
    KINDS,
    UNKNOWN,
    SearchEnv,
    accepted_answer,
    demonstration,
    encyclopedia,
    grounded,
    grounding_reward,
    search_questions,
    verified_exact_match_reward,
)
from agentrl_lite.tools import MAX_SEARCH_RESULTS, SearchIndex, Toolbox


@pytest.fixture(scope="module")
def world():
    return encyclopedia(seed=0)


@pytest.fixture(scope="module")
def index(world):
    return SearchIndex(world.documents)


@pytest.fixture(scope="module")
def questions(world):
    return search_questions(world, seed=0)


def test_the_committed_corpus_and_questions_are_the_generators(world, questions):
    assert read_jsonl(DATA_DIR / "search_corpus.jsonl") == world.documents
    committed = [q for split in ("train", "validation", "heldout")
                 for q in read_jsonl(DATA_DIR / f"search_{split}.jsonl")]
    assert sorted(committed, key=lambda q: q["id"]) == sorted(questions, key=lambda q: q["id"])


def test_corpus_size_names_and_every_kind_in_every_split(world, questions):
    assert 500 <= len(world.documents) <= 3000
    titles = [d["title"].lower() for d in world.documents]
    assert len(set(titles)) == len(titles), "two entities share a name: questions would be ambiguous"
    for split in ("train", "validation", "heldout"):
        kinds = {q["kind"] for q in questions if q["split"] == split}
        assert kinds == set(KINDS), (split, kinds)


def test_heldout_questions_are_about_entities_no_training_question_names(questions):
    train_text = " ".join(q["question"] for q in questions if q["split"] == "train")
    heldout_anchors = {q["anchor"] for q in questions if q["split"] == "heldout"}
    assert heldout_anchors
    leaked = [a for a in heldout_anchors if a in train_text]
    assert not leaked, leaked[:5]


def test_answers_are_in_their_support_documents_and_unanswerables_are_not(world, questions):
    text = {d["id"]: d["text"] for d in world.documents}
    for q in questions:
        support = " ".join(text[i] for i in q["support"])
        if q["kind"] == "unanswerable":
            assert q["answer"] == UNKNOWN
            assert " in 1" not in text[q["support"][-1]], q  # the person's document states no year
        else:
            assert q["answer"] in support, q


def test_the_index_finds_every_single_hop_gold_document_at_k3(index, questions):
    single = [q for q in questions if q["kind"] == "single_hop"]
    misses = [q for q in single if q["support"][0] not in [d["id"] for d in index.top(q["queries"][0], 3)]]
    assert not misses, f"{len(misses)} of {len(single)} missed, e.g. {misses[:3]}"


def test_every_hop_of_a_two_hop_question_is_found_by_its_gold_query(index, questions):
    for q in [q for q in questions if q["kind"] == "two_hop"][:200]:
        for query, doc in zip(q["queries"], q["support"], strict=True):
            assert doc in [d["id"] for d in index.top(query, 3)], q


@pytest.mark.parametrize("arguments, message", [
    ({"query": ""}, "empty"),
    ({"query": "   "}, "empty"),
    ({"query": "Osk", "k": 1000}, "k must be between"),
    ({"query": "Osk", "k": 0}, "k must be between"),
    ({"query": 42}, "string"),
    ({"query": "Osk", "k": "3"}, "integer"),
    ({"query": "x" * 1000}, "longer than"),
    ({}, "missing the required argument"),
    ({"query": "Osk", "limit": 3}, "unexpected argument"),
])
def test_bad_search_calls_become_error_observations(index, arguments, message):
    observation = Toolbox([index.search]).execute(ToolCall("search", arguments))
    assert observation.startswith("Error:") and message in observation, observation


def test_a_query_with_no_known_word_says_so(index):
    assert "No document matches" in index.search("qqqqzzzz")
    assert len(index.search("the", 3).splitlines()) <= 3  # a stop word alone: no match, not a crash


def test_search_results_are_titled_capped_and_at_most_k(index, world):
    name = world.people[0]["name"]
    lines = index.search(name, 2).splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"[1] {name}: ")
    assert len(index.search("engraver born", MAX_SEARCH_RESULTS).splitlines()) == MAX_SEARCH_RESULTS


def test_the_index_is_cached_on_disk_and_loads_to_the_same_results(world, tmp_path):
    built = SearchIndex(world.documents, cache_dir=str(tmp_path))
    assert len(list(tmp_path.iterdir())) == 1
    loaded = SearchIndex(world.documents, cache_dir=str(tmp_path))
    for p in world.people[:20]:
        assert built.search(p["name"]) == loaded.search(p["name"])


@pytest.mark.parametrize("predicted, gold, em, f1", [
    ("Osk Press", "Osk Press", True, 1.0),
    ("the osk press.", "Osk Press", True, 1.0),
    ("  OSK   press ", "Osk Press", True, 1.0),
    ("Osk", "Osk Press", False, 2 / 3),
    ("Press Osk Ltd", "Osk Press", False, 0.8),
    ("", "Osk Press", False, 0.0),
    (None, "Osk Press", False, 0.0),
    ("1874", 1874, True, 1.0),
    ("rope-making", "rope making", True, 1.0),
])
def test_normalised_exact_match_and_f1(predicted, gold, em, f1):
    assert exact_match(predicted, gold) is em
    assert token_f1(predicted, gold) == pytest.approx(f1)


def test_normalisation_removes_articles_only_as_words():
    assert normalize_answer("The Theatre of an Anvil") == "theatre of anvil"


def test_em_and_f1_rewards_read_only_the_answer_tag():
    completions = [[{"role": "assistant", "content": "<answer>Osk Press</answer>"}],
                   [{"role": "assistant", "content": "Osk Press"}],
                   [{"role": "assistant", "content": "<answer>Osk</answer>"}]]
    answers = ["Osk Press"] * 3
    assert exact_match_reward(None, completions, answer=answers) == [1.0, 0.0, 0.0]
    assert f1_reward(None, completions, answer=answers) == pytest.approx([1.0, 0.0, 2 / 3])


def test_demonstrations_search_each_gold_query_and_see_the_answer(index, questions):
    for q in [q for q in questions if q["kind"] != "unanswerable"][:100]:
        messages = demonstration(q, index)
        assert messages[0] == {"role": "user", "content": q["question"]}
        calls = [parse_tool_calls(m["content"]).calls for m in messages if m["role"] == "assistant"][:-1]
        assert [c[0].arguments["query"] for c in calls] == q["queries"]
        seen = " ".join(m["content"] for m in messages if m["role"] == "tool")
        assert q["answer"] in seen or q["kind"] == "comparison"
        assert messages[-1]["content"] == f"<answer>{q['answer']}</answer>"
        assert demonstration(q, index, cite=True)[-1]["content"].endswith(f"\n<answer>{q['answer']}</answer>")


def test_the_demonstrated_evidence_is_copied_from_what_the_search_returned(index, questions):
    """With `cite`, the final reply first writes the sentence(s) its answer rests on, taken from the tool's replies: the answer
    itself for single-hop and two-hop questions, both years for a comparison, the person without a year when
    the year is unknown (`evidence`)."""
    kinds = set()
    for q in questions:
        messages = demonstration(q, index, cite=True)
        cited = messages[-1]["content"].split("\n<answer>")[0]
        seen = " ".join(m["content"] for m in messages if m["role"] == "tool")
        sentences = re.findall(r"[^.]+\.", cited)
        kinds.add(q["kind"])
        if q["kind"] == "comparison":
            assert len(sentences) == 2 and all(s.strip() in seen for s in sentences)
            assert len(re.findall(r"\b\d{3,4}\b", cited)) >= 2  # the two years, side by side
        elif q["answer"] == UNKNOWN:
            assert cited.endswith("No year of birth is given.") and sentences[0].strip() in seen
        else:
            assert q["answer"] in cited
            assert cited in seen or cited.startswith("The headquarters of ")
    assert kinds == set(KINDS)
    q = questions[0]
    assert "copy the sentence" in SearchEnv(index, cite=True).prompt(q)[0]["content"]  # the prompt asks for it
    assert "copy the sentence" not in SearchEnv(index).prompt(q)[0]["content"]


def test_an_answer_is_grounded_only_when_read_off_a_cited_sentence_the_search_returned(index, questions, world):
    """`grounded` needs no gold: every cited demonstration is grounded, uncited ones are not, and the cold start's
    failure (citing the person's sentence, then answering another person's year from a snippet) is not; nor are
    GRPO's two (item 18): a word of the cited sentence, not a year, to a question that asks for one, and a year
    read off a cited sentence about another entity (the person's birth town, founded in that year)."""
    for q in questions[::7]:
        assert grounded(q["question"], demonstration(q, index, cite=True)[1:]), q
        assert not grounded(q["question"], demonstration(q, index)[1:]), q
    q = next(q for q in questions if q["kind"] == "unanswerable" and len(q["queries"]) == 1)
    q2 = next(q for q in questions if q["kind"] == "unanswerable" and len(q["queries"]) == 2)
    person = next(p for p in world.people if p["name"] == q["queries"][0])
    neighbour = next(p for p in world.people if p["town"] == person["town"] and p["born"] is not None)
    searched = [{"role": "assistant", "content": "<tool_call>…</tool_call>"},
                {"role": "tool", "content": index.search(person["name"])},
                {"role": "tool", "content": index.search(neighbour["name"])}]
    own = [s for s in searched[1]["content"].split(": ", 1)[1].splitlines()[0].split(". ") if s][0].rstrip(".") + "."
    theirs = next(line for line in searched[2]["content"].splitlines() if neighbour["name"] + ":" in line)
    theirs = theirs.split(": ", 1)[1]
    year = str(neighbour["born"])

    def reply(text):
        return searched + [{"role": "assistant", "content": text}]

    assert own.startswith(person["name"]) and year not in own and year in theirs
    assert grounded(q["question"], reply(f"{own} No year of birth is given.\n<answer>unknown</answer>"))
    assert not grounded(q["question"], reply(f"{own}\n<answer>{year}</answer>"))  # the neighbour's year
    assert not grounded(q["question"], reply(f"{theirs}\n<answer>{year}</answer>"))  # cited, but about the neighbour
    assert not grounded(q["question"], reply(f"{person['name']} was born in {year}.\n<answer>{year}</answer>"))  # made up
    assert not grounded(q["question"], reply(f"{year}.\n<answer>{year}</answer>"))  # a fragment is not a sentence
    assert not grounded(q["question"], reply(f"{theirs}\n<answer>unknown</answer>"))  # the cited line has a year
    assert not grounded(q["question"], reply("<answer>unknown</answer>"))  # nothing cited
    assert not grounded(q["question"], reply(own))  # no answer
    assert person["town"] in own and not grounded(q["question"], reply(f"{own}\n<answer>{person['town']}</answer>")), (
        "a town is no answer to a question that asks for a year, cited or not")
    town_question = f"In which town was {person['name']} born?"
    assert not grounded(town_question, reply(f"{own}\n<answer>unknown</answer>"))  # only years are left out
    assert grounded(town_question, reply(f"{own}\n<answer>{person['town']}</answer>"))
    town = next(t for t in world.towns if t["name"] == person["town"])
    searched.append({"role": "tool", "content": index.search(person["town"])})
    founded = next(line for line in searched[-1]["content"].splitlines() if f"] {town['name']}:" in line).split(": ", 1)[1]
    assert str(town["founded"]) in founded
    assert not grounded(q["question"], reply(f"{own} {founded}\n<answer>{town['founded']}</answer>")), (
        "the birth town's founding year is cited, but the question asks about the person")
    assert grounded(q["question"], reply(f"{own} {founded}\n<answer>unknown</answer>"))  # the person's sentence has none
    org = next(o for o in world.organisations if o["founder"] == q2["queries"][1] and o["name"] == q2["queries"][0])
    founder = next(p for p in world.people if p["name"] == org["founder"])
    two_hop = [{"role": "tool", "content": index.search(name)} for name in (org["name"], founder["name"])]
    org_line = next(line for line in two_hop[0]["content"].splitlines() if f"] {org['name']}:" in line).split(": ", 1)[1]
    first, based = org_line.split(". ", 1)[0] + ".", f"The headquarters of {org['name']} are in {org['town']}."
    theirs_own = next(line for line in two_hop[1]["content"].splitlines() if f"] {founder['name']}:" in line)
    theirs_own = theirs_own.split(": ", 1)[1]
    assert founder["name"] in first and str(org["founded"]) in first and org["town"] != founder["town"]

    def cites(question, text):
        return grounded(question, two_hop + [{"role": "assistant", "content": text}])

    town_of_founder = f"In which town was the founder of {org['name']} born?"
    assert cites(town_of_founder, f"{theirs_own}\n<answer>{founder['town']}</answer>")
    assert not cites(town_of_founder, f"{based}\n<answer>{org['town']}</answer>")  # the organisation's town
    year_of_founder = f"In which year was the founder of {org['name']} born?"
    assert cites(year_of_founder, f"{first} {theirs_own}\n<answer>unknown</answer>")
    assert not cites(year_of_founder, f"{first} {theirs_own}\n<answer>{org['founded']}</answer>")  # the founding year
    completions = [reply(f"{own} No year of birth is given.\n<answer>unknown</answer>"), reply(f"{own}\n<answer>{year}</answer>")]
    assert grounding_reward([[], []], completions, question=[q["question"]] * 2) == [1.0, 0.0]
    with pytest.raises(ValueError, match="question"):
        grounding_reward([[], []], completions)
    # cite or abstain: a grounded answer stands, any other answer is recorded as unknown
    assert accepted_answer(town_question, reply(f"{own}\n<answer>{person['town']}</answer>")) == person["town"]
    assert accepted_answer(q["question"], reply(f"{own}\n<answer>{year}</answer>")) == "unknown"
    assert accepted_answer(q["question"], reply(own)) is None
    assert verified_exact_match_reward([[], [], []], completions + [reply(own)], answer=["unknown"] * 3,
                                       question=[q["question"]] * 3) == [1.0, 1.0, 0.0]
    assert verified_exact_match_reward([[]], [reply(f"{theirs}\n<answer>{year}</answer>")], answer=[year],
                                       question=[town_question]) == [0.0]
    with pytest.raises(ValueError, match="question"):
        verified_exact_match_reward([[], []], completions, answer=["unknown"] * 2)


def test_the_environment_modes_and_score(index, questions):
    q = next(q for q in questions if q["kind"] == "single_hop")
    agent, closed, rag = SearchEnv(index), SearchEnv(index, mode="closed_book"), SearchEnv(index, mode="rag")
    assert agent.toolbox_for(q).names == ["search"]
    assert closed.toolbox_for(q) is None and rag.toolbox_for(q) is None
    assert "Documents:" in rag.prompt(q)[1]["content"] and "Documents:" not in closed.prompt(q)[1]["content"]
    with pytest.raises(ValueError, match="mode"):
        SearchEnv(index, mode="oracle")
    right = Episode(prompt=[], answer=f"the {q['answer']}")
    wrong = Episode(prompt=[], answer=None)
    assert agent.score(q, right)["correct"] == 1.0 and agent.score(q, right)["f1"] == 1.0
    assert agent.score(q, wrong) == {"correct": 0.0, "f1": 0.0, "formatted": 0.0, "searches": 0.0, "grounded": 0.0}
    verified = SearchEnv(index, verify=True).score(q, right)  # right, but nothing cited: recorded as unknown
    assert verified["correct"] == 0.0 and verified["answered_correct"] == 1.0


def _episode(index, answer, searches):
    """An episode that searched `searches` (the tool's real replies) and answered `answer`."""
    from agentrl_lite.episode import Turn

    turns = []
    for query in searches:
        turns.append(Turn("model", 0, 0, "", tool_calls=[{"name": "search", "arguments": {"query": query}}]))
        turns.append(Turn("tool", 0, 0, "", tool_results=[index.search(query)]))
    turns.append(Turn("model", 0, 0, ""))
    return Episode(prompt=[], turns=turns, answer=answer)


def test_failure_kinds_and_what_was_retrieved(index, questions, world):
    from agentrl_lite.tasks.search import agent_queries, failure_kind, retrieved_titles

    q = next(q for q in questions if q["kind"] == "two_hop")
    other = next(p["name"] for p in world.people if p["name"] not in q["queries"])
    right = _episode(index, q["answer"], q["queries"])
    assert agent_queries(right) == q["queries"]
    assert retrieved_titles(right)[0] == q["queries"][0]
    assert failure_kind(q, right, index) == "right"
    assert failure_kind(q, _episode(index, "Nowhere", q["queries"]), index) == "retrieved but wrong answer"
    assert failure_kind(q, _episode(index, "Nowhere", [other]), index) == "gold never retrieved"
    assert failure_kind(q, _episode(index, "Nowhere", []), index) == "no search"
    assert failure_kind(q, _episode(index, "unknown", q["queries"]), index) == "gave up"
    assert failure_kind(q, _episode(index, None, q["queries"]), index) == "no answer"


def test_recall_at_k_of_gold_and_of_wrong_queries(index, questions):
    from agentrl_lite.tasks.search import recall_at_k

    q = next(q for q in questions if q["kind"] == "two_hop")
    assert recall_at_k(index, q["queries"], q["support"], 3) == 1.0
    assert recall_at_k(index, q["queries"][:1], q["support"], 3) == 0.5
    assert recall_at_k(index, ["zzzz"], q["support"], 3) == 0.0


def test_bm25s_keeps_jax_off_the_gpu(tmp_path):
    """bm25s runs a JAX top-k at import; JAX's first call on a GPU reserves 75% of its memory (105 GiB on an H200).
    A stand-in `jax` records the platform it was imported under: the course's import of bm25s must say cpu, and
    must leave a platform the user chose alone."""
    import os
    import subprocess
    import sys

    fake = tmp_path / "jax"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        "import os, pathlib\n"
        "pathlib.Path(os.environ['SEEN']).write_text(os.environ.get('JAX_PLATFORMS', '<unset>'))\n")
    (fake / "lax.py").write_text("def top_k(x, k):\n    return x[:k], list(range(k))\n")
    code = "from agentrl_lite.tools import SearchIndex; SearchIndex([{'id': 'd', 'title': 'Osk', 'text': 'a town'}])"
    for preset, expected in ((None, "cpu"), ("cuda", "cuda")):
        env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
        env |= {"PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]), "SEEN": str(tmp_path / "seen")}
        if preset:
            env["JAX_PLATFORMS"] = preset
        subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
        assert (tmp_path / "seen").read_text() == expected
