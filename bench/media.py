"""What photos cost the gateway: 200 photos of 5 MB each through the real Telegram adapter
(python-telegram-bot polling a Bot-API-shaped server on 127.0.0.1) and the gateway's media intake
(download, keep under media/, base64 for a vision model), beside the same 200 photos at 5 KB and a
bare HTTP download of the same 5 MB bytes -- time per photo (p50/p99) and peak RSS before and after.

    python -m bench.media                       # 200 x 5 MB, baseline 200 x 5 KB
    python -m bench.media --photos 50 --mb 2

The Bot API server runs in a child process so the RSS measured is the gateway's alone. Each photo's
bytes differ (the store is content-addressed: identical photos would be written once). Memory is
read from /proc/self/status: VmHWM (peak) before, after the small photos and after every 50 large
ones -- flat means the peak stops rising after the first photos, i.e. a photo's bytes are let go
before the next.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import multiprocessing
import socket
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bench.stats import percentile
from gateway.runtime.media import MediaIntake
from gateway.storage.media import MediaStore
from platforms.base import InboundMessage
from platforms.telegram.adapter import TelegramAdapter

CHAT = {"id": 42, "type": "private", "first_name": "Ann"}
PERSON = {"id": 42, "is_bot": False, "first_name": "Ann"}


def photo_bytes(index: int, size: int) -> bytes:
    """`size` bytes that differ per photo (a JPEG start, the index, then a repeating pattern)."""
    head = b"\xff\xd8\xff\xe0" + index.to_bytes(8, "big")
    body = bytes(range(256)) * (size // 256 + 1)
    return (head + body)[:size]


# -- the Bot API, as far as polling and file downloads need it (child process) ------------------
def bot_api(port: int, sets: dict[str, tuple[int, int]]) -> None:
    """Serve token -> (photos, bytes each): getMe, getUpdates (the photos, then empty polls), getFile
    and the file download. Everything else answers `true`."""

    def update(token: str, i: int) -> dict[str, Any]:
        size = sets[token][1]
        photo = {"file_id": f"{token}-{i}", "file_unique_id": f"u{i}", "width": 1280, "height": 960, "file_size": size}
        message = {"message_id": i, "date": int(time.time()), "chat": CHAT, "from": PERSON, "photo": [photo]}
        return {"update_id": i, "message": {**message, "caption": f"photo {i}"}}

    async def method(request: web.Request) -> web.Response:
        token, name = request.match_info["token"], request.match_info["method"]
        form: dict[str, Any] = dict(await request.post()) if request.can_read_body else {}
        if not form and request.content_type == "application/json":
            form = await request.json()
        result: Any = True
        if name == "getMe":
            result = {"id": 1, "is_bot": True, "first_name": "Bench", "username": "bench_bot"}
        elif name == "getUpdates":
            offset, count = int(form.get("offset") or 1), sets[token][0]
            result = [update(token, i) for i in range(max(offset, 1), min(offset + 100, count + 1))]
            if not result:
                await asyncio.sleep(float(form.get("timeout") or 0))
        elif name == "getFile":
            file_id = str(form["file_id"])
            size = sets[token][1]
            index = file_id.rsplit("-", 1)[1]
            result = {"file_id": file_id, "file_unique_id": "u", "file_size": size, "file_path": f"photos/{index}.jpg"}
        return web.json_response({"ok": True, "result": result})

    async def download(request: web.Request) -> web.Response:
        token, index = request.match_info["token"], int(request.match_info["index"])
        return web.Response(body=photo_bytes(index, sets[token][1]), content_type="image/jpeg")

    app = web.Application(client_max_size=1 << 20)
    app.router.add_post("/bot{token}/{method}", method)
    app.router.add_get("/file/bot{token}/photos/{index}.jpg", download)
    web.run_app(app, host="127.0.0.1", port=port, print=None, handle_signals=True)


# -- the gateway side (this process) -------------------------------------------------------------
def status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def mb(kb: int) -> str:
    return f"{kb / 1024:.0f} MB"


async def through_telegram(port: int, token: str, photos: int, home: Path, marks: list[tuple[int, int]]) -> list[float]:
    """Poll `photos` photo messages with the real adapter; time each one's intake (getFile, the
    download, the store, base64 for a vision model). Returns seconds per photo."""
    intake = MediaIntake(MediaStore(home / "media", max_bytes=20 << 20), vision=True)
    queue: asyncio.Queue[InboundMessage] = asyncio.Queue()

    async def on_message(msg: InboundMessage) -> None:  # the gateway's intake returns once it has the message
        queue.put_nowait(msg)

    adapter = TelegramAdapter(
        {
            "token": token,
            "base_url": f"http://127.0.0.1:{port}/bot",
            "base_file_url": f"http://127.0.0.1:{port}/file/bot",
            "poll_timeout": 1,
            "watchdog_seconds": 60,
        }
    )
    await adapter.start(on_message)
    seconds: list[float] = []
    try:
        for n in range(1, photos + 1):
            msg = await asyncio.wait_for(queue.get(), 60)
            started = time.perf_counter()
            received = await intake.receive(msg.text, msg.attachments)
            seconds.append(time.perf_counter() - started)
            assert received.image_parts and not received.notices, received.notices
            del received, msg  # what the turn would hand the model, then drop
            if n % 50 == 0:
                marks.append((n, status_kb("VmHWM")))
    finally:
        await adapter.stop()
    return seconds


async def bare_downloads(port: int, token: str, photos: int) -> list[float]:
    """The same bytes fetched straight from the server with aiohttp: the floor under the adapter."""
    seconds = []
    async with aiohttp.ClientSession() as http:
        for i in range(1, photos + 1):
            started = time.perf_counter()
            async with http.get(f"http://127.0.0.1:{port}/file/bot{token}/photos/{i}.jpg") as response:
                await response.read()
            seconds.append(time.perf_counter() - started)
    return seconds


def row(name: str, seconds: list[float]) -> str:
    p50, p99 = percentile(seconds, 0.5) * 1000, percentile(seconds, 0.99) * 1000
    return f"  {name:<44} p50 {p50:8.2f} ms   p99 {p99:8.2f} ms   mean {statistics.mean(seconds) * 1000:8.2f} ms"


async def main_async(photos: int, size: int, small: int) -> None:
    sets = {"111:small": (photos, small), "222:large": (photos, size)}
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = multiprocessing.get_context("spawn").Process(target=bot_api, args=(port, sets), daemon=True)
    server.start()
    try:
        for _ in range(200):  # wait for the server to listen
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.1):
                    break
            except OSError:
                await asyncio.sleep(0.05)
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp)
            before = status_kb("VmHWM")
            marks: list[tuple[int, int]] = []
            small_times = await through_telegram(port, "111:small", photos, home / "small", [])
            after_small = status_kb("VmHWM")
            bare = await bare_downloads(port, "222:large", photos)
            after_bare = status_kb("VmHWM")
            large_times = await through_telegram(port, "222:large", photos, home / "large", marks)
            after_large = status_kb("VmHWM")
            kept = sum(f.stat().st_size for f in (home / "large" / "media").rglob("*") if f.is_file())
            sample = photo_bytes(1, size)
            stage = {}
            started = time.perf_counter()
            for _ in range(20):
                MediaStore(home / "stage", max_bytes=size).save_bytes(photo_bytes(_ + 10_000, size))
            stage["store (write + fsync)"] = (time.perf_counter() - started) / 20
            started = time.perf_counter()
            for _ in range(20):
                base64.b64encode(sample).decode("ascii")
            stage["base64 for the model"] = (time.perf_counter() - started) / 20
    finally:
        server.terminate()
        server.join(5)

    print(f"{photos} photos through the Telegram adapter + media intake (vision on), Bot API on 127.0.0.1")
    print(row(f"{photos} x {small / 1024:.0f} KB (baseline)", small_times))
    print(row(f"bare aiohttp download, {photos} x {size / (1 << 20):.0f} MB", bare))
    print(row(f"{photos} x {size / (1 << 20):.0f} MB (getFile+download+store+b64)", large_times))
    added = statistics.median(large_times) - statistics.median(bare)
    print(f"  added over a bare download of the same bytes: p50 {added * 1000:.2f} ms per photo")
    for name, secs in stage.items():
        print(f"  of which, measured alone: {name:<24} {secs * 1000:8.2f} ms per photo")
    rest = statistics.median(large_times) - sum(stage.values())
    print(f"  the rest (getFile + the SDK's whole-file download + copies): {rest * 1000:.2f} ms per photo")
    print(f"  kept under media/: {kept / (1 << 20):.0f} MB in {photos} files")
    print("peak RSS (VmHWM)")
    print(f"  before                {mb(before)}")
    print(f"  after small photos    {mb(after_small)}")
    print(f"  after bare downloads  {mb(after_bare)}")
    for n, kb in marks:
        print(f"  after {n:>3} large photos {mb(kb)}")
    print(f"  after large photos    {mb(after_large)}  (+{mb(after_large - after_bare)} for one photo in flight)")
    print(f"  current RSS           {mb(status_kb('VmRSS'))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--photos", type=int, default=200)
    parser.add_argument("--mb", type=float, default=5.0, help="size of each large photo")
    parser.add_argument("--kb", type=float, default=5.0, help="size of each baseline photo")
    args = parser.parse_args()
    asyncio.run(main_async(args.photos, int(args.mb * (1 << 20)), int(args.kb * 1024)))


if __name__ == "__main__":
    main()
