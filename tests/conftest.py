import sys

import pytest

from gateway.db import SessionDB, new_session_id

BACKENDS = ("sqlite", "postgres")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "both_backends: the module's tests that take `db` run on SQLite and on Postgres (`backend`)"
    )
    config.addinivalue_line("markers", "sqlite_only(reason): tests SQLite's own machinery; runs on SQLite alone")


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the group into the test's id (else no group)
def pytest_collection_modifyitems(items):
    """The slow tests (daemons killed and restarted, replicas, a browser, a real model, the image)
    run one after another in one xdist worker: two at once on a 2-core machine starve each other's
    daemons of CPU past their waits. The quick tests run in the other worker beside them."""
    for item in items:
        if item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.xdist_group("slow"))


def pytest_generate_tests(metafunc):
    """`backend` over both databases for the storage suites (`pytestmark = pytest.mark.both_backends`),
    as Starlette parametrizes its `anyio_backend`; a test marked sqlite_only says why it is not."""
    marked = metafunc.definition.get_closest_marker
    if "backend" in metafunc.fixturenames and marked("both_backends") and not marked("sqlite_only"):
        metafunc.parametrize("backend", BACKENDS, indirect=True)


@pytest.fixture(autouse=True)
def _no_daemon_left_running():
    """A `chinwag run` a failing test left running is killed at its teardown (tests/fakes/daemon.py)."""
    yield
    daemons = sys.modules.get("tests.fakes.daemon")
    if daemons is not None:
        daemons.kill_leftovers()


@pytest.fixture
def backend(request):
    """The database `db` runs on: SQLite unless the suite asks for both."""
    return getattr(request, "param", "sqlite")


@pytest.fixture(scope="session")
def postgres_server():
    """One private PostgreSQL per test session (tests/storage/postgres/server.py)."""
    from tests.storage.postgres.server import PrivatePostgres

    server = PrivatePostgres().start()
    yield server
    server.stop()


@pytest.fixture
def pg_dsn(postgres_server):
    """A fresh database on it, per test, dropped after it: left to the end, a worker's ~150 databases
    (1.6 GB) took 40-180 s to delete in the session's teardown on a busy disk
    (`--durations`); a drop takes ~0.1 s."""
    dsn = postgres_server.create_database()
    yield dsn
    postgres_server.drop_database(dsn)


@pytest.fixture
def db(backend, tmp_path, request):
    """The storage face: SessionDB on a fresh file, or PostgresSessionDB on a fresh database."""
    if backend == "postgres":
        from gateway.storage.postgres.db import PostgresSessionDB

        database = PostgresSessionDB(request.getfixturevalue("pg_dsn"))
    else:
        database = SessionDB(tmp_path / "state.db")
    yield database
    database.close()


@pytest.fixture
def make_session(db):
    def make(source="telegram", messages=(), **fields):
        sid = new_session_id()
        db.create_session(sid, source, **fields)
        for role, content in messages:
            db.append_message(sid, role, content)
        return sid

    return make
