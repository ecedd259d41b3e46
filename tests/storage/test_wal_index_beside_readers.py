"""Another process reading the database beside the writer (`chinwag sessions list`, `doctor`, a
backup, a test polling the outbox) must not take the writer down.

Found by the Feishu crash test: the restarted daemon died of SIGBUS inside COMMIT about every other
run while the test polled state.db. The writer read the wal-index header with `open(-shm)` and
closed the file after each batch; closing any descriptor of a file drops every POSIX (fcntl) lock
the process holds on it, SQLite's shared "a connection is using this wal-index" lock included. The
next process to open the database then believed it was the only one, reset the `-shm` file under
the writer's memory map, and the writer's next touch of it was a bus error.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time

from tests.cli.test_cli_run import ROOT

WRITES = 300

WRITER = f"""
import sys, time
from gateway.db import SessionDB, new_session_id
db = SessionDB(sys.argv[1])
sid = new_session_id()
db.create_session(sid, "tool")
for i in range({WRITES}):
    db.append_message(sid, "user", f"message {{i}}")
    time.sleep(0.002)
db.close()
"""


def test_readers_in_other_processes_do_not_crash_the_writer(tmp_path):
    path = tmp_path / "state.db"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], cwd=ROOT, stderr=subprocess.PIPE)
    reads = 0
    deadline = time.monotonic() + 60
    while writer.poll() is None and time.monotonic() < deadline:
        try:
            conn = sqlite3.connect(path)
            try:
                conn.execute("SELECT COUNT(*) FROM messages").fetchone()
                reads += 1
            finally:
                conn.close()  # each reader opens and closes the database, as a CLI command does
        except sqlite3.OperationalError:
            pass  # not created yet
        time.sleep(0.001)
    _, err = writer.communicate(timeout=30)
    assert writer.returncode == 0, f"writer died ({writer.returncode}) after {reads} reads: {err.decode()[-600:]}"
    assert reads > 0
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == WRITES
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()
