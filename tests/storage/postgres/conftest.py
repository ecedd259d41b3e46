"""The Postgres backend's own tests: `db` is the Postgres face here (the private server and a fresh
database per test are tests/conftest.py's `postgres_server` and `pg_dsn`)."""

import pytest


@pytest.fixture
def backend():
    return "postgres"
