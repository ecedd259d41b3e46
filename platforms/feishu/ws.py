"""Running lark-oapi's long-connection (websocket) client beside the gateway's event loop.

The SDK's `lark.ws.Client` schedules all its work on a module-level event loop chosen when
`lark_oapi.ws.client` is first imported, and `start()` blocks forever in that loop. So each
connection attempt gets its own thread and its own fresh loop (installed as that module loop
before the client is built), and reports back to the gateway's loop with `call_soon_threadsafe`.

Reconnecting is ours, not the SDK's: the client runs with ``auto_reconnect=False``, a lost
connection ends the session, and the adapter starts a new one after a jittered back-off
(platforms.helpers.Backoff). That keeps one retry policy, lets the watchdog force a fresh
connection, and makes stopping a matter of stopping one loop.

Only one session runs at a time per process (the SDK's module loop is a global).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable

import lark_oapi as lark
import lark_oapi.ws.client as sdk_ws

from gateway.redact import redact_loggers

log = logging.getLogger(__name__)

WS_LOGGERS = ("websockets.client", "websockets")


@dataclass
class WsHooks:
    """Callbacks the SDK client fires on its own thread (already marshalled to the gateway)."""

    connected: Callable[[], None]
    alive: Callable[[], None]
    disconnected: Callable[[], None]


class HookedWsClient(lark.ws.Client):
    """The SDK's client, reporting connection state and every frame (events, pongs) as liveness.

    The overridden methods are the SDK's internal steps; each calls the original unchanged.
    """

    def __init__(self, *args: Any, hooks: WsHooks, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._hooks = hooks

    async def _connect(self) -> None:
        await super()._connect()
        if self._conn is not None:
            self._hooks.connected()

    async def _handle_message(self, msg: bytes) -> None:
        self._hooks.alive()  # data frames and pongs both prove the connection works
        await super()._handle_message(msg)

    async def _disconnect(self) -> None:
        await super()._disconnect()
        self._hooks.disconnected()


class WsSession:
    """One long connection: an SDK client on its own thread and loop, until it ends or is stopped."""

    def __init__(
        self,
        make_client: Callable[[WsHooks], lark.ws.Client],
        gateway_loop: asyncio.AbstractEventLoop,
        on_connected: Callable[[], None],
        on_alive: Callable[[], None],
        on_ended: Callable[[], None],
    ) -> None:
        self._make_client = make_client
        self._gateway_loop = gateway_loop
        self._on_connected, self._on_alive, self._on_ended = on_connected, on_alive, on_ended
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: lark.ws.Client | None = None
        self._stop_requested = False
        self._cleaning = False
        self._thread = threading.Thread(target=self._main, name="feishu-ws", daemon=True)

    def start(self) -> None:
        redact_loggers(WS_LOGGERS)  # the long-connection URL carries a ticket; websockets logs it at DEBUG
        self._thread.start()

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop the client's loop and wait (bounded) for its thread; never hangs the caller."""
        self._stop_requested = True
        deadline = asyncio.get_running_loop().time() + timeout
        # A single loop.stop() can be lost: the SDK's start() runs the loop several times in a
        # row (connect, then serve), and a stop landing as one run ends is swallowed. So ask
        # again until the thread is gone.
        while self._thread.is_alive() and asyncio.get_running_loop().time() < deadline:
            loop = self._loop
            if loop is not None:
                try:
                    loop.call_soon_threadsafe(self._stop_loop, loop)
                except RuntimeError:
                    pass  # already closed: the thread is finishing on its own
            await asyncio.to_thread(self._thread.join, 0.1)
        if self._thread.is_alive():
            # Stuck in a blocking call inside the SDK (its endpoint request has no timeout).
            # The thread is a daemon; it is abandoned rather than allowed to hang shutdown.
            log.warning("feishu long connection thread did not stop within %.0fs; abandoned", timeout)

    def _stop_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._cleaning:  # runs on the client's loop; never interrupt the cleanup
            loop.stop()

    # -- the thread ----------------------------------------------------------------------------
    def _notify(self, callback: Callable[[], None]) -> None:
        try:
            self._gateway_loop.call_soon_threadsafe(callback)
        except RuntimeError:
            pass  # the gateway loop is closed: nobody left to tell

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        try:
            if self._stop_requested:
                return
            sdk_ws.loop = loop  # the SDK schedules on this module global; see module docstring
            hooks = WsHooks(
                connected=lambda: self._notify(self._on_connected),
                alive=lambda: self._notify(self._on_alive),
                disconnected=lambda: self._notify(self._on_ended),
            )
            self._client = self._make_client(hooks)
            self._client.start()
        except RuntimeError as exc:
            if not self._stop_requested:
                log.warning("feishu long connection loop ended: %s", exc)
        except Exception as exc:  # auth failure, endpoint refused, ...: the adapter retries
            log.warning("feishu long connection failed: %s: %s", type(exc).__name__, exc)
        finally:
            self._cleanup(loop)
            self._notify(self._on_ended)

    def _cleanup(self, loop: asyncio.AbstractEventLoop) -> None:
        self._cleaning = True
        try:
            tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in tasks:
                task.cancel()
            if tasks:
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            conn = getattr(self._client, "_conn", None) if self._client else None
            if conn is not None:
                loop.run_until_complete(asyncio.wait_for(conn.close(), 2.0))
        except Exception as exc:  # best effort: the socket dies with the loop anyway
            log.debug("feishu ws cleanup: %s", exc)
        finally:
            loop.close()
