"""The load generator's own HTTP client (serving/_http.py) and stream parser (serving/_load.py's
``_Events``): a response is parsed the same however its bytes are cut into segments (every
cut tried), each piece keeps the time it arrived, a kept connection is reused and opened
again when the server had closed it; TTFT, ITL, E2EL and usage come from those times."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from http_helpers import make_certificates, run_async
from tunescope.serving import Connection, Origin
from tunescope.serving._http import TransportError, _Wire, get
from tunescope.serving._load import RequestResult, _Events

CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def chunked(*pieces: bytes, trailers: bytes = b"") -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n" + trailers + b"\r\n"


def sse(doc: Any) -> bytes:
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


def token(text: str) -> bytes:
    return sse({"choices": [{"index": 0, "text": text}]})


def cuts(raw: bytes) -> Iterator[list[bytes]]:
    """``raw`` whole, a byte at a time, and cut in two and in three at every place."""
    yield [raw]
    yield [raw[i : i + 1] for i in range(len(raw))]
    for i in range(1, len(raw)):
        yield [raw[:i], raw[i:]]
    for i in range(1, len(raw), 7):
        for j in range(i + 1, len(raw), 5):
            yield [raw[:i], raw[i:j], raw[j:]]


class Fed:
    """A wire fed ``segments`` as a socket would, its body's pieces taken once the head has
    come (as the caller does: early pieces wait with their arrival times)."""

    def __init__(self, segments: list[bytes]):
        loop = asyncio.new_event_loop()
        try:
            wire = _Wire(loop)
            wire.begin()
            self.pieces: list[tuple[bytes, float]] = []
            self.attached_at: float | None = None
            for seg in segments:
                wire.data_received(seg)
                if self.attached_at is None and wire.head.done() and not wire.head.exception():
                    self.attached_at = time.perf_counter()
                    wire.attach(lambda piece, t: self.pieces.append((piece, t)))
            ok = wire.head.done() and wire.head.exception() is None
            self.head = wire.head.result() if ok else None
            self.ended = wire.done.done() and wire.done.exception() is None
            self.error = next(
                (f.exception() for f in (wire.head, wire.done) if f.done() and f.exception()),
                None,
            )
            self.keep = wire.keep
            self.phase = wire.phase
        finally:
            loop.close()

    @property
    def body(self) -> bytes:
        return b"".join(p for p, _ in self.pieces)


def test_a_chunked_body_is_the_same_however_its_bytes_are_cut() -> None:
    body = [token(" a"), token(" b") + token(" c"), sse({"choices": [], "usage": {}}), b"x;y"]
    # a chunk extension, a token per chunk, two in one, a trailer
    raw = CHUNKED + b"5;ext=1\r\nhello\r\n" + chunked(*body, trailers=b"X-Trailer: 1\r\n")
    n = 0
    for segments in cuts(raw):
        fed = Fed(segments)
        assert fed.head is not None and fed.head[0] == 200, segments
        assert fed.head[1]["transfer-encoding"] == "chunked"
        assert fed.body == b"hello" + b"".join(body), segments
        assert fed.ended and fed.keep and fed.phase == "idle", segments
        n += 1
    assert n > 2 * len(raw)


def test_bytes_past_the_response_make_the_connection_not_reused() -> None:
    fed = Fed([CHUNKED + chunked(b"hello") + b"HTTP/1.1 200 OK\r\n"])
    assert fed.body == b"hello" and fed.ended and not fed.keep
    fed = Fed([b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello!", b"more"])
    assert fed.body == b"hello" and fed.ended and not fed.keep


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world",
        b"HTTP/1.1 200 OK\nContent-Length: 11\n\nhello world",  # bare LF line ends
        b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhello world",
    ],
)
def test_a_content_length_body_in_any_cut(raw: bytes) -> None:
    for segments in cuts(raw):
        fed = Fed(segments)
        assert fed.body == b"hello world" and fed.ended, segments
        assert fed.keep == (b"close" not in raw)


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (CHUNKED + b"zz\r\nhello\r\n", "malformed chunked body"),
        (CHUNKED + b"-5\r\nhello\r\n", "malformed chunked body"),
        (CHUNKED + b"5" * 5000, "malformed chunked body"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", "malformed Content-Length"),
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP response"),
        (b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 20000, "response head too long"),
    ],
)
def test_a_broken_response_is_one_transport_error(raw: bytes, error: str) -> None:
    fed = Fed([raw])
    assert isinstance(fed.error, TransportError) and error in str(fed.error)
    assert not fed.ended and not fed.keep and fed.phase == "closed"


def test_pieces_keep_the_time_they_arrived_not_the_time_they_were_taken() -> None:
    # the head and part of the first token in one segment: that part waits for the sink
    raw = CHUNKED + chunked(token(" a"), token(" b"))
    cut = raw.index(b"data") + 20
    before = time.perf_counter()
    fed = Fed([raw[:cut], raw[cut:]])
    assert fed.attached_at is not None and fed.body == token(" a") + token(" b")
    (_, t_early), *later = fed.pieces
    assert before <= t_early <= fed.attached_at  # stamped on arrival, before the sink came
    assert later and all(t >= fed.attached_at for _, t in later)


def test_a_sink_that_raises_ends_the_exchange_with_its_error() -> None:
    loop = asyncio.new_event_loop()
    try:
        wire = _Wire(loop)
        wire.begin()
        wire.data_received(CHUNKED)

        def refuse(piece: bytes, t: float) -> None:
            raise TransportError("body longer than 3 bytes")

        wire.attach(refuse)
        wire.data_received(chunked(b"hello"))
        assert wire.done.done() and str(wire.done.exception()) == "body longer than 3 bytes"
        assert wire.phase == "closed" and not wire.keep
    finally:
        loop.close()


# ---------------------------------------------------------------------------- the stream
def events(pieces: list[tuple[bytes, float]], chat: bool = False) -> RequestResult:
    res = RequestResult(0, 0.0, 0.0, None, [], None, None, None, 200)
    sink = _Events(res, 10.0, chat).feed
    for piece, t in pieces:
        sink(piece, t)
    return res


def test_ttft_itl_e2el_and_usage_come_from_arrival_times() -> None:
    usage = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    stream = (
        sse({"choices": [{"index": 0, "text": ""}]})  # an empty first chunk: not a token
        + token(" a")
        + token(" b")
        + token(" c")
        + sse({"choices": [], "usage": usage, "timings": {"prompt_ms": 1.5}})
        + b"data: [DONE]\n\n"
    )
    s1, s3 = stream.index(token(" a")), stream.index(token(" c"))
    # cut inside " a"'s line and twice inside " c"'s: an event is timed by the piece that
    # completed it
    pieces = [
        (stream[: s1 + 10], 10.5),
        (stream[s1 + 10 : s3 + 10], 10.75),
        (stream[s3 + 10 : s3 + 20], 11.0),
        (stream[s3 + 20 :], 11.25),
    ]
    assert b"".join(p for p, _ in pieces) == stream
    res = events(pieces)
    assert res.ttft == 0.75  # " a" completed with the second piece
    assert res.itl == [0.0, 0.5]  # " b" in the same piece; " c" completed at 11.25
    assert res.done and res.e2el == 1.25
    assert (res.prompt_tokens, res.completion_tokens) == (7, 3)
    assert res.engine_timings == {"prompt_ms": 1.5} and res.error is None
    # the same stream a byte at a time, all at one time: one token, then gaps of 0
    res = events([(stream[i : i + 1], 12.0) for i in range(len(stream))])
    assert (res.ttft, res.itl, res.e2el, res.completion_tokens) == (2.0, [0.0, 0.0], 2.0, 3)


def test_chat_deltas_reasoning_and_what_is_not_a_token() -> None:
    stream = (
        sse({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
        + b": a comment line\n\n"
        + b"data: {not json}\n\n"
        + b'data: {"choices": [{"delta": {"content": "x"}}]} trailing\n\n'  # not one document
        + b"data: [1, 2]\n\n"
        + b"event: ping\r\ndata:"
        + json.dumps({"choices": [{"delta": {"reasoning_content": "hm"}}]}).encode()
        + b"\r\n\r\n"
        + sse({"choices": [{"delta": {"content": "y"}}]})
        + sse({"error": {"message": "engine hiccup"}})
        + b"data: [DONE]\n\n"
        + sse({"choices": [{"delta": {"content": "after the end"}}]})
    )
    res = events([(stream[:60], 10.25), (stream[60:], 10.5)], chat=True)
    assert res.ttft == 0.5 and res.itl == [0.0]  # the reasoning and "y" only
    assert res.error == "error in the stream: engine hiccup"
    assert res.done and res.e2el == 0.5 and res.completion_tokens is None


# ---------------------------------------------------------------------------- on a socket
class Server:
    """Answers requests (Content-Length bodies naming the path); with ``drop`` = n, the nth
    request of each connection (from 0) is not answered and the connection closed."""

    def __init__(self, drop: int | None):
        self.drop = drop
        self.connections = 0
        self.requests = 0
        self.tasks: list[asyncio.Task[Any]] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.append(task)
        self.connections += 1
        try:
            for n in range(1_000):
                head = await reader.readuntil(b"\r\n\r\n")
                self.requests += 1
                if n == self.drop:
                    break
                body = b'{"path": "%s"}' % head.split(b" ", 2)[1]
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            await writer.wait_closed()

    def run(
        self, requests: int, tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None
    ) -> list[tuple[int, bytes] | str]:
        """GET /p0, /p1... on one Connection: (status, body) or the TransportError's text.
        ``tls``: the server's context and the client's."""

        async def main() -> list[tuple[int, bytes] | str]:
            server_tls, client_tls = tls or (None, None)
            server = await asyncio.start_server(self.handle, "127.0.0.1", 0, ssl=server_tls)
            port = server.sockets[0].getsockname()[1]
            scheme = "https" if tls else "http"
            conn = Connection(Origin.parse(f"{scheme}://127.0.0.1:{port}"), client_tls)
            out: list[tuple[int, bytes] | str] = []
            try:
                for i in range(requests):
                    try:
                        out.append(await get(conn, f"/p{i}", 5.0))
                    except TransportError as exc:
                        out.append(str(exc))
                return out
            finally:
                conn.close()
                await asyncio.gather(*self.tasks)  # each ends with its connection
                server.close()
                await server.wait_closed()

        return run_async(main())


def test_a_kept_connection_is_reused() -> None:
    srv = Server(drop=None)
    assert srv.run(3) == [(200, b'{"path": "/p%d"}' % i) for i in range(3)]
    assert (srv.connections, srv.requests) == (1, 3)


def test_https_with_the_servers_certificate_checked(tmp_path: Path) -> None:
    ca, cert, key = make_certificates(tmp_path)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    srv = Server(drop=None)
    trusted = ssl.create_default_context(cafile=str(ca))
    assert srv.run(2, (server_tls, trusted)) == [(200, b'{"path": "/p%d"}' % i) for i in (0, 1)]
    assert (srv.connections, srv.requests) == (1, 2)
    untrusted = Server(drop=None).run(1, (server_tls, ssl.create_default_context()))
    assert len(untrusted) == 1 and "CERTIFICATE_VERIFY_FAILED" in str(untrusted[0])
    assert str(untrusted[0]).startswith("cannot connect to https://127.0.0.1:")


def test_a_request_on_a_kept_connection_the_server_dropped_is_sent_again() -> None:
    srv = Server(drop=1)  # every connection's second request: closed, unanswered
    assert srv.run(3) == [(200, b'{"path": "/p%d"}' % i) for i in range(3)]
    assert (srv.connections, srv.requests) == (3, 5)  # /p1 and /p2 sent twice


def test_a_fresh_connection_closed_unanswered_is_an_error_not_a_retry() -> None:
    srv = Server(drop=0)
    assert srv.run(1) == ["the server closed the connection unanswered"]
    assert (srv.connections, srv.requests) == (1, 1)


def test_the_stored_itls_are_rounded_to_a_tenth_of_a_millisecond() -> None:
    itl = [0.00512349, 0.00005001, 0.0, 1.23456789, 0.00004999]
    res = RequestResult(0, 100.0, 1.5, 0.25, itl, 7, 6, None, 200, done=True)
    kind, t, name, step, duration, value, data = res.event()
    assert (kind, t, name, step, duration, value) == ("request", 100.0, "ok", 0, 1.5, 0.25)
    assert data["itl"] == [0.0051, 0.0001, 0.0, 1.2346, 0.0] == [round(x, 4) for x in itl]
    assert data["tpot"] == (1.5 - 0.25) / 5 and data["t_first"] == 100.25
    assert res.event() is res.event()  # built once: the writer and the table share it
