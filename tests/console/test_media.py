"""Attachments in the console: listed with their message in the page and the JSON API (kept,
not kept, dropped, missing), images shown inline, files offered for download, and the file route
serving only what the session's own kept attachments name, under the transcript's access rule."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from gateway.storage.media import MediaStore
from tests.console.media_corpus import OTHER, PAGE, PHOTO, SVG, seed


@pytest.fixture
def files(db) -> dict[str, str]:
    return seed(db)


async def test_the_api_lists_each_attachment_with_its_state(serve, files) -> None:
    served = await serve()
    async with served.session() as http:
        async with http.get(f"/api/v1/sessions/{files['sid']}") as resp:
            assert resp.status == 200
            body = await resp.json()
    (message,) = body["messages"]
    got = [(a["kind"], a["file_name"], a["state"], a["inline"], a["url"] is not None) for a in message["attachments"]]
    assert got == [
        ("image", "beach.png", "kept", True, True),
        ("file", "page.html", "kept", False, True),
        ("image", "logo.svg", "kept", False, True),  # SVG can carry script: a download, never inline
        ("video", "big.mp4", "not_kept", False, False),
        ("voice", None, "dropped", False, False),
    ]
    photo = message["attachments"][0]
    assert photo["url"] == f"/console/sessions/{files['sid']}/media/{files['photo']}"
    assert (photo["mime_type"], photo["bytes"], photo["sha256"]) == ("image/png", len(PHOTO), files["photo"])


async def test_an_image_is_served_as_an_image_and_anything_else_as_a_download(serve, files) -> None:
    served = await serve()
    base = f"/console/sessions/{files['sid']}/media/"
    async with served.session() as http:
        async with http.get(base + files["photo"]) as resp:
            assert resp.status == 200 and await resp.read() == PHOTO
            assert resp.headers["Content-Type"] == "image/png"
            assert resp.headers["X-Content-Type-Options"] == "nosniff"
            assert resp.headers["Content-Disposition"].startswith('inline; filename="beach.png"')
            assert "sandbox" in resp.headers["Content-Security-Policy"]
        for name, data in (("page", PAGE), ("svg", SVG)):
            async with http.get(base + files[name]) as resp:
                assert resp.status == 200 and await resp.read() == data
                assert resp.headers["Content-Type"] == "application/octet-stream"
                assert resp.headers["Content-Disposition"].startswith("attachment;")
                assert resp.headers["X-Content-Type-Options"] == "nosniff"


async def test_only_a_kept_file_of_this_session_is_served(serve, db, files) -> None:
    served = await serve()
    base = f"/console/sessions/{files['sid']}/media/"
    async with served.session() as http:
        refused = [
            base + files["other"],  # in the store, but another session's
            f"/console/sessions/{files['elsewhere']}/media/{files['photo']}",  # the other way round
            base + files["dropped"],  # dropped by upkeep (here still on disk: the row decides)
            base + "0" * 64,  # no such file
            base + files["photo"].upper(),  # not how a hash is written
            base + "..%2F..%2Fstate.db",
            f"/console/sessions/no-such-session/media/{files['photo']}",
        ]
        for url in refused:
            async with http.get(url) as resp:
                assert resp.status == 404, url
        async with http.get(f"/console/sessions/{files['elsewhere']}/media/{files['other']}") as resp:
            assert resp.status == 200 and await resp.read() == OTHER
            assert resp.headers["Content-Disposition"].startswith('attachment; filename="s.txt"')

        MediaStore(Path(db.path).parent / "media").remove([files["page"]])  # gone from disk, row still kept
        async with http.get(base + files["page"]) as resp:
            assert resp.status == 404 and "no longer kept" in await resp.text()
        async with http.get(f"/api/v1/sessions/{files['sid']}") as resp:
            states = [a["state"] for a in (await resp.json())["messages"][0]["attachments"]]
            assert states[1] == "missing"


async def test_files_follow_the_consoles_access_rule(serve_bound_as, files) -> None:
    served = await serve_bound_as("0.0.0.0", token="s3cret-token")
    url = f"/console/sessions/{files['sid']}/media/{files['photo']}"
    async with served.session() as http:
        async with http.get(url, allow_redirects=False) as resp:
            assert resp.status == 302 and resp.headers["Location"].startswith("/console/login?next=")
            assert await resp.read() != PHOTO
        async with http.get(url, headers={"Authorization": "Bearer s3cret-token"}) as resp:
            assert resp.status == 200 and await resp.read() == PHOTO


async def test_the_page_shows_images_inline_and_names_every_file(serve, files) -> None:
    served = await serve()
    async with served.session() as http:
        async with http.get(f"/console/sessions/{files['sid']}") as resp:
            html = await resp.text()
    url = f"/console/sessions/{files['sid']}/media/"
    assert f'<img src="{url}{files["photo"]}" alt="beach.png"' in html
    assert f'<a class="download" href="{url}{files["page"]}" download="page.html">page.html</a>' in html
    assert f'<img src="{url}{files["svg"]}"' not in html
    assert "file · text/html · 52 B" in html
    assert "big.mp4" in html and "not kept (too big or could not be downloaded)" in html
    assert "dropped to save space" in html
    assert hashlib.sha256(PHOTO).hexdigest() == files["photo"]
