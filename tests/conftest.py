import pytest

from gateway.db import SessionDB, new_session_id


@pytest.fixture
def db(tmp_path):
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
