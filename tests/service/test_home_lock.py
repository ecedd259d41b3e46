"""One process per home: a second `chinwag run`/`chat` on a home in use says who holds it and exits 1;
read-only commands work beside it; the lock goes with the process, even when it is SIGKILLed."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from gateway.service.lock import HomeLock, HomeLocked, holder
from tests.cli.test_cli_run import chinwag, clean_env, read_until, start_run


def test_lock_names_its_holder_and_is_released(tmp_path):
    first = HomeLock(tmp_path).acquire()
    assert holder(tmp_path) == os.getpid()
    with pytest.raises(HomeLocked) as caught:
        HomeLock(tmp_path).acquire()  # a second open file description conflicts, even in one process
    assert caught.value.pid == os.getpid() and f"already running (pid {os.getpid()})" in str(caught.value)
    first.release()
    assert holder(tmp_path) is None
    with HomeLock(tmp_path):
        assert holder(tmp_path) == os.getpid()


async def test_second_gateway_on_a_home_exits_and_read_only_commands_still_work(tmp_path):
    env = clean_env(tmp_path)
    proc = await start_run(env)
    seen: list[str] = []
    try:
        proc.stdin.write(b"hello\n")
        await proc.stdin.drain()
        await asyncio.wait_for(read_until(proc.stdout, "No model is configured", seen), 30)  # up and answering
        for command in (["run"], ["chat"]):
            code, out, err = await chinwag(command, env, "hi\n")
            assert code == 1, (out, err)
            assert f"already running (pid {proc.pid})" in err
            assert "no model configured" not in err  # the refusal is all it says
        code, out, err = await chinwag(["sessions", "list"], env)
        assert code == 0, err
    finally:
        proc.send_signal(signal.SIGKILL)  # the kernel drops the lock with the process
        await proc.wait()
    assert holder(tmp_path / "home") is None
    code, out, err = await chinwag(["chat"], env, "/help\n")
    assert code == 0, err
