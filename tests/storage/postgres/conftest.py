"""One private PostgreSQL per test session (tests/storage/postgres/server.py), a fresh database
per test."""

import pytest

from tests.storage.postgres.server import PrivatePostgres


@pytest.fixture(scope="session")
def postgres_server():
    server = PrivatePostgres().start()
    yield server
    server.stop()


@pytest.fixture
def pg_dsn(postgres_server):
    return postgres_server.create_database()


@pytest.fixture
def db(pg_dsn):
    """The storage face on Postgres: the shared suites (test_shared_suites.py) run against it."""
    from gateway.storage.postgres.db import PostgresSessionDB

    database = PostgresSessionDB(pg_dsn)
    yield database
    database.close()
