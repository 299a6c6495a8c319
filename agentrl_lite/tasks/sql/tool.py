"""The `sql` tool: one read-only query on the shop database per call, behind a security boundary.

The queries are written by the policy, so during RL the tool runs whatever a model samples: typos, a DROP TABLE,
a join without a condition over four tables, a recursive CTE that never ends. Each call opens its own connection
and is contained by five independent layers, so that no single mistake lets a query through:

1. the file is opened read-only (URI `mode=ro`), `PRAGMA query_only` is on, and the file itself is read-only;
2. an authorizer (`Connection.set_authorizer`) allows only reading: SELECT, reading columns, recursive CTEs and
   functions other than `DENIED_FUNCTIONS`. Everything else (INSERT, UPDATE, DELETE, CREATE, DROP, ALTER,
   ATTACH, DETACH, PRAGMA, transactions, REINDEX, ANALYZE, VACUUM) is refused when the query is compiled;
3. a progress handler (`Connection.set_progress_handler`) stops a query after `max_steps` virtual-machine
   steps or `timeout_s` seconds, whichever comes first; the step budget makes the verdict on a query the same on
   every machine, the clock is a backstop;
4. SQLite's own limits cap a value's length and a LIKE pattern's, and allow no attached database;
5. only one statement per call; at most `max_rows` rows and `max_output_chars` characters come back, with
   a note of how many rows were cut.

`SqlDatabase.sql` never raises: every failure is an `Error: ...` observation the model can read and repair in
its next turn, e.g. `Error: no such column: nme`.
"""

from __future__ import annotations

import sqlite3
import tempfile
import time
from pathlib import Path

from agentrl_lite.tasks.sql.database import build_database

MAX_QUERY_CHARS = 2000
"""longer queries are rejected before SQLite sees them"""
MAX_ROWS = 20
"""rows shown per call; the others are counted and reported as cut"""
MAX_COUNTED_ROWS = 10_000
"""rows past the shown ones counted for the note on what was cut; beyond, it says "at least"."""
MAX_OUTPUT_CHARS = 1500
"""characters of one observation"""
MAX_CELL_CHARS = 100
"""characters of one value in the observation"""
MAX_STEPS = 5_000_000
"""SQLite virtual-machine steps per call (a few hundred milliseconds; the course's questions need under 100,000)"""
TIMEOUT_S = 1.0
"""wall-clock seconds per call"""
MAX_VALUE_BYTES = 100_000
"""longest string or blob SQLite may build (`randomblob(1e9)` would otherwise allocate a gigabyte)"""
MAX_LIKE_PATTERN = 200
"""longest LIKE or GLOB pattern (a long pattern of wildcards is slow inside one step, where no handler runs)"""
STEP_INTERVAL = 1000
"""the progress handler runs every this many steps"""

DENIED_FUNCTIONS = frozenset({"load_extension", "fts3_tokenizer"})
"""functions refused although reading: they load code or reveal memory addresses"""
_ALLOWED_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE,
                              sqlite3.SQLITE_FUNCTION})
_ACTION_NAMES = {getattr(sqlite3, f"SQLITE_{name}"): name.replace("_", " ") for name in (
    "INSERT", "UPDATE", "DELETE", "CREATE_TABLE", "CREATE_TEMP_TABLE", "CREATE_INDEX", "CREATE_TEMP_INDEX",
    "CREATE_VIEW", "CREATE_TEMP_VIEW", "CREATE_TRIGGER", "CREATE_TEMP_TRIGGER", "CREATE_VTABLE", "DROP_TABLE",
    "DROP_TEMP_TABLE", "DROP_INDEX", "DROP_TEMP_INDEX", "DROP_VIEW", "DROP_TEMP_VIEW", "DROP_TRIGGER",
    "DROP_TEMP_TRIGGER", "DROP_VTABLE", "ALTER_TABLE", "ATTACH", "DETACH", "REINDEX", "ANALYZE")}


class _Guard:
    """The authorizer and the progress handler of one call, and what they stopped."""

    def __init__(self, max_steps: int, timeout_s: float) -> None:
        self.max_steps = max_steps
        self.deadline = time.monotonic() + timeout_s
        self.steps = 0
        self.denied: str | None = None
        """what the authorizer refused first, in words (e.g. "PRAGMA writable_schema")"""
        self.stopped = False
        """the progress handler stopped the query"""

    def authorize(self, action: int, arg1: str | None, arg2: str | None, database: str | None,
                  source: str | None) -> int:
        if action in _ALLOWED_ACTIONS and not (action == sqlite3.SQLITE_FUNCTION and arg2 in DENIED_FUNCTIONS):
            return sqlite3.SQLITE_OK
        if self.denied is None:
            self.denied = _denied_action(action, arg1, arg2)
        return sqlite3.SQLITE_DENY

    def progress(self) -> int:
        """Nonzero (stop the query) once the step budget or the deadline is spent."""
        self.steps += STEP_INTERVAL
        if self.steps > self.max_steps or time.monotonic() > self.deadline:
            self.stopped = True
        return int(self.stopped)


def _denied_action(action: int, arg1: str | None, arg2: str | None) -> str:
    """A refused authorizer action in words: what the query tried to do."""
    if action == sqlite3.SQLITE_FUNCTION:
        return f"the function {arg2}()"
    if action == sqlite3.SQLITE_PRAGMA:
        return f"PRAGMA {arg1}"
    if action in (sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT):
        return "a transaction (BEGIN, COMMIT, ROLLBACK, SAVEPOINT)"
    if action in (sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE):
        return f"{_ACTION_NAMES[action]} on table {arg1}"  # CREATE and DROP write to the table sqlite_master
    return _ACTION_NAMES.get(action, f"the operation with SQLite action code {action}")


def _decode(data: bytes) -> str:
    """Text values as Python strings; bytes that are not UTF-8 become U+FFFD instead of an exception."""
    return data.decode("utf-8", "replace")


def _cell(value: object) -> str:
    """One value as the observation shows it: NULL, numbers (floats to at most 6 decimals), text cut to
    `MAX_CELL_CHARS`, blobs by their size."""
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return f"<blob of {len(value)} bytes>"
    text = repr(round(value, 6)) if isinstance(value, float) else str(value)
    return text if len(text) <= MAX_CELL_CHARS else text[: MAX_CELL_CHARS - 3] + "..."


def _count_rest(cursor: sqlite3.Cursor) -> tuple[int, bool]:
    """How many rows `cursor` has left, up to `MAX_COUNTED_ROWS`, and whether that is all of them (False when
    the count stopped at the cap or at the step budget)."""
    count = 0
    try:
        for _ in cursor:
            count += 1
            if count == MAX_COUNTED_ROWS:
                return count, cursor.fetchone() is None
    except sqlite3.OperationalError:  # the progress handler stopped the counting
        return count, False
    return count, True


def format_result(columns: list[str], rows: list[tuple], rest: int, rest_is_exact: bool,
                  max_output_chars: int = MAX_OUTPUT_CHARS) -> str:
    """The observation for a result: a header of column names, one line per row (values separated by ` | `) while
    they fit in `max_output_chars`, and a last line with the number of rows and how many were cut.

    rest: rows of the result after `rows`, not shown; rest_is_exact: False when there are at least that many.
    """
    header = " | ".join(_cell(c) for c in columns)[:max_output_chars // 2]
    lines, length = [header], len(header)
    for row in rows:
        line = " | ".join(_cell(v) for v in row)
        length += 1 + len(line)
        if length > max_output_chars - 120:  # room for the last line
            break
        lines.append(line)
    shown = len(lines) - 1
    cut = len(rows) - shown + rest
    if cut == 0:
        lines.append(f"({shown} row{'' if shown == 1 else 's'})")
    else:
        total = shown + cut if rest_is_exact else f"at least {shown + cut}"
        lines.append(f"({shown} of {total} rows shown; the rest were cut. Narrow the query with WHERE or LIMIT, "
                     "or count with COUNT(*).)")
    return "\n".join(lines)


class SqlDatabase:
    """The shop database of one seed, built into a private read-only file, and its `sql` tool.

    `Toolbox([database.sql])` offers the tool; each call opens its own read-only connection (see the module
    docstring for the layers that contain a query), so calls share no state and may come from any thread.
    """

    def __init__(self, seed: int = 0, max_rows: int = MAX_ROWS, max_output_chars: int = MAX_OUTPUT_CHARS,
                 max_steps: int = MAX_STEPS, timeout_s: float = TIMEOUT_S) -> None:
        """seed: which database (`database.build_database`); the limits: see the module constants."""
        self.seed = seed
        self.max_rows = max_rows
        self.max_output_chars = max_output_chars
        self.max_steps = max_steps
        self.timeout_s = timeout_s
        self._folder = tempfile.TemporaryDirectory(prefix="agentrl_sql_")  # removed with this object
        self.path = Path(self._folder.name) / f"shop_{seed}.sqlite"
        build_database(seed, self.path).close()
        self.path.chmod(0o444)
        self._uri = f"{self.path.resolve().as_uri()}?mode=ro"

    def _connect(self, guard: _Guard) -> sqlite3.Connection:
        """A read-only connection with every limit in place; the authorizer comes last, since it refuses the
        PRAGMA that turns on query_only."""
        conn = sqlite3.connect(self._uri, uri=True)
        conn.execute("PRAGMA query_only = ON")
        conn.text_factory = _decode
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, MAX_LIKE_PATTERN)
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        conn.set_progress_handler(guard.progress, STEP_INTERVAL)
        conn.set_authorizer(guard.authorize)
        return conn

    def sql(self, query: str) -> str:
        """Run one read-only SQL query (SQLite) on the shop database and return the result as text.

        Args:
            query: One SELECT statement, e.g. "SELECT name FROM customers WHERE city = 'Lisbon'". At most 20
                rows are shown; use WHERE, COUNT(*) or LIMIT to narrow a large result.
        """
        if not isinstance(query, str):
            return f"Error: the query must be a string holding one SQL statement, got {type(query).__name__}."
        if not query.strip():
            return "Error: the query is empty; write one SELECT statement."
        if len(query) > MAX_QUERY_CHARS:
            return f"Error: the query is {len(query)} characters long; the limit is {MAX_QUERY_CHARS}."
        guard = _Guard(self.max_steps, self.timeout_s)
        conn = self._connect(guard)
        try:
            cursor = conn.execute(query)
            if cursor.description is None:
                return "Error: the query has no statement to run (only comments?); write one SELECT statement."
            columns = [d[0] for d in cursor.description]
            rows = cursor.fetchmany(self.max_rows)
            rest, exact = _count_rest(cursor) if len(rows) == self.max_rows else (0, True)
            return format_result(columns, rows, rest, exact, self.max_output_chars)
        except sqlite3.Error as e:
            return self._explain(e, guard)
        finally:
            conn.close()

    def _explain(self, error: sqlite3.Error, guard: _Guard) -> str:
        """The observation for a failed query: the guard's reason when it stopped the query, else SQLite's."""
        if guard.denied is not None:
            return (f"Error: not allowed: {guard.denied}. The sql tool only reads the database; write one "
                    "SELECT statement.")
        if guard.stopped:
            return (f"Error: the query was stopped: it ran past the limit ({self.max_steps:,} steps or "
                    f"{self.timeout_s:g} s). Join tables with JOIN ... ON, filter with WHERE, or add LIMIT.")
        if "one statement at a time" in str(error):
            return "Error: only one statement per call; remove everything after the first ';'."
        if "too big" in str(error):
            return f"Error: a value grew past {MAX_VALUE_BYTES:,} bytes (string or blob too big)."
        return f"Error: {error}"
