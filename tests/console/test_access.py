"""Who may use the console: loopback rule, token (bearer and login cookie), CSRF refusal."""

from __future__ import annotations

import aiohttp
import pytest

from gateway.console.auth import cookie_value, is_loopback

TOKEN = "s3cret-console-token"


def test_loopback_addresses() -> None:
    for host in ("127.0.0.1", "127.8.0.1", "::1", "[::1]", "localhost", "LOCALHOST", "app.localhost"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "", "192.168.1.5", "10.0.0.1", "example.com", "localhost.example.com"):
        assert not is_loopback(host), host


async def test_loopback_without_token_is_open(serve, corpus) -> None:
    served = await serve()
    async with served.session() as http:
        for path in ("/console/", "/console/status", "/api/v1/sessions", "/api/v1/status"):
            async with http.get(path) as resp:
                assert resp.status == 200, path


async def test_open_console_refuses_a_foreign_host_header(serve, corpus) -> None:
    """DNS rebinding: a page on evil.example resolving to 127.0.0.1 must not read the console."""
    served = await serve()
    async with served.session() as http:
        async with http.get("/api/v1/sessions", headers={"Host": "evil.example:8765"}) as resp:
            assert resp.status == 403 and "loopback" in (await resp.json())["error"]
        async with http.get("/api/v1/sessions", headers={"Host": "localhost:8765"}) as resp:
            assert resp.status == 200


@pytest.mark.parametrize("bind", ["0.0.0.0", "192.168.1.5", "::"])
async def test_off_loopback_without_token_is_refused(serve_bound_as, corpus, bind) -> None:
    served = await serve_bound_as(bind)
    async with served.session() as http:
        async with http.get("/api/v1/sessions") as resp:
            assert resp.status == 403 and "console_token" in (await resp.json())["error"]
        async with http.get("/console/") as resp:
            assert resp.status == 403
            assert "nginx" not in await resp.text()


async def test_off_loopback_needs_the_token(serve_bound_as, corpus) -> None:
    served = await serve_bound_as("0.0.0.0", TOKEN)
    async with served.session() as http:
        async with http.get("/api/v1/sessions") as resp:
            assert resp.status == 401
            assert resp.headers["WWW-Authenticate"].startswith("Bearer")
            assert "token" in (await resp.json())["error"]
        for wrong in ("Bearer nope", "Bearer " + TOKEN[:-1], "Basic " + TOKEN, TOKEN):
            async with http.get("/api/v1/sessions", headers={"Authorization": wrong}) as resp:
                assert resp.status == 401, wrong
        async with http.get("/api/v1/sessions", headers={"Authorization": f"Bearer {TOKEN}"}) as resp:
            assert resp.status == 200 and len((await resp.json())["sessions"]) == 4
        async with http.get("/console/", allow_redirects=False) as resp:
            assert resp.status == 302 and resp.headers["Location"].startswith("/console/login?next=")
        async with http.get("/console/static/console.css") as resp:
            assert resp.status == 200  # static files hold nothing


async def test_a_set_token_is_required_on_loopback_too(serve, corpus) -> None:
    served = await serve(console_token=TOKEN)
    async with served.session() as http:
        async with http.get("/api/v1/status") as resp:
            assert resp.status == 401
        async with http.get("/api/v1/status", headers={"Authorization": f"Bearer {TOKEN}"}) as resp:
            assert resp.status == 200


async def test_login_form_sets_a_cookie_that_is_not_the_token(serve, corpus) -> None:
    served = await serve(console_token=TOKEN)
    jar = aiohttp.CookieJar(unsafe=True)
    async with served.session(cookie_jar=jar, headers={"Origin": served.url}) as http:
        async with http.get("/console/login?next=/console/status") as resp:
            page = await resp.text()
            assert resp.status == 200 and 'name="token"' in page and TOKEN not in page
        async with http.post("/console/login", data={"token": "wrong", "next": "/console/status"}) as resp:
            assert resp.status == 401 and "not right" in await resp.text()
        async with http.post(
            "/console/login", data={"token": TOKEN, "next": "https://evil.example/"}, allow_redirects=False
        ) as resp:
            assert resp.status == 302 and resp.headers["Location"] == "/console/"  # never off-site
            set_cookie = resp.headers["Set-Cookie"]
            assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie
            assert TOKEN not in set_cookie and cookie_value(TOKEN) in set_cookie
        async with http.get("/console/") as resp:
            assert resp.status == 200 and "nginx timeouts" in await resp.text()
        async with http.get("/api/v1/sessions") as resp:
            assert resp.status == 200
        async with http.post("/console/logout", allow_redirects=False) as resp:
            assert resp.status == 302
        async with http.get("/api/v1/sessions") as resp:
            assert resp.status == 401


async def test_mutations_need_the_token_or_the_same_origin(serve, db, corpus) -> None:
    served = await serve()
    sid = corpus["quiet"]
    async with served.session() as http:
        for headers in (
            {},
            {"Origin": "https://evil.example"},
            {"Referer": "https://evil.example/x"},
            {"Origin": "null"},
        ):
            async with http.patch(f"/api/v1/sessions/{sid}", json={"title": "hijacked"}, headers=headers) as resp:
                assert resp.status == 403 and "cross-origin" in (await resp.json())["error"], headers
            async with http.delete(f"/api/v1/sessions/{sid}", headers=headers) as resp:
                assert resp.status == 403, headers
        assert db.get_session(sid) is not None and db.get_session(sid)["title"] is None
        async with http.patch(
            f"/api/v1/sessions/{sid}", json={"title": "mine"}, headers={"Referer": served.url + "/console/"}
        ) as resp:
            assert resp.status == 200
    assert db.get_session(sid)["title"] == "mine"


async def test_the_bearer_token_is_enough_for_a_mutation(serve, db, corpus) -> None:
    served = await serve(console_token=TOKEN)
    sid = corpus["quiet"]
    async with served.session(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        async with http.patch(f"/api/v1/sessions/{sid}", json={"title": "scripted"}) as resp:
            assert resp.status == 200
    assert db.get_session(sid)["title"] == "scripted"


async def test_a_logged_in_cookie_alone_does_not_pass_the_csrf_guard(serve, db, corpus) -> None:
    served = await serve(console_token=TOKEN)
    sid = corpus["quiet"]
    jar = aiohttp.CookieJar(unsafe=True)
    async with served.session(cookie_jar=jar) as http:
        async with http.post(
            "/console/login", data={"token": TOKEN}, headers={"Origin": served.url}, allow_redirects=False
        ) as resp:
            assert resp.status == 302
        async with http.delete(f"/api/v1/sessions/{sid}", headers={"Origin": "https://evil.example"}) as resp:
            assert resp.status == 403
        async with http.delete(f"/api/v1/sessions/{sid}", headers={"Origin": served.url}) as resp:
            assert resp.status == 200
    assert db.get_session(sid) is None


async def test_no_secret_is_rendered(serve, corpus) -> None:
    served = await serve(console_token=TOKEN)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with served.session(headers=auth) as http:
        for path in ("/console/", "/console/status", "/api/v1/status", f"/console/sessions/{corpus['nginx']}"):
            async with http.get(path) as resp:
                assert resp.status == 200
                assert TOKEN not in await resp.text(), path


async def test_a_wrong_token_is_told_apart_from_a_missing_one(serve, corpus) -> None:
    """Issue 28 item 14: the person who typed a token learns it is wrong, not that one is needed."""
    served = await serve(console_token=TOKEN)
    async with served.session(headers={"Origin": served.url}) as http:
        async with http.get("/api/v1/sessions") as resp:
            missing = (await resp.json())["error"]
        async with http.get("/api/v1/sessions", headers={"Authorization": "Bearer nope"}) as resp:
            wrong = (await resp.json())["error"]
            assert resp.status == 401
        assert "required" in missing and "not right" in wrong and missing != wrong
        async with http.post("/console/login", data={"token": "  ", "next": "/console/"}) as resp:
            blank = await resp.text()
            assert resp.status == 401 and "Enter the console token" in blank and "not right" not in blank
        async with http.post("/console/login", data={"token": "nope", "next": "/console/"}) as resp:
            assert resp.status == 401 and "That token is not right" in await resp.text()


async def test_the_login_page_offers_nothing_behind_the_login(serve, corpus) -> None:
    """Issue 28 item 14: no navigation, search box or JSON link on the login page (each only leads
    back to it); the language switch stays (it is public: the login page is read in it)."""
    served = await serve(console_token=TOKEN)
    async with served.session() as http:
        async with http.get("/console/login") as resp:
            page = await resp.text()
    assert resp.status == 200 and 'name="token"' in page
    assert "quick-search" not in page and "/api/v1/" not in page
    assert not any(f'href="/console/{p}"' in page for p in ("search", "schedules", "status"))
    assert 'class="languages"' in page
