"""The memory bank, the tool a memory manager edits: memories with integer ids, a capacity, and four typed,
documented operations (add, update, delete, noop) that a `Toolbox` shows the model as schemas.

A bad call (unknown id, full bank, empty content, wrong types, broken JSON) is an `Error:` observation that
changes nothing. `related` is BM25 over the memories (`tools.SearchIndex`, rebuilt when the bank changes).
An operation written as data is {"op": "ADD"|"UPDATE"|"DELETE"|"NOOP", "target": memory id, "content": text}.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentrl_lite.episode import Episode
from agentrl_lite.tools import SearchIndex, import_bm25s

OPS = ("ADD", "UPDATE", "DELETE", "NOOP")
CAPACITY = 32
"""memories a bank holds by default (a dialogue has at most 27 turns, so even append-only fits)"""
MAX_MEMORY_WORDS = 30
"""longest memory accepted: one fact per memory, not the transcript"""
RELATED_K = 5
"""memories retrieved per turn or question (an entity has at most five memories)"""


def _op(op: str, target: int | None = None, content: str | None = None) -> dict[str, Any]:
    """An operation as data: {"op", "target", "content"}."""
    return {"op": op, "target": target, "content": content}


def _searchable(content: str) -> bool:
    """Whether BM25 can index the text: it has a word that is not a stop word."""
    return bool(import_bm25s().tokenize([content], stopwords="en", return_ids=False, show_progress=False)[0])


def _written(episode: Episode) -> str:
    """What the policy wrote in its turns (no end-of-turn tokens): the text a tool runs."""
    return "\n".join(turn.content for turn in episode.model_turns)


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
