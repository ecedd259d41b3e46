"""Attachments through export and import: the metadata always (rows restored, dropped state kept,
the one validator refusing bad rows), the bytes with `--with-media` (each file once, its SHA-256
checked on import), and an import that fails leaving no row and no file behind."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from gateway.cli.main import main
from gateway.db import SessionDB, new_session_id
from gateway.storage.media import AttachmentRow, MediaStore
from gateway.storage.transfer import check_record, import_op, media_line, read_media_line

PHOTO = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40
NOTES = "meeting notes: ship on friday\n".encode() * 100
sha = lambda data: hashlib.sha256(data).hexdigest()


def run(capsys, home: Path, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["--home", str(home), "sessions", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def media_files(home: Path) -> dict[str, bytes]:
    return {sha: MediaStore(home / "media").read(sha) for sha, _, _ in MediaStore(home / "media").files()}


def attachment_rows(home: Path) -> list[dict]:
    with SessionDB(home / "state.db") as db:
        found = db.read(
            lambda conn: [
                dict(r)
                for r in conn.execute(
                    "SELECT m.session_id, m.content, a.kind, a.mime_type, a.bytes, a.sha256, a.file_name,"
                    " a.platform_file_id, a.created_at, a.dropped_at FROM attachments a"
                    " JOIN messages m ON m.id = a.message_id ORDER BY m.session_id, a.id"
                )
            ]
        )
    return found


@pytest.fixture
def source(tmp_path) -> Path:
    """A home with three sessions: a photo and a text file in one, the same photo again in the
    second (stored once), a file that was too big (named only) and one dropped by upkeep in the
    third, and a session with no files at all."""
    home = tmp_path / "a"
    store = MediaStore(home / "media")
    photo, notes = store.save_bytes(PHOTO), store.save_bytes(NOTES)
    with SessionDB(home / "state.db") as db:
        first = new_session_id()
        db.create_session(first, "telegram", user_id="u1", title="holiday")
        db.append_message(
            first,
            "user",
            "look\n[image: beach.png (image/png, 10.0 KB)]\n[file: notes.txt (text/plain, 2.9 KB)]",
            user_id="u1",
            attachments=[
                AttachmentRow("image", "image/png", photo.size, photo.sha256, "beach.png", "tg-file-1"),
                AttachmentRow("file", "text/plain", notes.size, notes.sha256, "notes.txt", "tg-file-2"),
            ],
        )
        db.append_message(first, "assistant", "Nice beach.")
        second = new_session_id()
        db.create_session(second, "discord", user_id="u2")
        db.append_message(
            second,
            "user",
            "[image: again.png]",
            user_id="u2",
            attachments=[AttachmentRow("image", "image/png", photo.size, photo.sha256, "again.png")],
        )
        third = new_session_id()
        db.create_session(third, "feishu", user_id="u3")
        db.append_message(
            third,
            "user",
            "[video: big.mp4: not kept, too big]",
            attachments=[AttachmentRow("video", "video/mp4", 99_000_000, None, "big.mp4")],
        )
        db.end_session(third, "idle")
        gone = store.save_bytes(b"an old voice note")
        db.append_message(
            third, "user", "[voice]", attachments=[AttachmentRow("voice", "audio/ogg", gone.size, gone.sha256, None)]
        )
        db.write(
            lambda conn, events: conn.execute(
                "UPDATE attachments SET dropped_at = 123.0 WHERE sha256 = ?", (gone.sha256,)
            )
        )
        store.remove([gone.sha256])
        plain = new_session_id()
        db.create_session(plain, "local")
        db.append_message(plain, "user", "no files here")
    return home


def export(capsys, home: Path, target: Path, *flags: str) -> list[dict]:
    rc, _, err = run(capsys, home, "export", str(target), *flags)
    assert rc == 0, err
    return [json.loads(line) for line in target.read_text().splitlines()]


def comparable(rows: list[dict]) -> list[tuple]:
    return sorted(tuple(r[k] for k in ("content", "kind", "mime_type", "bytes", "sha256", "file_name")) for r in rows)


def test_without_the_flag_the_metadata_travels_and_missing_files_come_in_dropped(capsys, source, tmp_path) -> None:
    lines = export(capsys, source, tmp_path / "plain.jsonl")
    assert all(set(line) == {"session", "messages"} for line in lines)  # the §10 format: no file lines
    messages = [m for line in lines for m in line["messages"]]
    assert "attachments" not in next(m for m in messages if m.get("content") == "no files here")
    beach = next(m for m in messages if (m.get("content") or "").startswith("look"))
    assert [(a["kind"], a["file_name"], a["sha256"], a.get("platform_file_id")) for a in beach["attachments"]] == [
        ("image", "beach.png", sha(PHOTO), "tg-file-1"),
        ("file", "notes.txt", sha(NOTES), "tg-file-2"),
    ]

    target = tmp_path / "b"
    rc, out, err = run(capsys, target, "import", str(tmp_path / "plain.jsonl"))
    assert rc == 0 and "imported 4 session(s)" in out, err
    before, after = attachment_rows(source), attachment_rows(target)
    assert comparable(after) == comparable(before)
    assert [r["created_at"] for r in sorted(after, key=lambda r: r["file_name"] or "")] == [
        r["created_at"] for r in sorted(before, key=lambda r: r["file_name"] or "")
    ]
    # no bytes came: every row that had a file is now dropped here (the store holds nothing)
    assert media_files(target) == {}
    assert all(r["dropped_at"] is not None for r in after if r["sha256"])
    with SessionDB(target / "state.db") as db:
        assert db.media_bytes() == 0


def test_with_media_the_files_come_too_once_each_and_verified(capsys, source, tmp_path) -> None:
    dump = tmp_path / "full.jsonl"
    lines = export(capsys, source, dump, "--with-media")
    files = [line["media"] for line in lines if "media" in line]
    assert sorted(f["sha256"] for f in files) == sorted([sha(PHOTO), sha(NOTES)])  # the shared photo once
    assert base64.b64decode(next(f for f in files if f["sha256"] == sha(PHOTO))["base64"]) == PHOTO
    first_photo_line = next(i for i, line in enumerate(lines) if line.get("media", {}).get("sha256") == sha(PHOTO))
    first_user = next(i for i, line in enumerate(lines) if "session" in line and sha(PHOTO) in json.dumps(line))
    assert first_photo_line < first_user  # a file comes before the first session that needs it

    target = tmp_path / "b"
    rc, out, err = run(capsys, target, "import", str(dump), "--with-media")
    assert rc == 0 and "imported 4 session(s)" in out and "2 file(s)" in out, err
    assert media_files(target) == {sha(PHOTO): PHOTO, sha(NOTES): NOTES}
    before, after = attachment_rows(source), attachment_rows(target)
    assert comparable(after) == comparable(before)
    assert [r["dropped_at"] for r in after] == [r["dropped_at"] for r in before]  # kept stay kept, dropped stay dropped
    with SessionDB(source / "state.db") as a, SessionDB(target / "state.db") as b:
        assert b.media_bytes() == a.media_bytes() == len(PHOTO) + len(NOTES)

    # and back out: the same lines again
    again = export(capsys, target, tmp_path / "again.jsonl", "--with-media")
    assert [line["media"] for line in again if "media" in line] == files


def test_a_file_that_was_changed_refuses_the_whole_import(capsys, source, tmp_path) -> None:
    dump = tmp_path / "full.jsonl"
    lines = dump_lines = export(capsys, source, dump, "--with-media")
    # the second file line is tampered with; the first is good and must not stay behind either
    positions = [i for i, line in enumerate(lines) if "media" in line]
    bad = dict(lines[positions[1]]["media"])
    data = bytearray(base64.b64decode(bad["base64"]))
    data[10] ^= 0xFF
    bad["base64"] = base64.b64encode(bytes(data)).decode()
    dump_lines[positions[1]] = {"media": bad}
    dump.write_text("".join(json.dumps(line) + "\n" for line in dump_lines))

    target = tmp_path / "b"
    rc, out, err = run(capsys, target, "import", str(dump), "--with-media")
    assert rc == 2 and out == ""
    assert err == (
        f"import: line {positions[1] + 1}: media {bad['sha256'][:12]}: the bytes do not match their sha256"
        " (the file was changed or damaged); nothing was imported\n"
    )
    assert media_files(target) == {}
    assert not (target / "state.db").exists() or attachment_rows(target) == []


def test_an_import_refused_by_the_database_takes_its_files_out_again(capsys, source, tmp_path) -> None:
    dump = tmp_path / "full.jsonl"
    export(capsys, source, dump, "--with-media")
    target = tmp_path / "b"
    with SessionDB(target / "state.db") as db:  # the title "holiday" is taken here
        db.create_session(new_session_id(), "local", title="holiday")
    rc, _, err = run(capsys, target, "import", str(dump), "--with-media")
    assert rc == 2 and "title 'holiday' is already used" in err
    assert media_files(target) == {} and attachment_rows(target) == []
    with SessionDB(target / "state.db") as db:
        assert db.count_sessions() == 1


def test_a_file_line_without_the_flag_is_a_clear_error(capsys, source, tmp_path) -> None:
    dump = tmp_path / "full.jsonl"
    export(capsys, source, dump, "--with-media")
    rc, _, err = run(capsys, tmp_path / "b", "import", str(dump))
    assert rc == 2
    assert err == (
        "import: line 1: this line holds a file's bytes (written by `export --with-media`); import with --with-media\n"
    )


def test_a_file_already_in_the_store_stays_when_the_import_fails(capsys, source, tmp_path) -> None:
    dump = tmp_path / "full.jsonl"
    export(capsys, source, dump, "--with-media")
    target = tmp_path / "b"
    MediaStore(target / "media").save_bytes(PHOTO)  # here before the import: not the import's to take out
    with SessionDB(target / "state.db") as db:
        db.create_session(new_session_id(), "local", title="holiday")
    rc, _, _ = run(capsys, target, "import", str(dump), "--with-media")
    assert rc == 2 and media_files(target) == {sha(PHOTO): PHOTO}


def good_record(**attachment) -> dict:
    att = {"kind": "image", "mime_type": "image/png", "bytes": 3, "sha256": sha(b"abc"), "file_name": "a.png"}
    att.update(attachment)
    return {
        "session": {"id": "s1", "source": "local"},
        "messages": [{"role": "user", "content": "x", "attachments": [att]}],
    }


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"kind": "sticker"}, "message 1: attachment 1: kind must be one of image, audio, voice, video, file"),
        ({"sha256": "../../etc/passwd"}, "message 1: attachment 1: sha256 must be 64 lowercase hex digits"),
        ({"sha256": "A" * 64}, "message 1: attachment 1: sha256 must be 64 lowercase hex digits"),
        ({"bytes": "3"}, 'message 1: attachment 1: bytes must be int or null, got "3"'),
        ({"bytes": -1}, "message 1: attachment 1: bytes must not be negative"),
        ({"file_name": 7}, "message 1: attachment 1: file_name must be str or null, got 7"),
        ({"file_name": "x" * 1001}, "message 1: attachment 1: file_name is longer than 1000 characters"),
        ({"dropped_at": "yesterday"}, "message 1: attachment 1: dropped_at must be int or float or null"),
    ],
)
def test_the_one_validator_names_a_bad_attachment(change, problem) -> None:
    assert check_record(good_record()) is None
    assert (check_record(good_record(**change)) or "").startswith(problem)


def test_attachments_must_be_a_list_of_objects() -> None:
    record = good_record()
    record["messages"][0]["attachments"] = {"kind": "image"}
    assert check_record(record) == "message 1: attachments must be a list"
    record["messages"][0]["attachments"] = ["beach.png"]
    assert check_record(record) == "message 1: attachment 1: must be an object"


def test_import_op_is_all_or_nothing_with_attachments(db) -> None:
    good = good_record()
    bad = good_record(kind="sticker")
    bad["session"]["id"] = "s2"
    with pytest.raises(ValueError, match="record 2"):
        db.write(import_op([good, bad]))
    assert db.get_session("s1") is None
    assert db.read(lambda conn: conn.execute("SELECT COUNT(*) FROM attachments").fetchone()[0]) == 0
    assert db.import_records([good]) == 1
    record = db.export_session("s1")
    (att,) = record["messages"][0]["attachments"]
    assert att["sha256"] == sha(b"abc") and "dropped_at" not in att  # no store given: imported as it was


@pytest.mark.parametrize(
    "line, problem",
    [
        ("{not json", "invalid JSON"),
        ('{"media": []}', 'expected a file as {"media"'),
        ('{"media": {"sha256": "xyz", "bytes": 1, "base64": "YQ=="}}', "media.sha256 must be 64 lowercase hex"),
        (media_line(sha(b"abc"), b"abc").replace('"bytes": 3', '"bytes": 4'), "holds 3 bytes, the line says 4"),
        (media_line(sha(b"abc"), b"abc").replace("YWJj", "YWJ!"), "base64 is not valid base64"),
        (media_line(sha(b"abd"), b"abc"), "the bytes do not match their sha256"),
    ],
)
def test_a_media_line_is_checked(line: str, problem: str) -> None:
    assert read_media_line(media_line(sha(b"abc"), b"abc")) == (sha(b"abc"), b"abc")
    with pytest.raises(ValueError, match=problem.replace("(", r"\(").replace("{", r"\{")):
        read_media_line(line)


def test_stats_count_the_media_bytes_once_per_file(capsys, source) -> None:
    rc, out, _ = run(capsys, source, "stats", "--json")
    assert rc == 0 and json.loads(out)["media_bytes"] == len(PHOTO) + len(NOTES)  # the shared photo once
