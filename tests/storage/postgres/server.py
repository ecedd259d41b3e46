"""A private PostgreSQL server for tests and benchmarks, started from the Debian binaries.

Not a fake: the real `postgres` of the machine, in a throwaway data directory, listening on
127.0.0.1 at a free port with its unix socket in that directory. `initdb` and `postgres` refuse
to run as root, so as root the cluster belongs to the `postgres` system user (or `nobody` when
the server package did not create one) and both are started through `runuser`. The directory
lives under /tmp itself (pytest's own tmp dirs are 0700 root, which that user cannot enter).

Tests pass `durable=False` (fsync off): a test proves behaviour, not survival of power loss, and
it makes creating a database per test cheap. bench/ keeps fsync on, as SQLite's FULL is.
`.ci/install-postgres` installs the binaries when a machine has none; nothing here skips.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

SUPERUSER = "chinwag"


def find_bindir() -> Path:
    """The directory holding initdb, pg_ctl and postgres: the newest /usr/lib/postgresql/<v>/bin,
    else wherever `initdb` is on PATH."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[4]))
    if candidates:
        return Path(candidates[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(os.path.realpath(initdb)).parent
    raise RuntimeError("no PostgreSQL server binaries found: run .ci/install-postgres (apt-get install postgresql)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_as() -> str | None:
    """The user to run the server as, when we are root (it refuses root)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("running as root and there is no 'postgres' or 'nobody' user to run PostgreSQL as")


class PrivatePostgres:
    """`start()` it, use `dsn(dbname)`, `create_database()`; `stop()` removes everything."""

    def __init__(self, *, durable: bool = False, settings: dict[str, str] | None = None) -> None:
        self.durable = durable
        self.settings = dict(settings or {})  # server settings on top of these defaults (bench: memory)
        self.bindir = find_bindir()
        self.user = _run_as()
        self.root = Path(tempfile.mkdtemp(prefix="chinwag-pg-", dir="/tmp"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = 0
        self._databases = 0
        self._options: list[str] = []

    def _cmd(self, *args: str) -> list[str]:
        return ["runuser", "-u", self.user, "--", *args] if self.user else list(args)

    def start(self) -> "PrivatePostgres":
        if self.user:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        subprocess.run(
            self._cmd(
                str(self.bindir / "initdb"),
                "-D",
                str(self.data),
                "-U",
                SUPERUSER,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            ),
            check=True,
            capture_output=True,
        )
        options = [
            "-c listen_addresses=127.0.0.1",
            f"-c unix_socket_directories={self.root}",
            "-c max_connections=200",
            "-c shared_buffers=128MB",
        ]
        if not self.durable:
            options += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        options += [f"-c {name}={value}" for name, value in self.settings.items()]
        self._options = options
        for attempt in range(5):
            self.port = _free_port()
            started = self._pg_ctl_start()
            if started.returncode == 0:
                return self
            time.sleep(0.1)  # the port was taken meanwhile: try another
        log = self.log.read_text(errors="replace") if self.log.exists() else ""
        self.stop()
        raise RuntimeError(f"PostgreSQL did not start: {started.stderr.strip()}\n{log[-2000:]}")

    def _pg_ctl_start(self) -> subprocess.CompletedProcess:
        return subprocess.run(
            self._cmd(
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.log),
                "-w",
                "-t",
                "30",
                "-o",
                " ".join([*self._options, f"-c port={self.port}"]),
                "start",
            ),
            capture_output=True,
            text=True,
        )

    def halt(self) -> None:
        """Stop the server as an outage would (fast shutdown), keeping its data: `resume()` brings it back."""
        subprocess.run(
            self._cmd(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"),
            capture_output=True,
            check=True,
        )

    def resume(self) -> None:
        """Start the halted server again on the same port (the DSNs given out stay valid)."""
        started = self._pg_ctl_start()
        if started.returncode != 0:
            raise RuntimeError(f"PostgreSQL did not start again: {started.stderr.strip()}")

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname={dbname}"

    def create_database(self, prefix: str = "t") -> str:
        """A new empty database; returns its DSN."""
        import psycopg

        self._databases += 1
        name = f"{prefix}_{os.getpid()}_{self._databases}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        return self.dsn(name)

    def drop_database(self, dsn: str) -> None:
        """Drop a database `create_database` made, its sessions ended first (a test's pool or daemon
        may still hold some)."""
        import psycopg

        name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')

    def stop(self) -> None:
        if self.data.exists() and (self.data / "postmaster.pid").exists():
            subprocess.run(
                self._cmd(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"),
                capture_output=True,
            )
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "PrivatePostgres":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
