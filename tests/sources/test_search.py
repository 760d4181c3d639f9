"""The operation index of discovery mode (crank.sources.search): BM25 order, words that mean the same,
summaries, and queries that are never FTS5 syntax."""

from __future__ import annotations

from crank.sources.search import SUMMARY_LIMIT, IndexedOperation, OperationIndex, one_line

OPERATIONS = [
    IndexedOperation.of("repos_delete", "Delete a repository.\n\nDeleting a repository requires admin access."),
    IndexedOperation.of("repos_delete_invitation", "Delete a repository invitation"),
    IndexedOperation.of("repos_get", "Get a repository", path="/repos/{owner}/{repo}"),
    IndexedOperation.of("issues_update", "Update an issue", input_schema={
        "type": "object", "properties": {"state": {"type": "string", "enum": ["open", "closed"]}}}),
    IndexedOperation.of("get_customers", "<p>Returns a list of your customers.</p>"),
]  # fmt: skip


def names(index: OperationIndex, query: str, limit: int = 5) -> list[str]:
    return [op.name for op in index.search(query, limit)]


def test_the_operation_that_names_every_word_comes_first() -> None:
    index = OperationIndex(OPERATIONS)
    assert names(index, "remove the repository")[0] == "repos_delete"  # remove = delete, repository = repo
    assert names(index, "close an issue") == ["issues_update"]  # the enum value of a parameter
    assert names(index, "show me all customers") == ["get_customers"]  # show = returns = list
    assert names(index, "fetch a repository", limit=1) == ["repos_get"]  # fetch = get
    assert len(names(index, "repository", limit=2)) == 2


def test_queries_are_words_never_fts5_syntax() -> None:
    index = OperationIndex(OPERATIONS)
    for query in ('"', "NEAR(a b)", "delete*", "a OR", "repos_delete:", "(", "-", "^x"):
        index.search(query)  # no sqlite3.OperationalError
    assert names(index, "the of and") == [] and names(index, "") == [] and names(index, "delete", limit=0) == []
    assert names(index, 'delete" OR "get') == names(index, "delete get")


def test_summaries_are_one_short_plain_line() -> None:
    assert OPERATIONS[0].summary == "Delete a repository."
    assert OPERATIONS[4].summary == "Returns a list of your customers."
    long = one_line("word " * 100)
    assert len(long) <= SUMMARY_LIMIT and long.endswith("…")
    assert IndexedOperation.of("no_text", None).summary == "no_text"
