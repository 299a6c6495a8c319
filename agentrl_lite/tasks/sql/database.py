"""The shop database: four related tables generated from a seed and written with `sqlite3`.

    customers(id, name, email, city, signup_year)
    products(id, name, category, price)
    orders(id, customer_id → customers.id, order_date, status)
    order_items(order_id → orders.id, product_id → products.id, quantity)

Everything comes from `random.Random(seed)` and the small word lists below (no downloads), so one seed gives
byte-identical contents (`Connection.iterdump()`) on every machine. Names are unique, so a question that names a
customer or a product has one answer. Some customers never ordered and some products were never sold: questions
about them have no matching record. About 600 rows in all; building takes a few milliseconds, which is why no
database file is committed: it is rebuilt from its seed where it is needed.
"""

from __future__ import annotations

import datetime
import random
import re
import sqlite3
from pathlib import Path

FIRST_NAMES = ("Maya", "Omar", "Lena", "Kofi", "Ines", "Ravi", "Yuki", "Tomas", "Amara", "Chen", "Sofia", "Jonas",
               "Priya", "Mateo", "Hana", "Felix", "Zainab", "Lucas", "Elif", "Noah", "Aisha", "Diego", "Mira",
               "Oskar", "Leila", "Ivan", "Nora", "Samir", "Clara", "Kenji")
LAST_NAMES = ("Okafor", "Silva", "Novak", "Haddad", "Lindqvist", "Moreau", "Tanaka", "Kowalski", "Mensah", "Rossi",
              "Fischer", "Petrov", "Nakamura", "Alvarez", "Larsen", "Dubois", "Kaur", "Byrne", "Yilmaz", "Costa",
              "Weber", "Jansen", "Ito", "Murphy", "Sato", "Varga", "Horvat", "Quinn", "Ortiz", "Berg")
CITIES = ("Lisbon", "Oslo", "Nairobi", "Osaka", "Lyon", "Porto", "Krakow", "Accra", "Valencia", "Tampere", "Cork",
          "Graz")
PRODUCT_NOUNS = {
    # category: (nouns, lowest and highest whole-dollar price)
    "kitchen": (("Kettle", "Teapot", "Skillet", "Cutting Board", "Ladle", "Mixing Bowl", "Colander", "Pepper Mill"),
                (6, 60)),
    "garden": (("Trowel", "Watering Can", "Planter", "Hose Reel", "Pruning Shears", "Bird Feeder", "Seed Tray",
                "Wheelbarrow"), (4, 90)),
    "office": (("Desk Lamp", "Notebook", "Stapler", "Fountain Pen", "Letter Tray", "Desk Organizer", "Paper Shredder",
                "Bookend"), (3, 120)),
    "outdoor": (("Tent", "Lantern", "Backpack", "Sleeping Bag", "Camping Stove", "Water Bottle", "Hammock",
                 "Compass"), (9, 250)),
    "toys": (("Kite", "Puzzle", "Spinning Top", "Building Blocks", "Rocking Horse", "Marble Run", "Toy Train",
              "Puppet"), (4, 70)),
}
CATEGORIES = tuple(PRODUCT_NOUNS)
ADJECTIVES = ("Copper", "Cedar", "Linen", "Amber", "Slate", "Harbor", "Meadow", "Summit", "Willow", "Coral", "Birch",
              "Granite", "Indigo", "Maple", "Juniper", "Saffron")
STATUSES = ("delivered", "shipped", "pending", "cancelled")
STATUS_WEIGHTS = (0.65, 0.12, 0.08, 0.15)
FIRST_ORDER_DATE = datetime.date(2023, 1, 1)
ORDER_DAYS = 731
"""orders are placed on one of the 731 days of 2023 and 2024"""

N_CUSTOMERS = 60
N_PRODUCTS = 40
N_ORDERS = 160
N_IDLE_CUSTOMERS = 8
"""customers who never placed an order"""
N_UNSOLD_PRODUCTS = 4
"""products that are in no order"""

SCHEMA: dict[str, tuple[str, ...]] = {
    "customers": ("id INTEGER PRIMARY KEY", "name TEXT NOT NULL UNIQUE", "email TEXT NOT NULL UNIQUE",
                  "city TEXT NOT NULL", "signup_year INTEGER NOT NULL"),
    "products": ("id INTEGER PRIMARY KEY", "name TEXT NOT NULL UNIQUE", "category TEXT NOT NULL",
                 "price REAL NOT NULL"),
    "orders": ("id INTEGER PRIMARY KEY", "customer_id INTEGER NOT NULL REFERENCES customers(id)",
               "order_date TEXT NOT NULL", "status TEXT NOT NULL"),
    "order_items": ("order_id INTEGER NOT NULL REFERENCES orders(id)",
                    "product_id INTEGER NOT NULL REFERENCES products(id)", "quantity INTEGER NOT NULL",
                    "PRIMARY KEY (order_id, product_id)"),
}
"""table → column definitions, in the order the tables are created and filled"""

_REFERENCE = re.compile(r"^(\w+) .*REFERENCES (\w+)\((\w+)\)")


def shop_rows(seed: int = 0) -> dict[str, list[tuple]]:
    """The rows of every table (`SCHEMA` order), generated from `seed` alone."""
    rng = random.Random(seed)
    names = rng.sample([f"{first} {last}" for first in FIRST_NAMES for last in LAST_NAMES], N_CUSTOMERS)
    customers = [(i, name, name.lower().replace(" ", ".") + "@example.com", rng.choice(CITIES),
                  rng.randint(2018, 2024)) for i, name in enumerate(names, 1)]
    products = []
    for category, (nouns, (low, high)) in PRODUCT_NOUNS.items():
        adjectives = rng.sample(ADJECTIVES, len(nouns))
        for adjective, noun in zip(adjectives, nouns, strict=True):
            price = round(rng.randint(low, high) + rng.choice((0.0, 0.49, 0.5, 0.95, 0.99)), 2)
            products.append((len(products) + 1, f"{adjective} {noun}", category, price))
    buyers = rng.sample([c[0] for c in customers], N_CUSTOMERS - N_IDLE_CUSTOMERS)
    regulars = buyers[: len(buyers) // 4]  # a quarter of the buyers place most of the other orders
    placers = buyers + [rng.choice(regulars) if rng.random() < 0.5 else rng.choice(buyers)
                        for _ in range(N_ORDERS - len(buyers))]  # every buyer places at least one order
    rng.shuffle(placers)
    sold = sorted(rng.sample([p[0] for p in products], N_PRODUCTS - N_UNSOLD_PRODUCTS))
    dates = sorted(FIRST_ORDER_DATE + datetime.timedelta(days=rng.randrange(ORDER_DAYS)) for _ in range(N_ORDERS))
    orders, items = [], []
    for i, (date, customer) in enumerate(zip(dates, placers, strict=True), 1):  # ids increase with the date
        orders.append((i, customer, date.isoformat(), rng.choices(STATUSES, STATUS_WEIGHTS)[0]))
        for product in sorted(rng.sample(sold, rng.choice((1, 1, 2, 2, 3, 4)))):
            items.append((i, product, rng.choice((1, 1, 1, 2, 2, 3, 5))))
    for product in sold:  # every product meant to be sold is in at least one order
        if not any(item[1] == product for item in items):
            items.append((rng.randint(1, N_ORDERS), product, 1))
    items.sort()
    return {"customers": customers, "products": products, "orders": orders, "order_items": items}


def build_database(seed: int = 0, path: str | Path | None = None) -> sqlite3.Connection:
    """The shop database of `seed`, built in memory (path None) or into a new file at `path`; returns an open,
    writable connection to it (the `sql` tool opens its own read-only one, `tool.SqlDatabase`)."""
    if path is not None and Path(path).exists():
        raise FileExistsError(f"{path} exists; build_database writes a new file (delete it, or choose another path)")
    conn = sqlite3.connect(":memory:" if path is None else str(path))
    with conn:  # one transaction: all rows or none
        for table, columns in SCHEMA.items():
            conn.execute(f"CREATE TABLE {table} ({', '.join(columns)})")
        for table, rows in shop_rows(seed).items():
            conn.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    return conn


def schema_text() -> str:
    """The schema as the agent is shown it: each table's columns, how the tables join, and the values of the
    columns a question filters on by name."""
    tables = [f"{table}({', '.join(c.split()[0] for c in columns if not c.startswith('PRIMARY KEY'))})"
              for table, columns in SCHEMA.items()]
    joins = [f"{table}.{m.group(1)} = {m.group(2)}.{m.group(3)}" for table, columns in SCHEMA.items()
             for c in columns if (m := _REFERENCE.match(c))]
    return "\n".join([
        *tables,
        f"Joins: {'; '.join(joins)}.",
        f"products.category is one of: {', '.join(CATEGORIES)}. products.price is in dollars.",
        f"orders.status is one of: {', '.join(STATUSES)}. orders.order_date is written 'YYYY-MM-DD'.",
    ])
