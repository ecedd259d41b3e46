"""Keyset pages of sessions: the query walks the last-activity index and stops at the page's end."""

from __future__ import annotations

from gateway.storage import queries


def test_a_deep_page_is_a_range_walk_not_a_sort_of_everything_older(db) -> None:
    db.create_session("a", "telegram")
    plans = []

    def spy(conn):
        original = conn.execute

        def explain(sql, params=()):
            if sql.startswith("SELECT") and "FROM sessions s" in sql:
                plans.extend(row[3] for row in original("EXPLAIN QUERY PLAN " + sql, params))
            return original(sql, params)

        return explain

    conn = db._reader()

    class Spied:
        execute = staticmethod(spy(conn))

    queries.list_sessions_page(Spied(), after=(1.0, "x"), limit=51)  # type: ignore[arg-type]
    assert any("idx_sessions_active (last_active_at<?)" in p for p in plans), plans
    assert "MULTI-INDEX OR" not in plans and "USE TEMP B-TREE FOR ORDER BY" not in plans, plans
