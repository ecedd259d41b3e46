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
