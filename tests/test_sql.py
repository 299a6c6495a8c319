"""Question answering over SQLite: the seeded database, the questions and their gold answers, the read-only `sql`
tool as a security boundary, and the environment."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from contextlib import closing

import pytest

from agentrl_lite.chat import ToolCall, extract_answer, format_tool_call, parse_tool_calls
from agentrl_lite.env import Environment
from agentrl_lite.episode import Episode, Turn
from agentrl_lite.tasks import DATA_DIR, read_jsonl
from agentrl_lite.tasks.sql import (
    KINDS,
    NO_RECORD,
    SCHEMA,
    SPLITS,
    SqlDatabase,
    SqlEnv,
    answer_text,
    build_database,
    demonstration,
    execution_match_reward,
    format_number,
    same_answer,
    shop_rows,
    sql_splits,
)
from agentrl_lite.tasks.sql.database import N_IDLE_CUSTOMERS, N_UNSOLD_PRODUCTS
from agentrl_lite.tasks.sql.questions import MAX_ANSWER_VALUES
from agentrl_lite.tasks.sql.tool import MAX_CELL_CHARS, MAX_OUTPUT_CHARS, MAX_QUERY_CHARS, MAX_ROWS
from agentrl_lite.tools import Toolbox


@pytest.fixture(scope="module")
def db():
    return SqlDatabase(seed=0)  # the course's database (course.data)


@pytest.fixture(scope="module")
def shop():
    """A writable in-memory copy of the same database, to compare the tool's replies with."""
    return build_database(seed=0)


@pytest.fixture(scope="module")
def splits():
    return sql_splits(seed=0)


def _dump(conn: sqlite3.Connection) -> list[str]:
    return list(conn.iterdump())


def _digest(db: SqlDatabase) -> str:
    return hashlib.sha256(db.path.read_bytes()).hexdigest()


# --- the database ------------------------------------------------------------------------------------------


def test_the_same_seed_builds_byte_identical_contents_in_memory_and_on_disk(tmp_path):
    first, again, other = _dump(build_database(3)), _dump(build_database(3)), _dump(build_database(4))
    assert first == again
    assert first != other
    assert _dump(build_database(3, tmp_path / "shop.sqlite")) == first
    with pytest.raises(FileExistsError, match="delete it"):
        build_database(3, tmp_path / "shop.sqlite")


def test_the_database_is_a_few_hundred_rows_with_unique_names_and_records_that_are_missing(shop):
    rows = shop_rows(0)
    assert list(rows) == list(SCHEMA)
    assert 300 <= sum(map(len, rows.values())) <= 1000
    for table in ("customers", "products"):
        names = [r[1] for r in rows[table]]
        assert len(set(names)) == len(names), f"two {table} share a name: a question about it would be ambiguous"
        assert not any("," in n or "'" in n for n in names)  # a comma would split an answer, a quote the SQL
    idle = shop.execute("SELECT COUNT(*) FROM customers WHERE id NOT IN (SELECT customer_id FROM orders)")
    unsold = shop.execute("SELECT COUNT(*) FROM products WHERE id NOT IN (SELECT product_id FROM order_items)")
    assert (idle.fetchone()[0], unsold.fetchone()[0]) == (N_IDLE_CUSTOMERS, N_UNSOLD_PRODUCTS)
    orphans = shop.execute("SELECT COUNT(*) FROM order_items WHERE order_id NOT IN (SELECT id FROM orders) "
                           "OR product_id NOT IN (SELECT id FROM products)").fetchone()[0]
    assert orphans == 0


# --- questions and answers ---------------------------------------------------------------------------------


def test_the_committed_questions_are_the_generators(splits):
    for split in SPLITS:
        assert read_jsonl(DATA_DIR / f"sql_{split}.jsonl") == splits[split], split


def test_every_gold_sql_gives_its_answer_on_the_database_and_through_the_tool(shop, db, splits):
    for q in (q for rows in splits.values() for q in rows):
        assert answer_text(shop.execute(q["gold_sql"]).fetchall()) == q["answer"], q
        reply = db.sql(q["gold_sql"])
        assert not reply.startswith("Error") and "cut" not in reply, (q, reply)


def test_splits_are_disjoint_large_enough_and_hold_every_kind(splits):
    texts = [q["question"] for rows in splits.values() for q in rows]
    assert len(texts) == len(set(texts)), "a question text is asked twice (within or across splits)"
    ids = [q["id"] for rows in splits.values() for q in rows]
    assert len(ids) == len(set(ids))
    assert len(splits["heldout"]) >= 100 and len(splits["validation"]) >= 40 and len(splits["train"]) >= 300
    for split, rows in splits.items():
        assert {q["kind"] for q in rows} == set(KINDS), split
        assert all(set(q) >= {"id", "kind", "question", "gold_sql", "answer"} for q in rows)


def test_answers_are_short_and_none_exactly_for_no_record_questions(splits):
    for q in (q for rows in splits.values() for q in rows):
        assert (q["answer"] == NO_RECORD) == (q["kind"] == "no_record"), q
        assert len(q["answer"].split(", ")) <= MAX_ANSWER_VALUES, q


def test_numbers_are_rounded_half_up_to_cents_without_trailing_zeros():
    assert [format_number(x) for x in (23.456, 12.5, 7.0, 10.015, -0.001, 1200)] == \
        ["23.46", "12.5", "7", "10.02", "0", "1200"]
    assert answer_text([]) == answer_text([(None,)]) == NO_RECORD
    assert answer_text([("Oslo",), ("Lyon",)]) == "Oslo, Lyon"
    assert answer_text([(0,)]) == "0"  # a count of nothing is a number, not a missing record


def test_execution_match_compares_values_not_their_form():
    assert same_answer("23.456", "23.46") and same_answer("$12.50", "12.5") and same_answer("7.00", "7")
    assert same_answer("lyon, Oslo", "Oslo, Lyon")  # a list in another order
    assert same_answer("Oslo, Oslo, Lyon", "Oslo, Lyon")  # repeats from a join without DISTINCT
    assert same_answer("The Copper Kettle.", "Copper Kettle") and same_answer("None", NO_RECORD)
    assert not same_answer("23.47", "23.46")
    assert not same_answer("Oslo", "Oslo, Lyon") and not same_answer("Oslo, Lyon, Cork", "Oslo, Lyon")
    assert not same_answer("0", NO_RECORD)
    assert not same_answer(None, NO_RECORD) and not same_answer("", NO_RECORD)
    assert not same_answer("1e30", "5") and not same_answer("Infinity", "5")  # too large for cents: read as text


# --- the sql tool: happy path and caps ---------------------------------------------------------------------


def test_a_query_returns_a_header_its_rows_and_their_count(db, shop):
    query = "SELECT name, city FROM customers WHERE city = 'Oslo' ORDER BY name"
    expected = shop.execute(query).fetchall()
    lines = db.sql(query).splitlines()
    assert lines[0] == "name | city"
    assert lines[1:-1] == [f"{name} | {city}" for name, city in expected]
    assert lines[-1] == f"({len(expected)} rows)"
    assert db.sql("SELECT COUNT(*) FROM orders").splitlines() == ["COUNT(*)", "160", "(1 row)"]
    assert db.sql("SELECT AVG(quantity), NULL, x'00ff' FROM order_items").splitlines()[1].split(" | ")[1:] == \
        ["NULL", "<blob of 2 bytes>"]


def test_a_legitimate_recursive_query_runs(db):
    reply = db.sql("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 10) SELECT SUM(n) FROM r")
    assert reply.splitlines()[1] == "55"


def test_rows_past_the_cap_are_cut_and_counted(db, shop):
    total = shop.execute("SELECT COUNT(*) FROM order_items").fetchone()[0]
    lines = db.sql("SELECT * FROM order_items").splitlines()
    assert total > MAX_ROWS
    assert len(lines) == 1 + MAX_ROWS + 1
    assert lines[-1].startswith(f"({MAX_ROWS} of {total} rows shown; the rest were cut.")
    assert SqlDatabase(max_rows=3).sql("SELECT * FROM order_items").splitlines()[-1].startswith(
        f"(3 of {total} rows shown")


def test_very_long_output_is_capped_in_characters(db):
    wide = "SELECT c.email || c.email || c.email AS e1, c.email || p.name AS e2, p.name || c.name || c.email AS e3 " \
           "FROM customers c, products p"
    reply = db.sql(wide)
    assert len(reply) <= MAX_OUTPUT_CHARS
    assert len(reply.splitlines()) < 1 + MAX_ROWS + 1  # the characters ran out before the rows did
    assert "rows shown; the rest were cut" in reply.splitlines()[-1]
    long_value = db.sql("SELECT group_concat(name, ' ') FROM customers").splitlines()[1]
    assert len(long_value) == MAX_CELL_CHARS and long_value.endswith("...")


# --- the sql tool: errors the model can repair, hostile queries contained --------------------------------


@pytest.mark.parametrize("query,expected", [
    ("SELECT nme FROM customers", "Error: no such column: nme"),
    ("SELEC name FROM customers", 'Error: near "SELEC": syntax error'),
    ("SELECT name FROM customer", "Error: no such table: customer"),
    ("", "Error: the query is empty"),
    ("   \n", "Error: the query is empty"),
    ("-- just a comment", "Error: the query has no statement to run"),
    ("SELECT " + "1 + " * MAX_QUERY_CHARS + "1", f"the limit is {MAX_QUERY_CHARS}"),
    (None, "Error: the query must be a string"),
    (42, "Error: the query must be a string"),
    (["SELECT 1"], "Error: the query must be a string"),
])
def test_mistakes_become_short_observations(db, query, expected):
    reply = db.sql(query)
    assert reply.startswith("Error:") and expected in reply and len(reply) < 300


HOSTILE = [
    ("INSERT INTO customers VALUES (999, 'Eve Mallory', 'eve@example.com', 'Oslo', 2024)", "INSERT on table customers"),
    ("REPLACE INTO products VALUES (1, 'Free Kettle', 'kitchen', 0.0)", "INSERT on table products"),
    ("UPDATE products SET price = 0", "UPDATE on table products"),
    ("DELETE FROM orders", "DELETE on table orders"),
    ("WITH doomed AS (SELECT id FROM orders) DELETE FROM orders WHERE id IN doomed", "DELETE on table orders"),
    ("DROP TABLE customers", "not allowed"),
    ("CREATE TABLE notes (x TEXT)", "not allowed"),
    ("CREATE TEMP TABLE notes AS SELECT 1", "not allowed"),
    ("CREATE INDEX by_city ON customers(city)", "not allowed"),
    ("ALTER TABLE customers ADD COLUMN vip INTEGER", "not allowed: ALTER TABLE"),
    ("DETACH DATABASE main", "not allowed: DETACH"),
    ("PRAGMA writable_schema = 1", "not allowed: PRAGMA writable_schema"),
    ("PRAGMA query_only = OFF", "not allowed: PRAGMA query_only"),
    ("PRAGMA journal_mode = DELETE", "not allowed: PRAGMA journal_mode"),
    ("PRAGMA table_info(customers)", "not allowed: PRAGMA table_info"),
    ("SELECT load_extension('libevil')", "not allowed: the function load_extension()"),
    ("SELECT fts3_tokenizer('simple')", "fts3_tokenizer"),  # refused, or missing where SQLite is built without FTS3
    ("BEGIN", "not allowed: a transaction"),
    ("SAVEPOINT s", "not allowed: a transaction"),
    ("VACUUM", "not allowed"),
    ("REINDEX", "not allowed: REINDEX"),
    ("ANALYZE", "not allowed"),
    ("SELECT 1; DROP TABLE customers", "only one statement per call"),
    ("SELECT name FROM customers; DELETE FROM orders", "only one statement per call"),
    ("SELECT randomblob(1000000000)", "string or blob too big"),
]


@pytest.mark.parametrize("query,expected", HOSTILE)
def test_hostile_queries_are_refused_and_leave_the_database_unchanged(db, shop, query, expected):
    before = _digest(db)
    reply = db.sql(query)
    assert reply.startswith("Error:") and expected in reply, reply
    assert _digest(db) == before
    with closing(sqlite3.connect(f"{db.path.as_uri()}?mode=ro", uri=True)) as conn:
        assert _dump(conn) == _dump(shop)


def test_attach_and_vacuum_into_create_no_file(db, tmp_path):
    for query in (f"ATTACH DATABASE '{tmp_path / 'other.sqlite'}' AS other",
                  f"VACUUM INTO '{tmp_path / 'copy.sqlite'}'"):
        assert db.sql(query).startswith("Error: not allowed: ATTACH"), query
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("query", [
    "SELECT count(*) FROM order_items a, order_items b, order_items c, order_items d",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
])
def test_runaway_queries_are_stopped_by_the_step_budget_and_by_the_clock(db, query):
    start = time.monotonic()
    reply = db.sql(query)
    assert time.monotonic() - start < 2.0  # the step budget: a few hundred milliseconds of SQLite's steps
    assert reply.startswith("Error: the query was stopped"), reply
    clock_only = SqlDatabase(max_steps=10**15, timeout_s=0.2)  # no step budget to speak of: the deadline stops it
    start = time.monotonic()
    reply = clock_only.sql(query)
    assert time.monotonic() - start < 2.0
    assert reply.startswith("Error: the query was stopped"), reply


def test_the_tool_runs_inside_a_toolbox(db):
    toolbox = Toolbox([db.sql])
    (schema,) = toolbox.schemas
    assert schema["function"]["name"] == "sql"
    assert schema["function"]["parameters"]["properties"]["query"]["type"] == "string"
    assert schema["function"]["parameters"]["required"] == ["query"]
    assert f"At most {MAX_ROWS} rows" in schema["function"]["parameters"]["properties"]["query"]["description"]
    assert toolbox.execute(ToolCall("sql", {"query": 5})).startswith("Error: sql: argument 'query' must be a string")
    calls, observations = toolbox.run(format_tool_call(ToolCall("sql", {"query": "SELECT COUNT(*) FROM products"})))
    assert len(calls) == 1 and observations == ["COUNT(*)\n40\n(1 row)"]


# --- the environment ---------------------------------------------------------------------------------------


def _episode(messages: list[dict[str, str]]) -> Episode:
    """An episode that wrote the assistant messages of `messages` and got its tool messages back."""
    turns = [Turn("prompt", 0, 0, "")]
    for m in messages:
        if m["role"] == "assistant":
            calls = [c.to_dict() for c in parse_tool_calls(m["content"]).calls]
            turns.append(Turn("model", 0, 0, m["content"], content=m["content"], tool_calls=calls))
        elif m["role"] == "tool":
            turns.append(Turn("tool", 0, 0, "", tool_results=[m["content"]]))
    return Episode(prompt=[], turns=turns, answer=extract_answer(turns[-1].content))


def toolbox_reply(db: SqlDatabase, text: str) -> str:
    """The tool's reply to a model turn with one `<tool_call>` block, as the rollout gets it."""
    return Toolbox([db.sql]).run(text)[1][0]


def _call(query: str) -> dict[str, str]:
    return {"role": "assistant", "content": format_tool_call(ToolCall("sql", {"query": query}))}


def test_the_environment_prompt_and_tools(db, splits):
    env = SqlEnv(db)
    assert isinstance(env, Environment)
    task = splits["heldout"][0]
    system, user = env.prompt(task)
    assert user == {"role": "user", "content": task["question"]}
    for table, columns in SCHEMA.items():
        assert table in system["content"]
        assert all(c.split()[0] in system["content"] for c in columns if not c.startswith("PRIMARY KEY"))
    assert "<answer>" in system["content"] and f"<answer>{NO_RECORD}</answer>" in system["content"]
    assert env.toolbox_for(task).names == ["sql"]


def test_the_environment_scores_a_right_and_a_wrong_episode(db, splits):
    env = SqlEnv(db)
    task = next(q for q in splits["heldout"] if q["kind"] == "join" and ", " in q["answer"])
    reversed_answer = ", ".join(reversed(task["answer"].split(", ")))
    typo = "SELECT nme FROM customers"
    right = _episode([_call(typo), {"role": "tool", "content": db.sql(typo)},
                      _call(task["gold_sql"]), {"role": "tool", "content": db.sql(task["gold_sql"])},
                      {"role": "assistant", "content": f"<answer>{reversed_answer}</answer>"}])
    assert env.score(task, right) == {"correct": 1.0, "formatted": 1.0, "sql_calls": 2.0, "sql_errors": 1.0,
                                      "errored": 1.0, "malformed_calls": 0.0, "repaired": 1.0}
    first_only = task["answer"].split(", ")[0]
    wrong = _episode([_call(task["gold_sql"]), {"role": "tool", "content": db.sql(task["gold_sql"])},
                      {"role": "assistant", "content": f"<answer>{first_only}</answer>"}])
    assert env.score(task, wrong) == {"correct": 0.0, "formatted": 1.0, "sql_calls": 1.0, "sql_errors": 0.0,
                                      "errored": 0.0, "malformed_calls": 0.0, "repaired": 0.0}
    broken = "<tool_call>{not json</tool_call>"
    unrepaired = _episode([_call(task["gold_sql"]), {"role": "tool", "content": db.sql(task["gold_sql"])},
                           {"role": "assistant", "content": broken},
                           {"role": "tool", "content": toolbox_reply(db, broken)},
                           {"role": "assistant", "content": f"<answer>{task['answer']}</answer>"}])
    score = env.score(task, unrepaired)
    assert (score["malformed_calls"], score["sql_errors"], score["repaired"]) == (1.0, 1.0, 0.0), \
        "an error after the last good reply is not a repair"
    unformatted = _episode([{"role": "assistant", "content": task["answer"]}])
    assert env.score(task, unformatted)["correct"] == 0.0 and env.score(task, unformatted)["formatted"] == 0.0


def test_the_reward_reads_the_policys_answer_only():
    gold = ["Oslo, Lyon", NO_RECORD, "12.5"]
    completions = [
        [{"role": "assistant", "content": "<answer>Lyon, Oslo</answer>"}],
        [{"role": "tool", "content": "<answer>none</answer>"}, {"role": "assistant", "content": "no idea"}],
        "<answer>12.50</answer>",
    ]
    assert execution_match_reward([None] * 3, completions, answer=gold) == [1.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="answer"):
        execution_match_reward([None], completions[:1])


def test_every_kinds_demonstration_is_the_tools_real_reply_and_scores_correct(db, splits):
    env = SqlEnv(db)
    for kind in KINDS:
        task = next(q for q in splits["train"] if q["kind"] == kind)
        messages = demonstration(task, db)
        assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
        assert parse_tool_calls(messages[1]["content"]).calls == [ToolCall("sql", {"query": task["gold_sql"]})]
        assert messages[2]["content"] == db.sql(task["gold_sql"])
        assert env.score(task, _episode(messages[1:]))["correct"] == 1.0, task
        assert execution_match_reward([None], [messages[1:]], answer=[task["answer"]]) == [1.0]


def test_the_committed_demonstrations_cover_every_kind_and_are_the_generators(db, splits):
    demos = read_jsonl(DATA_DIR / "sql_sft.jsonl")
    assert {d["kind"] for d in demos} == set(KINDS)
    train = {q["id"]: q for q in splits["train"]}
    for d in demos:
        task = train[d["id"]]  # demonstrations are training questions
        assert d["messages"] == demonstration(task, db)
