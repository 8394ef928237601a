"""Saved conversations: one SQLite file in the data directory (default <LOCALLLM_HOME>/chat.sqlite3).

    h = History(path)                          # creates the file and its tables on first use
    cid = h.create("first words", model="smollm2:135m")
    h.add(cid, "user", "hi"); h.add(cid, "assistant", "Hello!")
    h.list() -> [Saved(id, title, model, updated, n_messages)]   # most recently updated first
    h.messages(cid) -> [{"role", "content"}]                      # oldest first
    h.truncate(cid, 1)                         # keeps the first message only
    h.rename(cid, "a better title")
    h.set_settings(cid, {"temperature": 0.2}); h.settings(cid) -> {"temperature": 0.2}   # any JSON object
    h.delete(cid)

Used from the UI thread only (one connection, no sharing across threads). Every write commits.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    model TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    settings TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
"""


@dataclass(frozen=True)
class Saved:
    id: int
    title: str
    model: str
    updated: float  # unix time of the last message
    n_messages: int


def title_for(text: str, width: int = 40) -> str:
    """A conversation's title: its first message on one line, cut to `width` characters."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


class History:
    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        self._db = sqlite3.connect(self.path)
        self._db.execute("PRAGMA foreign_keys = ON")
        self._db.executescript(_SCHEMA)
        columns = [row[1] for row in self._db.execute("PRAGMA table_info(conversations)")]
        if "settings" not in columns:  # a file from before settings were saved
            self._db.execute("ALTER TABLE conversations ADD COLUMN settings TEXT NOT NULL DEFAULT '{}'")
        self._db.commit()

    def create(self, title: str, model: str) -> int:
        now = time.time()
        cur = self._db.execute(
            "INSERT INTO conversations (title, model, created, updated) VALUES (?, ?, ?, ?)", (title, model, now, now)
        )
        self._db.commit()
        return int(cur.lastrowid)

    def add(self, conversation_id: int, role: str, content: str) -> None:
        self._db.execute(
            "INSERT INTO messages (conversation_id, role, content) VALUES (?, ?, ?)", (conversation_id, role, content)
        )
        self._db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (time.time(), conversation_id))
        self._db.commit()

    def list(self) -> list[Saved]:
        rows = self._db.execute(
            "SELECT c.id, c.title, c.model, c.updated, COUNT(m.id) FROM conversations c "
            "LEFT JOIN messages m ON m.conversation_id = c.id GROUP BY c.id ORDER BY c.updated DESC, c.id DESC"
        )
        return [Saved(int(i), t, mo, float(u), int(n)) for i, t, mo, u, n in rows]

    def messages(self, conversation_id: int) -> list[dict]:
        rows = self._db.execute(
            "SELECT role, content FROM messages WHERE conversation_id = ? ORDER BY id", (conversation_id,)
        )
        return [{"role": r, "content": c} for r, c in rows]

    def truncate(self, conversation_id: int, keep: int) -> None:
        """Keeps the first `keep` messages of the conversation and deletes the rest."""
        self._db.execute(
            "DELETE FROM messages WHERE conversation_id = ? AND id NOT IN (SELECT id FROM messages "
            "WHERE conversation_id = ? ORDER BY id LIMIT ?)",
            (conversation_id, conversation_id, keep),
        )
        self._db.commit()

    def rename(self, conversation_id: int, title: str) -> None:
        self._db.execute("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id))
        self._db.commit()

    def set_settings(self, conversation_id: int, settings: dict) -> None:
        self._db.execute("UPDATE conversations SET settings = ? WHERE id = ?", (json.dumps(settings), conversation_id))
        self._db.commit()

    def settings(self, conversation_id: int) -> dict:
        """The conversation's saved settings; {} when it has none (or there is no such conversation)."""
        row = self._db.execute("SELECT settings FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        try:
            value = json.loads(row[0]) if row else {}
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    def delete(self, conversation_id: int) -> None:
        self._db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
        self._db.commit()

    def close(self) -> None:
        self._db.close()
