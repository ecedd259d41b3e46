"""The attachments' files in the database replicas share (gateway/storage/postgres/files.py): a file
one replica keeps is read by another whose disk never had it, and the sweep clears what no kept
row references, in the database as on disk."""

from pathlib import Path

from gateway.storage.media import SWEEP_GRACE, AttachmentRow, MediaStore
from gateway.storage.postgres.db import PostgresSessionDB


def test_a_file_one_replica_keeps_another_reads_and_the_sweep_clears(tmp_path: Path, pg_dsn: str) -> None:
    with PostgresSessionDB(pg_dsn) as db:
        one = MediaStore(tmp_path / "one" / "media", shared=db.shared_files())
        two = MediaStore(tmp_path / "two" / "media", shared=db.shared_files())
        kept, loose = one.save_bytes(b"voice note " * 100), one.save_bytes(b"never named by a row")
        db.create_session("s", "telegram", user_id="u1")
        row = AttachmentRow("voice", "audio/ogg", kept.size, kept.sha256, "note.ogg")
        db.append_message("s", "user", "[voice: note.ogg]", attachments=[row])

        assert not two.path_for(kept.sha256).exists() and two.exists(kept.sha256)
        assert two.read(kept.sha256) == b"voice note " * 100 and two.path_for(kept.sha256).is_file()
        assert two.sweep(db.referenced_media()) == 0  # everything is younger than the grace
        later = two.path_for(kept.sha256).stat().st_mtime + SWEEP_GRACE + 1
        assert two.sweep(db.referenced_media(), now=later) == 1  # the loose file's row in the database
        assert not two.exists(loose.sha256) and two.exists(kept.sha256)

        db.delete_session("s")
        assert two.sweep(db.referenced_media(), now=later) == 2  # two's cached copy, and the database's
        assert one.path_for(kept.sha256).is_file()  # one's own disk is one's sweep's to clear
        assert db.shared_files().get(kept.sha256) is None
