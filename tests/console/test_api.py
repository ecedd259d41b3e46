"""The console's JSON API over real HTTP: every route, filters, paging, errors and hostile input."""

from __future__ import annotations

import json
import re

import pytest

from gateway.db import new_session_id
from tests.console.conftest import BASE, DAY

SAME_ORIGIN = lambda served: {"Origin": served.url}


async def get_json(served, path, **kwargs):
    async with served.session() as http:
        async with http.get(path, **kwargs) as resp:
            return resp.status, await resp.json(), resp.headers


async def test_sessions_newest_activity_first_with_their_columns(serve, corpus) -> None:
    served = await serve()
    status, body, headers = await get_json(served, "/api/v1/sessions")
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    ids = [s["id"] for s in body["sessions"]]
    assert ids == [corpus["quiet"], corpus["hostile"], corpus["deploy"], corpus["nginx"]]
    nginx = body["sessions"][-1]
    assert nginx["title"] == "nginx timeouts" and nginx["source"] == "telegram" and nginx["user_name"] == "Ann"
    assert nginx["message_count"] == 4 and nginx["preview"].startswith("my nginx.conf gives")
    assert nginx["started_at"] == BASE and nginx["last_active_at"] == BASE + 240
    assert body["next"] is None


async def test_filters_platform_person_dates_titled(serve, corpus) -> None:
    served = await serve()
    ids = lambda body: {s["id"] for s in body["sessions"]}
    _, body, _ = await get_json(served, "/api/v1/sessions?platform=telegram")
    assert ids(body) == {corpus["nginx"], corpus["quiet"]}
    _, body, _ = await get_json(served, "/api/v1/sessions?user=bo")
    assert ids(body) == {corpus["deploy"]}
    _, body, _ = await get_json(served, "/api/v1/sessions?titled=1")
    assert ids(body) == {corpus["nginx"], corpus["hostile"]}
    _, body, _ = await get_json(served, "/api/v1/sessions?titled=0")
    assert ids(body) == {corpus["deploy"], corpus["quiet"]}
    # BASE is 2024-04-24 23:06 UTC: the deploy session is active on the 25th, the hostile one the 26th
    _, body, _ = await get_json(served, "/api/v1/sessions?from=2024-04-25&to=2024-04-26")
    assert ids(body) == {corpus["deploy"], corpus["hostile"]}
    _, body, _ = await get_json(served, "/api/v1/sessions?platform=telegram&user=ann&titled=0")
    assert ids(body) == {corpus["quiet"]}


async def test_person_filter_finds_sessions_they_took_part_in(serve, db, corpus) -> None:
    db.append_message(corpus["deploy"], "user", "me too", user_id="ann")  # ann joins bo's group session
    served = await serve()
    _, body, _ = await get_json(served, "/api/v1/sessions?user=ann")
    assert {s["id"] for s in body["sessions"]} == {corpus["nginx"], corpus["quiet"], corpus["deploy"]}


async def test_keyset_pages_cover_everything_once_even_with_equal_times(serve, db) -> None:
    made = []
    for i in range(23):
        sid = f"20240101_000000_{i:08x}"
        db.create_session(sid, "telegram", started_at=BASE + (i // 5))  # groups of equal last_active_at
        made.append(sid)
    served = await serve()
    seen, after, pages = [], None, 0
    while True:
        path = "/api/v1/sessions?limit=4" + (f"&after={after}" if after else "")
        status, body, _ = await get_json(served, path)
        assert status == 200
        seen += [s["id"] for s in body["sessions"]]
        pages += 1
        after = body["next"]
        if after is None:
            break
    assert pages == 6 and len(seen) == 23 and set(seen) == set(made)
    expected = sorted(made, key=lambda sid: (db.get_session(sid)["last_active_at"], sid), reverse=True)
    assert seen == expected


async def test_bad_list_parameters_are_400_json(serve, corpus) -> None:
    served = await serve()
    for query in (
        "platform=myspace",
        "from=yesterday",
        "to=2024-13-01",
        "limit=0",
        "limit=999",
        "limit=ten",
        "titled=maybe",
        "after=nonsense",
        "after=nan~x",
    ):
        status, body, _ = await get_json(served, "/api/v1/sessions?" + query)
        assert status == 400, query
        assert isinstance(body["error"], str) and body["error"], query


async def test_search_ranks_and_highlights_identifiers(serve, corpus) -> None:
    served = await serve()
    status, body, _ = await get_json(served, "/api/v1/search", params={"q": "nginx.conf timeout"})
    assert status == 200
    assert body["understood"] == "nginx.conf timeout"
    top = body["hits"][0]
    assert top["session_id"] == corpus["nginx"] and top["title"] == "nginx timeouts"
    marked = [top["snippet"][a:b] for a, b in top["highlights"]]
    assert "nginx.conf" in marked and "timeout" in marked
    assert top["message"]["session_id"] == corpus["nginx"]


async def test_search_highlights_chinese_words(serve, corpus) -> None:
    served = await serve()
    _, body, _ = await get_json(served, "/api/v1/search", params={"q": "部署网关超时"})
    top = body["hits"][0]
    assert top["session_id"] == corpus["deploy"]
    marked = [top["snippet"][a:b] for a, b in top["highlights"]]
    assert any("部署网关超时" in m or m == "部署网关" for m in marked), marked
    assert all(m and set(m) <= set("部署网关超时") for m in marked), marked


async def test_search_needs_a_query_and_survives_hostile_ones(serve, corpus) -> None:
    served = await serve()
    status, body, _ = await get_json(served, "/api/v1/search")
    assert status == 400 and "q" in body["error"]
    for q in ['"', "NEAR(", "* OR AND", "\ud800 nginx", "a:b@c (d", "x" * 6000, "'; DROP TABLE sessions; --"]:
        status, body, _ = await get_json(served, "/api/v1/search", params={"q": q})
        assert status == 200, q[:20]
        assert isinstance(body["hits"], list)
    status, body, _ = await get_json(served, "/api/v1/search", params={"q": "\ud800 nginx"})
    assert body["hits"] and body["hits"][0]["session_id"] == corpus["nginx"]


async def test_10kb_queries_are_answered(serve, corpus) -> None:
    served = await serve()
    async with served.session() as http:
        # 10 KB of UTF-8 each; the Han one is 31 KB percent-encoded in the URL
        for q, cut in (("timeout " * 1300, True), ("超时" * 1700, False)):
            async with http.get("/api/v1/search", params={"q": q}) as resp:
                assert resp.status == 200
                body = await resp.json()
            assert body["truncated"] is cut and body["hits"], q[:10]


async def test_session_detail_has_messages_lineage_and_key_history(serve, db, corpus) -> None:
    parent = corpus["nginx"]
    child = new_session_id(BASE + 5 * DAY)
    db.create_session(
        child,
        "telegram",
        started_at=BASE + 5 * DAY,
        parent_session_id=parent,
        title="nginx timeouts #2",
        user_id="ann",
        session_key="agent:main:telegram:dm:100",
    )
    db.set_key_entry("agent:main:telegram:dm:100", child, reason="compressed")
    db.rewind(parent, 1)  # the last exchange undone: still shown, flagged
    served = await serve()
    status, body, _ = await get_json(served, f"/api/v1/sessions/{parent}")
    assert status == 200
    assert body["session"]["id"] == parent
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert {m["state"] for m in body["messages"]} == {"undone"}
    assert body["messages"][1]["tool_calls"][0]["function"]["name"] == "read_file"
    assert body["children"] == [{"id": child, "title": "nginx timeouts #2", "exists": True}]
    assert body["key"]["session_id"] == child
    assert [h["id"] for h in body["key_history"]] == [parent, child]
    _, body, _ = await get_json(served, f"/api/v1/sessions/{child}")
    assert body["parent"] == {"id": parent, "title": "nginx timeouts", "exists": True}


async def test_superseded_messages_are_flagged(serve, db, corpus) -> None:
    sid = corpus["quiet"]
    first = db.append_message(sid, "assistant", "a first answer")
    db.append_message(sid, "assistant", "a retried answer")
    db.supersede_after(sid, first)
    served = await serve()
    _, body, _ = await get_json(served, f"/api/v1/sessions/{sid}")
    assert [m["state"] for m in body["messages"]] == ["active", "active", "superseded"]


async def test_unknown_and_impossible_ids_are_404_json(serve, corpus) -> None:
    served = await serve()
    for sid in ("20990101_000000_deadbeef", "x" * 5000, "%ED%A0%80", "..%2F..%2Fetc%2Fpasswd"):
        status, body, _ = await get_json(served, f"/api/v1/sessions/{sid}")
        assert status == 404 and body["error"], sid[:20]
    async with served.session() as http:
        async with http.patch("/api/v1/sessions/nope", json={"title": "x"}, headers=SAME_ORIGIN(served)) as resp:
            assert resp.status == 404 and (await resp.json())["error"]
        async with http.delete("/api/v1/sessions/nope", headers=SAME_ORIGIN(served)) as resp:
            assert resp.status == 404
        async with http.get("/api/v1/sessions/nope/export") as resp:
            assert resp.status == 404
        async with http.get("/api/v1/nothing-here") as resp:
            assert resp.status == 404 and "error" in await resp.json()
        async with http.put(f"/api/v1/sessions/{corpus['nginx']}", headers=SAME_ORIGIN(served)) as resp:
            assert resp.status == 405 and "error" in await resp.json()


async def test_rename_sets_clears_and_refuses_taken_titles(serve, db, corpus) -> None:
    served = await serve()
    sid = corpus["quiet"]
    async with served.session(headers=SAME_ORIGIN(served)) as http:
        async with http.patch(f"/api/v1/sessions/{sid}", json={"title": "  greetings\n"}) as resp:
            assert resp.status == 200
            assert (await resp.json())["session"]["title"] == "greetings"
        assert db.get_session(sid)["title"] == "greetings"
        async with http.patch(f"/api/v1/sessions/{sid}", json={"title": "nginx timeouts"}) as resp:
            assert resp.status == 409 and "already" in (await resp.json())["error"]
        assert db.get_session(sid)["title"] == "greetings"  # nothing lost
        async with http.patch(f"/api/v1/sessions/{sid}", json={"title": None}) as resp:
            assert resp.status == 200 and (await resp.json())["session"]["title"] is None
        for bad in (b"not json", b'["title"]', b'{"title": 5}', b'{"name": "x"}', b'{"title": "\\ud800"}'):
            async with http.patch(
                f"/api/v1/sessions/{sid}", data=bad, headers={"Content-Type": "application/json"}
            ) as resp:
                assert resp.status == 400, bad
                assert (await resp.json())["error"]


async def test_delete_removes_the_session_and_its_messages(serve, db, corpus) -> None:
    served = await serve()
    sid = corpus["hostile"]
    async with served.session(headers=SAME_ORIGIN(served)) as http:
        async with http.delete(f"/api/v1/sessions/{sid}") as resp:
            assert resp.status == 200 and (await resp.json()) == {"deleted": sid}
    assert db.get_session(sid) is None and db.get_messages(sid, include_inactive=True) == []
    assert not db.search_messages("pwned")


async def test_export_is_one_jsonl_record_that_imports(serve, db, corpus, tmp_path) -> None:
    served = await serve()
    sid = corpus["nginx"]
    async with served.session() as http:
        async with http.get(f"/api/v1/sessions/{sid}/export") as resp:
            assert resp.status == 200
            assert resp.headers["Content-Disposition"] == f'attachment; filename="{sid}.jsonl"'
            text = await resp.text()
    lines = text.splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["session"]["id"] == sid and len(record["messages"]) == 4
    from gateway.db import SessionDB

    other = SessionDB(tmp_path / "other.db")
    try:
        assert other.import_records([record]) == 1
        assert [m["content"] for m in other.get_messages(sid)] == [m["content"] for m in db.get_messages(sid)]
    finally:
        other.close()


async def test_status_reports_adapters_gauges_and_the_last_hour(serve, db, corpus) -> None:
    served = await serve()
    served.metrics.inc("messages_in_total", {"platform": "telegram"}, by=3)
    served.metrics.observe("turn_seconds", 0.5)
    served.metrics.observe("turn_seconds", 1.5)
    served.metrics.set_gauge_fn("queue_depth", lambda: 7)
    status, body, _ = await get_json(served, "/api/v1/status")
    assert status == 200
    assert body["adapters"]["adapters"]["telegram"]["ready"] is True
    assert body["queue_depth"] == 7 and body["agent_cache"] is None
    assert isinstance(body["queue_depth"], int)  # a count reads 7, not 7.0
    assert body["storage"]["wal_bytes"] >= 0 and body["storage"]["db_bytes"] > 0
    hour = body["last_hour"]
    assert len(hour["minutes"]) == 60 and len(hour["messages_in"]) == 60
    assert hour["messages_in"][-1] == 3 and sum(hour["messages_in"]) == 3
    assert hour["turns"][-1] == 2 and hour["turn_seconds_avg"][-1] == 1.0 and hour["turn_seconds_max"][-1] == 1.5


async def test_every_response_carries_the_security_headers(serve, corpus) -> None:
    served = await serve()
    async with served.session() as http:
        for path in ("/console/", "/api/v1/sessions", "/api/v1/sessions/nope", f"/console/sessions/{corpus['nginx']}"):
            async with http.get(path) as resp:
                csp = resp.headers["Content-Security-Policy"]
                assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "default-src 'none'" in csp
                assert resp.headers["X-Frame-Options"] == "DENY"
                assert resp.headers["Cache-Control"] == "no-store"


async def test_console_searches_are_timed_in_the_search_histogram(serve, corpus) -> None:
    served = await serve()
    await get_json(served, "/api/v1/search", params={"q": "nginx"})
    async with served.session() as http:
        async with http.get("/console/search", params={"q": "nginx"}) as resp:
            assert resp.status == 200
    assert "chinwag_search_seconds_count 2" in served.metrics.render()


async def test_rename_follows_the_chat_title_rules(serve, db, corpus) -> None:
    served = await serve()
    sid = corpus["quiet"]
    async with served.session(headers=SAME_ORIGIN(served)) as http:
        async with http.patch(f"/api/v1/sessions/{sid}", json={"title": "12345"}) as resp:
            assert resp.status == 400 and "only a number" in (await resp.json())["error"]
        assert db.get_session(sid)["title"] != "12345"


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_status_on_postgres_reports_the_database_not_a_file(serve, db) -> None:
    """Issue 28 item 14: "0 B write-ahead log" and "database —" on Postgres (db.path is a DSN)."""
    served = await serve(media=None)
    status, body, _ = await get_json(served, "/api/v1/status")
    assert status == 200 and body["storage"]["db_bytes"] > 0 and "wal_bytes" not in body["storage"]
    async with served.session() as http:
        async with http.get("/console/status") as resp:
            page = await resp.text()
    assert "write-ahead log" not in page and "database —" not in page
    assert re.search(r'<span class="n">[\d.]+ [KMG]?B</span> database', page)
