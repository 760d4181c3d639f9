"""A full-text index of an agent's operations, for discovery mode: SQLite FTS5 with BM25 ranking.

Why FTS5 (docs/benchmarks.md, "Discovery"): it is in the standard library's `sqlite3` (no dependency),
ranks with BM25 with a weight per column, stems with the Porter stemmer, and answers a query over
1,223 operations in well under a millisecond; `bm25s`, measured on the same documents and queries, ranks
alike but needs numpy and scipy and has no column weights.

Each operation is one row: its name split into words, a one-line summary, the rest of its description,
the words of its URL path and its parameter names. A query is the user's words (stop words out, each
quoted, joined by OR; a few words and the index both mapped to one form: "remove" finds "delete"), and
the answer is BM25 order, best first. The index is built once per published version, in memory, and
only read afterwards.
"""

from __future__ import annotations

import html
import re
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from crank.types import JSONObject

__all__ = [
    "MAX_QUERY_TERMS",
    "SUMMARY_LIMIT",
    "IndexedOperation",
    "OperationIndex",
    "one_line",
    "words_of",
]

SUMMARY_LIMIT: Final = 100
"""Characters of an operation's one-line summary in a search answer."""
MAX_QUERY_TERMS: Final = 24
"""Words of a query that are searched; the rest are ignored (a query is a few words, not a document)."""

# BM25 weights of the columns: name, summary, description, path, parameters. The name and the
# summary say what an operation does; the description says much else besides.
_WEIGHTS: Final = (4.0, 3.0, 1.0, 1.0, 0.8)

_STOPWORDS = frozenset("""
    a about all an and any are as at be by can could do does for from give has have how i if in into is it
    its me my of on one or our please should that the their them then there these this those to up us
    want was we what when where which who will with would you your new some need let see tell
    don t s ll ve re d m any more old called named up
""".split())  # fmt: skip

# Words that mean the same to an API user, each mapped to one canonical word in the documents and in the
# queries alike (so a document that has both is not counted twice). Small on purpose: common verbs and the
# abbreviations APIs use; FTS5's Porter stemmer does the rest (`repos` = `repo`, `creates` = `create`).
_CANONICAL: Final[dict[str, str]] = {
    "remove": "delete", "erase": "delete", "destroy": "delete", "drop": "delete", "deletes": "delete",
    "removes": "delete", "make": "create", "add": "create", "adds": "create", "creates": "create",
    "edit": "update", "change": "update", "modify": "update", "modifies": "update", "updates": "update",
    "fetch": "get", "retrieve": "get", "retrieves": "get", "read": "get", "gets": "get", "returns": "list",
    "view": "get", "show": "list", "lists": "list", "enumerate": "list", "browse": "list",
    "repository": "repo", "repositories": "repo", "organization": "org", "organizations": "org",
    "orgs": "org", "pr": "pull", "prs": "pull", "configuration": "config", "authenticated": "auth",
    "stop": "cancel", "cancels": "cancel", "find": "search", "look": "get", "lookup": "get", "setup": "create",
    "assignee": "assign", "assignees": "assign", "publish": "create", "share": "create", "kick": "delete",
    "subscribe": "create", "whoami": "auth", "logged": "auth", "closed": "close",
}  # fmt: skip  # fmt: skip
_CANDIDATES: Final = 200
_COMMON: Final = 0.5
"""A word in more than this share of the operations does not pick candidates, it only orders them."""
"""Operations BM25 picks before the coverage of the query's words orders them."""
_COVERAGE: Final = 1.0
"""How much an operation whose name and summary hold every word of the query gains over one holding none."""
_PRECISION: Final = 1.0
"""How much an operation whose name and summary are nothing but words of the query gains (the most specific)."""
_SPLIT = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_WORD = re.compile(r"[A-Za-z0-9]+")
_TAGS = re.compile(r"<[^>]+>")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


@dataclass(frozen=True, slots=True)
class IndexedOperation:
    """What the index reads of one operation."""

    name: str
    summary: str
    """One line, at most `SUMMARY_LIMIT` characters: what a search answer shows."""
    description: str = ""
    path: str = ""
    parameters: str = ""

    @classmethod
    def of(
        cls, name: str, description: str | None, *, path: str = "", input_schema: JSONObject | None = None
    ) -> IndexedOperation:
        text = _plain(description or "")
        properties = (input_schema or {}).get("properties") or {}
        # Parameter names and the values of their enums: "close an issue" is setting `state` to `closed`.
        enums = [
            str(value) for spec in properties.values() if isinstance(spec, dict) for value in spec.get("enum") or ()
        ]
        parameters = " ".join(words_of(" ".join([*properties, *enums])))
        return cls(name, one_line(text) or name, text, " ".join(words_of(path)), parameters)


def words_of(text: str) -> list[str]:
    """`getUserById`, `repos/create-fork`, `/v1/customers/{id}` -> lower-case words."""
    return [word.lower() for word in _WORD.findall(_SPLIT.sub(" ", text))]


def one_line(text: str, limit: int = SUMMARY_LIMIT) -> str:
    """The first line or sentence of a description, cut at a word to `limit` characters."""
    first = _plain(text).strip().split("\n", 1)[0].strip()
    first = _SENTENCE_END.split(first, 1)[0]
    if len(first) <= limit:
        return first
    cut = first[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:") + "…"


def _plain(text: str) -> str:
    """HTML (Stripe writes `<p>`) and Markdown links out: the words stay."""
    text = _TAGS.sub(" ", text) if "<" in text else text
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return html.unescape(re.sub(r"[ \t]+", " ", text))


class OperationIndex:
    """A BM25-ranked full-text index over a fixed set of operations (SQLite FTS5, in memory)."""

    def __init__(self, operations: Iterable[IndexedOperation]) -> None:
        self.operations: tuple[IndexedOperation, ...] = tuple(operations)
        # One connection, only read after the build; the lock makes a call from a worker thread safe too.
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._lock = threading.Lock()
        self._db.execute(
            "CREATE VIRTUAL TABLE ops USING fts5(name, summary, description, path, parameters, "
            "tokenize = 'porter unicode61')"
        )
        self._db.executemany(
            "INSERT INTO ops(rowid, name, summary, description, path, parameters) VALUES (?, ?, ?, ?, ?, ?)",
            [(row, *_columns(op)) for row, op in enumerate(self.operations)],
        )
        weights = ", ".join(str(weight) for weight in _WEIGHTS)
        self._query = f"SELECT rowid, -bm25(ops, {weights}) FROM ops WHERE ops MATCH ? ORDER BY 2 DESC LIMIT ?"
        self._stems = self._stem_table()
        self._db.execute("CREATE VIRTUAL TABLE counts USING fts5vocab(ops, 'row')")
        self._documents = dict(self._db.execute("SELECT term, doc FROM counts").fetchall())
        self._db.execute("DROP TABLE counts")
        stop = {self._stems.get(word, word) for word in _STOPWORDS}
        self._heads = [
            frozenset(self._stems.get(word, word) for word in _canonical(f"{op.name} {op.summary}").split()) - stop
            for op in self.operations
        ]

    def _stem_table(self) -> dict[str, str]:
        """Each word of the documents -> its stem, as FTS5's own tokenizer makes it (so a query's words can be
        compared with an operation's name and summary in Python, for `search`'s coverage)."""
        words = sorted({word for op in self.operations for text in _columns(op) for word in text.split()})
        self._db.execute("CREATE VIRTUAL TABLE words USING fts5(word, tokenize = 'porter unicode61')")
        self._db.execute("CREATE VIRTUAL TABLE stems USING fts5vocab(words, 'instance')")
        self._db.executemany("INSERT INTO words(rowid, word) VALUES (?, ?)", enumerate(words))
        table = {words[row]: term for term, row in self._db.execute("SELECT term, doc FROM stems")}
        self._db.execute("DROP TABLE stems")
        self._db.execute("DROP TABLE words")
        return table

    def __len__(self) -> int:
        return len(self.operations)

    def search(self, query: str, limit: int = 5) -> list[IndexedOperation]:
        """The operations that best match the words of `query`, best first; [] when no word is searchable.

        BM25 over every column picks the candidates; they are then ordered by BM25 times how many of the
        query's words their name and summary hold (the "coordination" of classic Lucene scoring): a word
        that half the API uses ("repo" in GitHub's) adds almost nothing to BM25, yet "delete a repository"
        means the operation whose name says both."""
        terms = _terms(words_of(query))
        if not terms or limit < 1:
            return []
        stems = {self._stems.get(term, term) for term in terms}
        # A word in most operations ("repo" in GitHub's) weighs next to nothing in BM25 yet makes it score
        # nearly every row: it only orders the candidates that the rarer words found.
        common = len(self.operations) * _COMMON
        rare = [term for term in terms if self._documents.get(self._stems.get(term, term), 0) <= common]
        searched = rare or [min(terms, key=lambda term: self._documents.get(self._stems.get(term, term), 0))]
        with self._lock:
            rows = self._db.execute(self._query, (_any_of(searched), max(limit, _CANDIDATES))).fetchall()
            if len(rows) < limit and len(searched) < len(terms):  # too few: let the common words find more
                rows = self._db.execute(self._query, (_any_of(terms), max(limit, _CANDIDATES))).fetchall()
        heads = self._heads

        def score(row: tuple[int, float]) -> float:
            head = heads[row[0]]
            shared = len(stems & head)
            return row[1] * (1 + _COVERAGE * shared / len(stems)) * (1 + _PRECISION * shared / max(len(head), 1))

        return [self.operations[row[0]] for row in sorted(rows, key=score, reverse=True)[:limit]]

    def close(self) -> None:
        self._db.close()


def _any_of(terms: Sequence[str]) -> str:
    """An FTS5 MATCH expression: each word quoted (so no word is FTS5 syntax), OR-ed."""
    return " OR ".join(f'"{term}"' for term in terms)


def _terms(words: Sequence[str]) -> list[str]:
    terms: list[str] = []
    for index, word in enumerate(words):
        if word == "set" and words[index + 1 : index + 2] == ["up"]:
            word = "setup"
        term = _CANONICAL.get(word, word)
        if term not in _STOPWORDS and term not in terms:
            terms.append(term)
    return terms[:MAX_QUERY_TERMS]


def _columns(op: IndexedOperation) -> tuple[str, ...]:
    return tuple(_canonical(text) for text in (op.name, op.summary, op.description, op.path, op.parameters))


def _canonical(text: str) -> str:
    """The words of `text`, each in its canonical form: what the index stores."""
    return " ".join(_CANONICAL.get(word, word) for word in words_of(text))
