"""The load generator: a sweep of load levels against an OpenAI-compatible server.

Each level is one trial of the run (named ``c4`` for concurrency 4, ``r0.5`` for 0.5
requests/s); each request one ``request`` event (see docs/serving.md and the serving data
contract): t = when it was sent, duration = end-to-end latency, value = TTFT, data = TTFT,
TPOT, inter-token latencies, token counts from the server's ``usage``, the error. The
engine's Prometheus page is scraped at 1 Hz into the level's ``serve.*`` series, once more
before the first request and once after the level drained (so counters' growth over a level
is exact); the first scrape inside a level comes :data:`FIRST_SCRAPE_S` after its start, so
that a level shorter than the interval still shows the engine under its load (its queue).

Timing: a request's clock starts just before its bytes are written; the first token is the
first streamed chunk whose text (or chat delta content) is not empty; TTFT, ITL and E2EL are
differences of ``time.perf_counter()``, a chunk's read where the bytes that complete it
arrive (the client's protocol, before any task wakes: :class:`_Events`); stored times are
:func:`tunescope._clock.now`.

Bounds: every level sends at most ``requests`` requests and starts none after ``seconds``;
every request ends by the per-request ``timeout``; a rate level keeps at most
:data:`MAX_IN_FLIGHT` requests open (an arrival past it waits). Requests go to the base URL
only; the metrics page is the one given (by default the same server's ``/metrics``).

A level fails (its trial ``failed`` with the reason, the sweep stops) when the server cannot
be reached or when no request of the level succeeded; errors of some requests are recorded
per request and the level completes.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tunescope import _clock
from tunescope.serving._engines import Scrape, detect, parse_exposition, parse_slots
from tunescope.serving._http import Connection, Expiry, Origin, TransportError, get
from tunescope.serving._spec import Prompt, TokenSpec, synthetic_prompt
from tunescope.store import Batch, TrialEnd, TrialSpec, Writer, new_key

__all__ = [
    "MAX_IN_FLIGHT",
    "EngineInfo",
    "LevelResult",
    "LoadConfig",
    "LoadError",
    "RequestResult",
    "probe",
    "run_sweep",
    "send",
    "trial_name",
]

MAX_IN_FLIGHT = 1024
"""The most requests a rate level keeps open at once."""
MAX_ITL = 4096
"""Inter-token latencies kept per request."""
SCRAPE_S = 1.0
"""Seconds between scrapes of the engine's metrics."""
FIRST_SCRAPE_S = 0.25
"""Seconds from a level's start to its first scrape under load (then every SCRAPE_S)."""
DRAIN_WAIT_S = 3.0
"""How long the final scrape of a level waits for the engine to report no running request."""
PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class EngineInfo:
    """What the server says about itself."""

    model: str | None
    engine: str | None
    version: str | None
    slots: int | None
    metrics_ok: bool
    dims: dict[str, int] = field(default_factory=dict)
    """The model's size as the server says it (``model.weights_bytes``, ``model.n_params``,
    ``model.n_embd``: llama.cpp's ``meta`` of ``/v1/models``), for sizing."""


@dataclass(frozen=True)
class LoadConfig:
    url: str
    origin: Origin
    mode: str  # "concurrency" | "rate"
    levels: list[float]
    requests: int | None
    seconds: float | None
    prompt_tokens: TokenSpec
    output_tokens: TokenSpec
    prompts: list[Prompt] | None
    api: str  # "completions" | "chat"
    model: str | None
    slo: dict[str, float]
    metrics: Origin | None
    metrics_path: str
    timeout: float
    burstiness: float | None
    ignore_eos: bool
    seed: int
    run: str
    store_url: str
    project: str
    os_user: str
    engine_trial_key: str | None = None


@dataclass
class RequestResult:
    index: int
    t: float
    e2el: float
    ttft: float | None
    itl: list[float]
    prompt_tokens: int | None
    completion_tokens: int | None
    error: str | None
    status: int | None
    unreachable: bool = False
    engine_timings: dict[str, Any] | None = None
    """llama.cpp's ``timings`` of the request, when its stream carried them (not stored)."""
    done: bool = False
    """Whether the stream's ``[DONE]`` came."""
    _event: tuple[Any, ...] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def tpot(self) -> float | None:
        n = self.completion_tokens
        if self.ttft is None or n is None or n < 2:
            return None
        return (self.e2el - self.ttft) / (n - 1)

    def event(self) -> tuple[Any, ...]:
        """The request's stored form, once it is complete (built once: the writer and the
        CLI's table both read it)."""
        if self._event is not None:
            return self._event
        data = {
            "ttft": self.ttft,
            "tpot": self.tpot,
            # to 0.1 ms: round(x, 4)'s values at a quarter of its cost (it converts to
            # decimal and back); the two differ only where x * 1e4 rounds onto a tie
            "itl": [round(x * 1e4) / 1e4 for x in self.itl[:MAX_ITL]],
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "t_first": None if self.ttft is None else self.t + self.ttft,
            "error": self.error,
            "status": self.status,
        }
        name = "ok" if self.ok else "error"
        self._event = ("request", self.t, name, self.index, self.e2el, self.ttft, data)
        return self._event


@dataclass
class LevelResult:
    name: str
    level: float
    start: float
    end: float = 0.0
    # not in the repr: asyncio.run formats its task's result (this) when it restores the
    # SIGINT handler, and every request's repr cost ~12 µs a request at each level's end
    results: list[RequestResult] = field(default_factory=list, repr=False)
    failed: str | None = None
    samples: list[tuple[Any, ...]] = field(default_factory=list, repr=False)
    key: str = ""


def trial_name(mode: str, level: float) -> str:
    """``c4`` for concurrency 4, ``r0.5`` for 0.5 requests/s."""
    return f"c{int(level)}" if mode == "concurrency" else f"r{level:g}"


def _one_line(text: str, limit: int = 300) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _error_message(status: int, body: bytes) -> str:
    msg = body[:2000].decode("utf-8", "replace")
    try:
        doc = json.loads(msg)
        err = doc.get("error", doc) if isinstance(doc, dict) else doc
        if isinstance(err, dict):
            msg = str(err.get("message") or err)
        elif isinstance(err, str):
            msg = err
    except ValueError:
        pass
    return _one_line(f"HTTP {status}: {msg}" if msg.strip() else f"HTTP {status}")


# ---------------------------------------------------------------------------- probe
async def _probe(cfg: LoadConfig) -> EngineInfo:
    conn = Connection(cfg.origin)
    try:
        try:
            status, body = await get(conn, cfg.origin.path("/v1/models"), PROBE_TIMEOUT_S)
        except (TransportError, asyncio.TimeoutError) as exc:
            why = str(exc) or f"no answer within {PROBE_TIMEOUT_S:g} s"
            raise LoadError(f"{cfg.url}: the server cannot be reached ({why})") from None
        models: list[str] = []
        try:
            doc = json.loads(body)
            models = [str(m["id"]) for m in doc["data"]]
        except (ValueError, KeyError, TypeError):
            doc = None
        if status != 200 or doc is None:
            raise LoadError(
                f"{cfg.url}: not an OpenAI-compatible server (GET "
                f"{cfg.origin.path('/v1/models')} answered HTTP {status}"
                f"{'' if status != 200 else ' without a model list'})"
            )
        model = cfg.model or (models[0] if models else None)
        dims = _model_dims(doc, model)
        engine = version = None
        slots: int | None = None
        metrics_ok = False
        if cfg.metrics is not None:
            mconn = Connection(cfg.metrics)
            try:
                st, page = await get(mconn, cfg.metrics_path, PROBE_TIMEOUT_S)
                if st == 200:
                    metrics_ok = True
                    engine = detect(parse_exposition(page.decode("utf-8", "replace")))
            except (TransportError, asyncio.TimeoutError):
                pass
            finally:
                mconn.close()
        if engine is None and "llamacpp" in body.decode("utf-8", "replace"):
            engine = "llamacpp"
        version, slots = await _engine_details(conn, cfg.origin, engine)
        return EngineInfo(model, engine, version, slots, metrics_ok, dims)
    finally:
        conn.close()


MODEL_DIMS = {"size": "model.weights_bytes", "n_params": "model.n_params", "n_embd": "model.n_embd"}
"""llama.cpp's ``meta`` keys of a ``/v1/models`` entry, by the trial param they become."""


def _model_dims(doc: Any, model: str | None) -> dict[str, int]:
    """The served model's dimensions from its ``/v1/models`` entry's ``meta`` (llama.cpp:
    ``size``, the bytes of its weights; ``n_params``; ``n_embd``); empty where not said."""
    for m in doc.get("data") or ():
        meta = m.get("meta") if isinstance(m, dict) else None
        if isinstance(meta, dict) and (model is None or str(m.get("id")) == model):
            return {
                param: v
                for key, param in MODEL_DIMS.items()
                if isinstance(v := meta.get(key), int) and not isinstance(v, bool) and v > 0
            }
    return {}


async def _json_at(conn: Connection, path: str) -> Any:
    try:
        st, body = await get(conn, path, PROBE_TIMEOUT_S)
        return json.loads(body) if st == 200 else None
    except (TransportError, asyncio.TimeoutError, ValueError):
        return None


async def _engine_details(
    conn: Connection, origin: Origin, engine: str | None
) -> tuple[str | None, int | None]:
    """The engine's version and its parallel slots, where it says them."""
    root = origin.prefix[:-3] if origin.prefix.endswith("/v1") else origin.prefix
    version: Any = None
    slots: int | None = None
    if engine == "llamacpp":
        props = await _json_at(conn, root + "/props")
        if isinstance(props, dict):
            version = props.get("build_info")
            if isinstance(props.get("total_slots"), int):
                slots = props["total_slots"]
        if slots is None:
            got = parse_slots(await _json_at(conn, root + "/slots"))
            slots = None if got is None else got[0]
    elif engine == "vllm":
        doc = await _json_at(conn, root + "/version")
        version = doc.get("version") if isinstance(doc, dict) else None
    elif engine == "tgi":
        doc = await _json_at(conn, root + "/info")
        version = doc.get("version") if isinstance(doc, dict) else None
    elif engine == "sglang":
        doc = await _json_at(conn, root + "/get_server_info")
        version = doc.get("version") if isinstance(doc, dict) else None
    return (str(version) if version else None), slots


class LoadError(Exception):
    """The sweep cannot start: the message is one line for the user."""


def probe(cfg: LoadConfig) -> EngineInfo:
    """Ask the server what it serves (and the engine its name and version) before anything
    is written; LoadError when it cannot be reached or is not OpenAI-compatible."""
    return asyncio.run(_probe(cfg))


# ---------------------------------------------------------------------------- requests
def _body(cfg: LoadConfig, info: EngineInfo, rng: random.Random, i: int) -> bytes:
    prompt = cfg.prompts[i % len(cfg.prompts)] if cfg.prompts else None
    out_tokens = (
        prompt.output_tokens
        if prompt is not None and prompt.output_tokens
        else cfg.output_tokens.draw(rng)
    )
    doc: dict[str, Any] = {
        "max_tokens": out_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if info.model is not None:
        doc["model"] = info.model
    if cfg.ignore_eos:
        doc["ignore_eos"] = True
    if cfg.api == "chat":
        if prompt is not None and prompt.messages is not None:
            doc["messages"] = prompt.messages
        else:
            text = prompt.text if prompt is not None else None
            text = text or synthetic_prompt(rng, cfg.prompt_tokens.draw(rng))
            doc["messages"] = [{"role": "user", "content": text}]
    else:
        text = prompt.text if prompt is not None else None
        if text is None and prompt is not None and prompt.messages is not None:
            text = "\n".join(str(m.get("content", "")) for m in prompt.messages)
        doc["prompt"] = text or synthetic_prompt(rng, cfg.prompt_tokens.draw(rng))
    return json.dumps(doc).encode()


def _token_text(chunk: dict[str, Any], chat: bool) -> str:
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return ""
    c = choices[0]
    if chat:
        d = c.get("delta")
        if not isinstance(d, dict):
            return ""
        return str(d.get("content") or d.get("reasoning_content") or d.get("reasoning") or "")
    return str(c.get("text") or "")


async def send(conn: Connection, cfg: LoadConfig, body: bytes, index: int) -> RequestResult:
    """Send one streamed request and time it; never raises for the server's faults (they
    are the result's ``error``)."""
    chat = cfg.api == "chat"
    path = cfg.origin.path("/v1/chat/completions" if chat else "/v1/completions")
    res = RequestResult(index, _clock.now(), 0.0, None, [], None, None, None, None)
    t0 = time.perf_counter()
    try:
        with Expiry(cfg.timeout):
            await _stream(conn, path, body, chat, res, t0)
        return res
    except asyncio.TimeoutError:
        conn.close()
        if res.done:  # the body did not end after [DONE]: the request is complete all the same
            return res
        res.e2el = time.perf_counter() - t0
        res.error = f"no end within the per-request timeout of {cfg.timeout:g} s"
        return res
    except TransportError as exc:
        conn.close()
        if res.done:
            return res
        res.e2el = time.perf_counter() - t0
        res.error = _one_line(str(exc))
        res.unreachable = res.status is None and "cannot connect" in str(exc)
        return res


_DECODE = json.JSONDecoder().raw_decode
"""One JSON document from the start of a str: (document, where it ended)."""


class _Events:
    """The sink of a streamed response (:meth:`feed`, given to :meth:`Response.stream`):
    splits the body into server-sent events as its pieces arrive and fills the request's
    result, each event timed by the arrival of the piece that completed it. A ``data:`` line
    is one JSON chunk: its first choice's text (chat: delta content) makes it a token, its
    ``usage``, ``timings`` and ``error`` are kept; ``data: [DONE]`` ends the stream, and what
    follows is ignored. Called for every piece of every stream: kept to one call a piece."""

    __slots__ = ("chat", "last", "parts", "res", "t0")

    def __init__(self, res: RequestResult, t0: float, chat: bool):
        self.res = res
        self.t0 = t0
        self.chat = chat
        self.last: float | None = None
        self.parts: list[bytes] = []
        """The pieces of a line not ended yet."""

    def feed(self, data: bytes, t: float) -> None:
        res = self.res
        if res.done:
            return  # the body's end after [DONE]: read, so the connection is kept
        if b"\n" not in data:
            self.parts.append(data)
            return
        if self.parts:
            self.parts.append(data)
            data = b"".join(self.parts)
            self.parts = []
        lines = data.split(b"\n")
        tail = lines.pop()
        if tail:
            self.parts.append(tail)
        for line in lines:
            if not line.startswith(b"data:") and (
                not line or not (line := line.strip()).startswith(b"data:")
            ):
                continue  # an event's blank end, a comment or another field
            payload = line[5:].strip()
            if payload == b"[DONE]":
                res.done = True
                res.e2el = t - self.t0
                return
            try:
                text = payload.decode()
                chunk, end = _DECODE(text)
            except ValueError:
                continue
            if end != len(text) or not isinstance(chunk, dict):
                continue
            if "error" in chunk:
                err = chunk["error"]
                msg = err.get("message") if isinstance(err, dict) else err
                res.error = _one_line(f"error in the stream: {msg}")
            if "timings" in chunk and isinstance(chunk["timings"], dict):
                res.engine_timings = chunk["timings"]
            usage = chunk.get("usage")
            if isinstance(usage, dict):
                pt, ct = usage.get("prompt_tokens"), usage.get("completion_tokens")
                res.prompt_tokens = pt if isinstance(pt, int) else None
                res.completion_tokens = ct if isinstance(ct, int) else None
            if _token_text(chunk, self.chat):
                if self.last is None:
                    res.ttft = t - self.t0
                else:
                    res.itl.append(t - self.last)
                self.last = t


async def _stream(
    conn: Connection, path: str, body: bytes, chat: bool, res: RequestResult, t0: float
) -> None:
    """The request's exchange, filling ``res`` as the stream comes."""
    resp = await conn.request("POST", path, body)
    res.status = resp.status
    if resp.status != 200:
        res.error = _error_message(resp.status, await resp.read(64 * 1024))
        res.e2el = time.perf_counter() - t0
        return
    await resp.stream(_Events(res, t0, chat).feed)
    if not res.done:
        res.e2el = time.perf_counter() - t0
        conn.close()
        if res.error is None:
            res.error = "the stream ended without [DONE]"
    elif res.ttft is None and res.error is None:
        res.error = "no token came"


# ---------------------------------------------------------------------------- a level
class _Level:
    def __init__(
        self, cfg: LoadConfig, info: EngineInfo, level: float, writer: Writer, spec: TrialSpec
    ):
        self.cfg = cfg
        self.spec = spec
        self.info = info
        self.level = level
        self.writer = writer
        self.rng = random.Random(f"{cfg.seed}/{level}")
        self.out = LevelResult(trial_name(cfg.mode, level), level, 0.0, key=spec.key)
        self.next_index = 0
        self.stop = False
        self.scrape = Scrape(info.engine) if info.engine is not None else None
        self.flushed = 0
        self.flushed_samples = 0
        self.host = cfg.origin.host

    def _take(self) -> int | None:
        cfg = self.cfg
        if self.stop:
            return None
        if cfg.requests is not None and self.next_index >= cfg.requests:
            return None
        if cfg.seconds is not None and time.monotonic() >= self.t_end:
            return None
        i = self.next_index
        self.next_index += 1
        return i

    def _record(self, r: RequestResult) -> None:
        self.out.results.append(r)
        if r.unreachable:
            self.stop = True
            self.out.failed = f"the server cannot be reached: {r.error}"

    async def _worker(self) -> None:
        conn = Connection(self.cfg.origin)
        try:
            while (i := self._take()) is not None:
                self._record(await send(conn, self.cfg, _body(self.cfg, self.info, self.rng, i), i))
        finally:
            conn.close()

    async def _closed_loop(self) -> None:
        await asyncio.gather(*(self._worker() for _ in range(int(self.level))))

    async def _open_loop(self) -> None:
        cfg = self.cfg
        shape = cfg.burstiness or 1.0
        scale = 1.0 / (self.level * shape)
        idle: list[Connection] = []
        tasks: set[asyncio.Task[None]] = set()
        room = asyncio.Semaphore(MAX_IN_FLIGHT)

        async def one(i: int) -> None:
            conn = idle.pop() if idle else Connection(cfg.origin)
            try:
                self._record(await send(conn, cfg, _body(cfg, self.info, self.rng, i), i))
            finally:
                idle.append(conn)
                room.release()

        nxt = time.monotonic()
        while (i := self._take()) is not None:
            await room.acquire()
            task = asyncio.ensure_future(one(i))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            nxt += self.rng.gammavariate(shape, scale)
            wait = nxt - time.monotonic()
            if cfg.seconds is not None:
                wait = min(wait, self.t_end - time.monotonic())
            if wait > 0:
                await asyncio.sleep(wait)
        if tasks:
            await asyncio.gather(*tasks)
        for c in idle:
            c.close()

    async def _read_page(self, conn: Connection) -> tuple[float, dict[str, float]] | None:
        if self.scrape is None:
            return None
        try:
            st, page = await get(conn, self.cfg.metrics_path, 2.0)
        except (TransportError, asyncio.TimeoutError):
            return None
        if st != 200:
            return None
        t = _clock.now()
        return t, self.scrape.values(parse_exposition(page.decode("utf-8", "replace")))

    def _keep(self, got: tuple[float, dict[str, float]] | None) -> dict[str, float] | None:
        if got is None:
            return None
        t, vals = got
        for k, v in vals.items():
            self.out.samples.append((k, None, None, t, v))
        return vals

    async def _scrape_once(self, conn: Connection) -> dict[str, float] | None:
        return self._keep(await self._read_page(conn))

    async def _scraper(self, conn: Connection, done: asyncio.Event) -> None:
        nxt = time.monotonic() + FIRST_SCRAPE_S
        while not done.is_set():
            try:
                await asyncio.wait_for(done.wait(), max(0.0, nxt - time.monotonic()))
            except asyncio.TimeoutError:
                pass
            if done.is_set():
                break
            await self._scrape_once(conn)
            self._flush()
            nxt += SCRAPE_S

    def _flush(self, end: TrialEnd | None = None) -> None:
        events = tuple(r.event() for r in self.out.results[self.flushed :])
        samples = tuple(self.out.samples[self.flushed_samples :])
        self.flushed += len(events)
        self.flushed_samples += len(samples)
        self.writer.put(
            Batch(
                self.out.key,
                spec=self.spec,
                events=events,
                samples=samples,
                heartbeat=_clock.now(),
                end=end,
                host=self.host,
            )
        )

    async def run(self) -> LevelResult:
        cfg = self.cfg
        mconn = Connection(cfg.metrics) if cfg.metrics is not None else None
        if mconn is not None:
            await self._scrape_once(mconn)
        self.out.start = _clock.now()
        self.t_end = time.monotonic() + (cfg.seconds or 0.0)
        done = asyncio.Event()
        scraper = asyncio.ensure_future(self._scraper(mconn, done)) if mconn is not None else None
        try:
            if cfg.mode == "concurrency":
                await self._closed_loop()
            else:
                await self._open_loop()
        finally:
            done.set()
            if scraper is not None:
                await scraper
        self.out.end = _clock.now()
        if mconn is not None and self.scrape is not None and not self.out.failed:
            give_up = time.monotonic() + DRAIN_WAIT_S
            while True:  # the final scrape, once the engine has nothing running
                got = await self._read_page(mconn)
                running = None if got is None else got[1].get("serve.running")
                if not running or time.monotonic() >= give_up:
                    self._keep(got)
                    break
                await asyncio.sleep(0.1)
        if mconn is not None:
            mconn.close()
        res = self.out.results
        if self.out.failed is None and not any(r.ok for r in res):
            first = next((r.error for r in res if r.error), "no request was sent")
            self.out.failed = f"no request succeeded: {first}"
        state = "failed" if self.out.failed else "completed"
        self._flush(TrialEnd(state, _clock.now(), self.out.failed))
        return self.out


def _params(cfg: LoadConfig, info: EngineInfo, level: float) -> dict[str, Any]:
    return {
        "load.mode": cfg.mode,
        "load.level": int(level) if cfg.mode == "concurrency" else level,
        "load.prompt_tokens": cfg.prompt_tokens.param(),
        "load.output_tokens": cfg.output_tokens.param(),
        "load.stream": True,
        "load.api": cfg.api,
        "model": info.model,
        "engine": info.engine,
        "engine.version": info.version,
        "load.url": cfg.origin.base,
        "slo.ttft_s": cfg.slo.get("ttft"),
        "slo.tpot_s": cfg.slo.get("tpot"),
        "slo.e2el_s": cfg.slo.get("e2el"),
        "load.burstiness": cfg.burstiness if cfg.mode == "rate" else None,
        "load.requests": cfg.requests,
        "load.seconds": cfg.seconds,
        "engine.slots": info.slots,
        "engine.trial_key": cfg.engine_trial_key,
        **{param: info.dims.get(param) for param in MODEL_DIMS.values()},
    }


def run_sweep(
    cfg: LoadConfig,
    info: EngineInfo,
    on_level: Callable[[LevelResult], None],
    wait_s: float = 5.0,
) -> list[LevelResult]:
    """Run every level in order, each a trial written through one writer; stops after a
    failed level. ``on_level`` hears of each level as it ends."""
    writer = Writer(cfg.store_url, name="tunescope load")
    out: list[LevelResult] = []
    try:
        for level in cfg.levels:
            key = new_key()
            spec = TrialSpec(
                key=key,
                run=cfg.run,
                name=trial_name(cfg.mode, level),
                params=_params(cfg, info, level),
                host=socket.gethostname(),
                start=_clock.now(),
                interval=SCRAPE_S,
                project=cfg.project,
                os_user=cfg.os_user,
            )
            writer.put(Batch(key, spec=spec))
            runner = _Level(cfg, info, level, writer, spec)
            res = asyncio.run(runner.run())
            out.append(res)
            on_level(res)
            if res.failed:
                break
    finally:
        writer.close(wait_s)
    return out
