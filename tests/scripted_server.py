"""A small real OpenAI-style streaming server (asyncio, HTTP/1.1, chunked SSE) whose behaviour
a test scripts: the faults a real engine cannot be made to show on cue (an error status from
the Nth request on, a stream that never ends, a server that is not OpenAI-compatible, one
that goes away). Tokens are words streamed one chunk each, with the usage at the end, as
vLLM and llama.cpp send them. Runs on 127.0.0.1 in a thread of its own."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class Script:
    tokens: int = 4
    token_delay: float = 0.002
    models_status: int = 200
    fail_from: int | None = None
    """From this request (0-based count of completions) on, answer ``fail_status``."""
    fail_status: int = 500
    fail_every: int | None = None
    """Answer ``fail_status`` to every Nth request (1-based) only."""
    hang: bool = False
    """Send one token, then nothing, never ending the stream."""
    close_from: int | None = None
    """From this request on, stop listening (the server goes away)."""


class Server:
    def __init__(self, script: Script):
        self.script = script
        self.completions = 0
        self.bodies: list[dict[str, object]] = []
        """Every completion request's JSON body, in arrival order."""
        self.loop = asyncio.new_event_loop()
        self.server: asyncio.base_events.Server | None = None
        self.port = 0
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        async def up() -> None:
            self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
            self.port = self.server.sockets[0].getsockname()[1]

        self.thread.start()
        asyncio.run_coroutine_threadsafe(up(), self.loop).result(10)

    def stop(self) -> None:
        async def down() -> None:
            if self.server is not None:
                self.server.close()
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in others:
                t.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(down(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                t_head = time.perf_counter()
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                length = 0
                for line in lines[1:]:
                    k, _, v = line.partition(":")
                    if k.strip().lower() == "content-length":
                        length = int(v)
                body = await reader.readexactly(length) if length else b""
                await self.answer(method, path, body, writer, t_head)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def answer(
        self, method: str, path: str, body: bytes, writer: asyncio.StreamWriter, t_head: float
    ) -> None:
        """Answer one request whose head was read at ``t_head`` (``time.perf_counter``)."""
        s = self.script
        if path == "/v1/models":
            doc = {"object": "list", "data": [{"id": "scripted", "object": "model"}]}
            if s.models_status != 200:
                return self.plain(writer, s.models_status, b"<html>not here</html>")
            return self.plain(writer, 200, json.dumps(doc).encode())
        if path == "/metrics":
            return self.plain(writer, 404, b"no metrics")
        if path not in ("/v1/completions", "/v1/chat/completions") or method != "POST":
            return self.plain(writer, 404, b"{}")
        n = self.completions
        self.completions += 1
        if s.close_from is not None and n >= s.close_from:
            if self.server is not None:
                self.server.close()
            writer.close()
            return None
        failing = (s.fail_from is not None and n >= s.fail_from) or (
            s.fail_every is not None and (n + 1) % s.fail_every == 0
        )
        if failing:
            err = {"error": {"message": f"scripted failure {s.fail_status}", "code": 1}}
            return self.plain(writer, s.fail_status, json.dumps(err).encode())
        req = json.loads(body)
        self.bodies.append(req)
        chat = path.endswith("chat/completions")
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        tokens = min(int(req.get("max_tokens", s.tokens)), s.tokens)
        first_ms = None
        for i in range(tokens):
            await asyncio.sleep(s.token_delay)
            piece = {"delta": {"content": f" w{i}"}} if chat else {"text": f" w{i}"}
            self.chunk(writer, {"choices": [{"index": 0, **piece}]})
            await writer.drain()
            if first_ms is None:
                first_ms = (time.perf_counter() - t_head) * 1000.0
            if s.hang:
                await asyncio.sleep(3600)
        usage = {"prompt_tokens": 3, "completion_tokens": tokens, "total_tokens": tokens + 3}
        # as llama.cpp's ``timings``: here the time from the request's head read to the first
        # token handed to the socket, the server's own TTFT (bench/bench_serving.py)
        self.chunk(writer, {"choices": [], "usage": usage, "timings": {"prompt_ms": first_ms}})
        self.raw_chunk(writer, b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return None

    def chunk(self, writer: asyncio.StreamWriter, doc: dict[str, object]) -> None:
        self.raw_chunk(writer, b"data: " + json.dumps(doc).encode() + b"\n\n")

    @staticmethod
    def raw_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    @staticmethod
    def plain(writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
        writer.write(
            f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\n"
            f"Content-Type: application/json\r\n\r\n".encode()
            + body
        )


@contextmanager
def scripted(script: Script) -> Iterator[Server]:
    srv = Server(script)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


if __name__ == "__main__":  # the benchmark's server: python tests/scripted_server.py TOKENS DELAY
    import sys

    srv = Server(Script(tokens=int(sys.argv[1]), token_delay=float(sys.argv[2])))
    srv.start()
    print("listening", srv.url, flush=True)
    while True:
        time.sleep(3600)
