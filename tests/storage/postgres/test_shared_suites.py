"""The storage, search, recall (words and meaning) and store suites written for SQLite, run as they are against
PostgresSessionDB: this directory's `db` fixture is the Postgres face, and every test below is
the same function object as in its own module (same assertions). The few left out test SQLite's
own machinery; NOT_SHARED says why for each. Of the delivery-table and media suites, the tests
that take the `db` fixture are shared (the others test files or SQLite's upgrade path)."""

import inspect

import tests.recall.test_recall as recall_suite
import tests.recall.test_semantic as semantic_suite
import tests.sessions.test_store as store_suite
import tests.storage.test_db as db_suite
import tests.storage.test_delivery_tables as delivery_suite
import tests.storage.test_media as media_suite
import tests.storage.test_search as search_suite

NOT_SHARED = {
    "test_old_schema_upgrades_and_newer_is_refused": "builds an old SQLite file (Postgres: test_postgres_db.py)",
    "test_append_is_committed_when_it_returns": "reads the SQLite file with sqlite3 (Postgres: test_postgres_db.py)",
    "test_concurrent_appends_share_commits": "SQLite's group commit; Postgres commits each write itself",
    "test_full_disk_fails_the_write_and_loses_nothing": "SQLite's max_page_count",
    "test_a_failing_write_fails_alone": "the group-commit batch; on Postgres every write is alone",
    "test_an_op_failing_midway_leaves_nothing_and_its_batch_commits": "the group-commit batch (Postgres: test_postgres_db.py)",
    "test_event_dedup_persists": "reopens a SQLite file by path (Postgres: test_postgres_db.py)",
    "test_a_word_that_occurs_is_found": "opens its own SQLite files per example",
    "test_prefix_search_finds_every_form_and_keeps_the_connection_read_only": "asks SQLite's PRAGMA query_only "
    "(Postgres: test_postgres_db.py)",
    "test_first_message_creates_a_session_with_its_source": "reopens a SQLite file by path",
    "test_a_leaders_vectors_are_read_by_session_not_by_scanning_the_model": "SQLite's EXPLAIN QUERY PLAN",
}

for _suite in (db_suite, search_suite, recall_suite, store_suite, semantic_suite):
    for _name in dir(_suite):
        if _name.startswith("test_") and _name not in NOT_SHARED:
            globals()[f"{_name}__{_suite.__name__.rsplit('.', 1)[-1]}"] = getattr(_suite, _name)
    for _name, _value in vars(_suite).items():  # the suites' own fixtures (corpus_db, add, clock)
        if hasattr(_value, "_pytestfixturefunction") or type(_value).__name__ == "FixtureFunctionDefinition":
            globals().setdefault(_name, _value)

for _suite in (delivery_suite, media_suite):
    for _name, _value in vars(_suite).items():
        if _name.startswith("test_") and "db" in inspect.signature(_value).parameters:
            globals()[f"{_name}__{_suite.__name__.rsplit('.', 1)[-1]}"] = _value
