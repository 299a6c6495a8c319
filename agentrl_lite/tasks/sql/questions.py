"""Questions over the shop database: templates filled with values drawn from the database, each with its gold
SQL and the gold answer that SQL returns when executed, split into train / validation / held-out.

Four kinds, by the skill the question needs:
- lookup: one table ("Which city does Maya Okafor live in?");
- join: two to four tables, no aggregation ("Which products are in order 17?");
- aggregate: COUNT / SUM / AVG / MAX with a filter or GROUP BY, joined or not ("How many orders has Maya
  Okafor placed?", "Which customers in Oslo have placed at least 3 orders?");
- no_record: the question names something the database does not hold (a customer who does not exist, an order
  number past the last one) or a relation that is empty (a customer who never ordered); the answer is
  `answers.NO_RECORD`.

A question is kept only if it is answerable and unambiguous: names are unique in the database, a list answer has
at most `MAX_ANSWER_VALUES` values, no number lies on a rounding tie (`answers.is_rounding_tie`), and the answer
is `NO_RECORD` exactly when the template's kind is no_record. Splits are dealt per template (every template
appears in every split) and share no question text.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentrl_lite.tasks.sql.answers import NO_RECORD, answer_text, is_rounding_tie
from agentrl_lite.tasks.sql.database import ADJECTIVES, FIRST_NAMES, LAST_NAMES, PRODUCT_NOUNS, build_database

KINDS = ("lookup", "join", "aggregate", "no_record")
SPLITS = ("train", "validation", "heldout")
PER_TEMPLATE = 32
"""questions kept per template (fewer when the database supports fewer)"""
HELDOUT_SHARE = 0.25
"""share of each template's questions held out"""
VALIDATION_SHARE = 0.15
"""share of each template's questions for validation (tuning)"""
MAX_ANSWER_VALUES = 6
"""longest list answer"""

Values = Callable[[sqlite3.Connection, random.Random], list[dict[str, Any]]]
"""the values a template is filled with: one dict per question"""

_CUSTOMERS_WHO_ORDERED = "SELECT name FROM customers WHERE id IN (SELECT customer_id FROM orders)"
_JOIN_ORDER_CUSTOMER = "FROM orders o JOIN customers c ON c.id = o.customer_id"
_JOIN_ITEM_PRODUCT = "FROM order_items oi JOIN products p ON p.id = oi.product_id"
_JOIN_CUSTOMER_PRODUCT = ("FROM customers c JOIN orders o ON o.customer_id = c.id "
                          "JOIN order_items oi ON oi.order_id = o.id JOIN products p ON p.id = oi.product_id")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")


def _rows(sql: str) -> Values:
    """Values read from the database: one dict per row of `sql`, keyed by column name."""
    def values(conn: sqlite3.Connection, rng: random.Random) -> list[dict[str, Any]]:
        cursor = conn.execute(sql)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor]
    return values


def _missing_customers(conn: sqlite3.Connection, rng: random.Random) -> list[dict[str, Any]]:
    """Names made from the same word lists as the customers', that no customer has."""
    taken = {name for (name,) in conn.execute("SELECT name FROM customers")}
    names = [f"{first} {last}" for first in FIRST_NAMES for last in LAST_NAMES if f"{first} {last}" not in taken]
    return [{"name": name} for name in rng.sample(names, 2 * PER_TEMPLATE)]


def _missing_products(conn: sqlite3.Connection, rng: random.Random) -> list[dict[str, Any]]:
    """Product names made like the catalogue's, that no product has."""
    taken = {name for (name,) in conn.execute("SELECT name FROM products")}
    names = [f"{adjective} {noun}" for adjective in ADJECTIVES for nouns, _ in PRODUCT_NOUNS.values()
             for noun in nouns if f"{adjective} {noun}" not in taken]
    return [{"product": name} for name in rng.sample(names, 2 * PER_TEMPLATE)]


def _missing_orders(conn: sqlite3.Connection, rng: random.Random) -> list[dict[str, Any]]:
    """Order numbers past the last order."""
    (last,) = conn.execute("SELECT MAX(id) FROM orders").fetchone()
    return [{"order_id": last + i} for i in range(1, 3 * PER_TEMPLATE)]


def _months(conn: sqlite3.Connection, rng: random.Random) -> list[dict[str, Any]]:
    """Every month with orders, as a name ("March 2024") and a prefix of order_date ("2024-03")."""
    months = [m for (m,) in conn.execute("SELECT DISTINCT substr(order_date, 1, 7) FROM orders")]
    return [{"month": month, "month_name": f"{_MONTHS[int(month[5:]) - 1]} {month[:4]}"} for month in months]


@dataclass(frozen=True)
class Template:
    """One question shape: its text and gold SQL with `{field}` slots, filled from `values`."""

    key: str
    kind: str
    question: str
    sql: str
    values: Values


TEMPLATES: tuple[Template, ...] = (
    # lookup: one table
    Template("customer_city", "lookup", "Which city does {name} live in?",
             "SELECT city FROM customers WHERE name = '{name}'", _rows("SELECT name FROM customers")),
    Template("customer_email", "lookup", "What is the email address of {name}?",
             "SELECT email FROM customers WHERE name = '{name}'", _rows("SELECT name FROM customers")),
    Template("customer_signup", "lookup", "In which year did {name} sign up?",
             "SELECT signup_year FROM customers WHERE name = '{name}'", _rows("SELECT name FROM customers")),
    Template("product_price", "lookup", "How much does the {product} cost?",
             "SELECT price FROM products WHERE name = '{product}'", _rows("SELECT name AS product FROM products")),
    Template("product_category", "lookup", "Which category is the {product} in?",
             "SELECT category FROM products WHERE name = '{product}'",
             _rows("SELECT name AS product FROM products")),
    Template("city_customers", "lookup", "Which customers live in {city}?",
             "SELECT name FROM customers WHERE city = '{city}' ORDER BY name",
             _rows("SELECT DISTINCT city FROM customers")),
    Template("order_date", "lookup", "On which date was order {order_id} placed?",
             "SELECT order_date FROM orders WHERE id = {order_id}", _rows("SELECT id AS order_id FROM orders")),
    Template("order_status", "lookup", "What is the status of order {order_id}?",
             "SELECT status FROM orders WHERE id = {order_id}", _rows("SELECT id AS order_id FROM orders")),
    Template("cheap_products", "lookup", "Which {category} products cost less than {price} dollars?",
             "SELECT name FROM products WHERE category = '{category}' AND price < {price} ORDER BY name",
             _rows("SELECT DISTINCT category, t.price FROM products, "
                   "(SELECT 10 AS price UNION SELECT 20 UNION SELECT 30 UNION SELECT 40 UNION SELECT 50) t")),
    # join: two to four tables
    Template("order_customer", "join", "Who placed order {order_id}?",
             f"SELECT c.name {_JOIN_ORDER_CUSTOMER} WHERE o.id = {{order_id}}",
             _rows("SELECT id AS order_id FROM orders")),
    Template("order_city", "join", "In which city does the customer who placed order {order_id} live?",
             f"SELECT c.city {_JOIN_ORDER_CUSTOMER} WHERE o.id = {{order_id}}",
             _rows("SELECT id AS order_id FROM orders")),
    Template("order_products", "join", "Which products are in order {order_id}?",
             f"SELECT p.name {_JOIN_ITEM_PRODUCT} WHERE oi.order_id = {{order_id}} ORDER BY p.name",
             _rows("SELECT id AS order_id FROM orders")),
    Template("customer_products", "join", "Which products has {name} ordered?",
             f"SELECT DISTINCT p.name {_JOIN_CUSTOMER_PRODUCT} WHERE c.name = '{{name}}' ORDER BY p.name",
             _rows(_CUSTOMERS_WHO_ORDERED)),
    Template("product_customers", "join", "Which customers have ordered the {product}?",
             f"SELECT DISTINCT c.name {_JOIN_CUSTOMER_PRODUCT} WHERE p.name = '{{product}}' ORDER BY c.name",
             _rows("SELECT name AS product FROM products")),
    Template("customer_order_dates", "join", "On which dates did {name} place orders?",
             f"SELECT DISTINCT o.order_date {_JOIN_ORDER_CUSTOMER} WHERE c.name = '{{name}}' ORDER BY o.order_date",
             _rows(_CUSTOMERS_WHO_ORDERED)),
    Template("order_categories", "join", "Which product categories are in order {order_id}?",
             f"SELECT DISTINCT p.category {_JOIN_ITEM_PRODUCT} WHERE oi.order_id = {{order_id}} ORDER BY p.category",
             _rows("SELECT id AS order_id FROM orders")),
    # aggregate: COUNT / SUM / AVG / MAX with a filter or GROUP BY
    Template("customer_order_count", "aggregate", "How many orders has {name} placed?",
             f"SELECT COUNT(*) {_JOIN_ORDER_CUSTOMER} WHERE c.name = '{{name}}'",
             _rows("SELECT name FROM customers")),
    Template("city_customer_count", "aggregate", "How many customers live in {city}?",
             "SELECT COUNT(*) FROM customers WHERE city = '{city}'", _rows("SELECT DISTINCT city FROM customers")),
    Template("category_average_price", "aggregate",
             "What is the average price of the products in the {category} category?",
             "SELECT AVG(price) FROM products WHERE category = '{category}'",
             _rows("SELECT DISTINCT category FROM products")),
    Template("category_max_price", "aggregate", "What is the highest price of a product in the {category} category?",
             "SELECT MAX(price) FROM products WHERE category = '{category}'",
             _rows("SELECT DISTINCT category FROM products")),
    Template("product_units", "aggregate", "How many units of the {product} have been ordered in total?",
             f"SELECT SUM(oi.quantity) {_JOIN_ITEM_PRODUCT} WHERE p.name = '{{product}}'",
             _rows("SELECT name AS product FROM products WHERE id IN (SELECT product_id FROM order_items)")),
    Template("product_customer_count", "aggregate", "How many different customers have ordered the {product}?",
             f"SELECT COUNT(DISTINCT c.id) {_JOIN_CUSTOMER_PRODUCT} WHERE p.name = '{{product}}'",
             _rows("SELECT name AS product FROM products")),
    Template("month_order_count", "aggregate", "How many orders were placed in {month_name}?",
             "SELECT COUNT(*) FROM orders WHERE order_date LIKE '{month}-%'", _months),
    Template("status_order_count", "aggregate", "How many orders have the status '{status}'?",
             "SELECT COUNT(*) FROM orders WHERE status = '{status}'", _rows("SELECT DISTINCT status FROM orders")),
    Template("order_total", "aggregate",
             "What is the total price of order {order_id}, counting each item's quantity times its price?",
             f"SELECT SUM(oi.quantity * p.price) {_JOIN_ITEM_PRODUCT} WHERE oi.order_id = {{order_id}}",
             _rows("SELECT id AS order_id FROM orders")),
    Template("customer_units", "aggregate", "How many items has {name} ordered in total, counting quantities?",
             f"SELECT SUM(oi.quantity) {_JOIN_CUSTOMER_PRODUCT} WHERE c.name = '{{name}}'",
             _rows(_CUSTOMERS_WHO_ORDERED)),
    Template("frequent_customers", "aggregate", "Which customers in {city} have placed at least {n} orders?",
             f"SELECT c.name {_JOIN_ORDER_CUSTOMER} WHERE c.city = '{{city}}' GROUP BY c.id "
             "HAVING COUNT(*) >= {n} ORDER BY c.name",
             _rows("SELECT DISTINCT city, t.n FROM customers, (SELECT 2 AS n UNION SELECT 3 UNION SELECT 4) t")),
    # no_record: nothing in the database matches
    Template("missing_customer_city", "no_record", "Which city does {name} live in?",
             "SELECT city FROM customers WHERE name = '{name}'", _missing_customers),
    Template("missing_customer_email", "no_record", "What is the email address of {name}?",
             "SELECT email FROM customers WHERE name = '{name}'", _missing_customers),
    Template("missing_product_price", "no_record", "How much does the {product} cost?",
             "SELECT price FROM products WHERE name = '{product}'", _missing_products),
    Template("missing_order_customer", "no_record", "Who placed order {order_id}?",
             f"SELECT c.name {_JOIN_ORDER_CUSTOMER} WHERE o.id = {{order_id}}", _missing_orders),
    Template("missing_order_date", "no_record", "On which date was order {order_id} placed?",
             "SELECT order_date FROM orders WHERE id = {order_id}", _missing_orders),
    Template("idle_customer_products", "no_record", "Which products has {name} ordered?",
             f"SELECT DISTINCT p.name {_JOIN_CUSTOMER_PRODUCT} WHERE c.name = '{{name}}' ORDER BY p.name",
             _rows("SELECT name FROM customers WHERE id NOT IN (SELECT customer_id FROM orders)")),
    Template("unsold_product_customers", "no_record", "Which customers have ordered the {product}?",
             f"SELECT DISTINCT c.name {_JOIN_CUSTOMER_PRODUCT} WHERE p.name = '{{product}}' ORDER BY c.name",
             _rows("SELECT name AS product FROM products WHERE id NOT IN (SELECT product_id FROM order_items)")),
)


def _fill(template: Template, values: dict[str, Any]) -> tuple[str, str]:
    """The question and gold SQL for one set of values (quotes in a value doubled for SQL)."""
    quoted = {k: str(v).replace("'", "''") for k, v in values.items()}
    return template.question.format(**values), template.sql.format(**quoted)


def _answerable(template: Template, rows: list[tuple]) -> bool:
    """The rows make an unambiguous answer of the template's kind (see the module docstring)."""
    values = [row[0] for row in rows if row[0] is not None]
    if (answer_text(rows) == NO_RECORD) != (template.kind == "no_record"):
        return False
    return len(values) <= MAX_ANSWER_VALUES and not any(isinstance(v, float) and is_rounding_tie(v) for v in values)


def template_questions(template: Template, conn: sqlite3.Connection, rng: random.Random) -> list[dict[str, Any]]:
    """Up to `PER_TEMPLATE` answerable questions of one template, in a random order, answers by executing the
    gold SQL on `conn`."""
    candidates = template.values(conn, rng)
    rng.shuffle(candidates)
    questions = []
    for values in candidates:
        question, sql = _fill(template, values)
        rows = conn.execute(sql).fetchall()
        if _answerable(template, rows):
            questions.append({"kind": template.kind, "template": template.key, "question": question,
                              "gold_sql": sql, "answer": answer_text(rows)})
        if len(questions) == PER_TEMPLATE:
            break
    return questions


def sql_splits(seed: int = 0) -> dict[str, list[dict[str, Any]]]:
    """The questions over the database of `seed`, split into train / validation / held-out.

    Each template's questions are dealt in their random order: the first `HELDOUT_SHARE` to held-out, the next
    `VALIDATION_SHARE` to validation, the rest to train. No question text is asked twice: a template's values
    are distinct, and the templates that share wording (a lookup and its no_record twin) never share values.
    Fields: id, kind, template, question, gold_sql, answer.
    """
    conn = build_database(seed)
    rng = random.Random(seed)
    splits: dict[str, list[dict[str, Any]]] = {split: [] for split in SPLITS}
    for template in TEMPLATES:
        questions = template_questions(template, conn, rng)
        n_heldout = round(HELDOUT_SHARE * len(questions))
        n_validation = round(VALIDATION_SHARE * len(questions))
        splits["heldout"] += questions[:n_heldout]
        splits["validation"] += questions[n_heldout:n_heldout + n_validation]
        splits["train"] += questions[n_heldout + n_validation:]
    conn.close()
    return {split: [{"id": f"sql-{split}-{i:04d}", **q} for i, q in enumerate(rows)] for split, rows in splits.items()}
