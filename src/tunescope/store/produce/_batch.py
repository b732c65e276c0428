"""Batches: what a writer (the SDK's flusher, the sampler, ``tunescope run``) hands the store.

A :class:`Batch` carries everything one writer produced for one trial since its last batch:
samples by metric and device (of the writer's host: each node of a multi-node trial writes
its own series), where the trial runs on that host, events, scalars, and changes to the trial
(heartbeat, pids, params, its end). :meth:`tunescope.store.Store.write` writes a batch in one
transaction and **exactly once**: the batch id is remembered with the data, so a batch sent
again (a retry after a lost connection, a replay from the spool after a crash) is recognised
and skipped.

Trials are named by a **key** (a random hex string the writer makes), not by the store's
integer id, so a trial can start recording while the store is unreachable: the batch carries
the trial's :class:`TrialSpec`, and whichever batch reaches the store first creates the trial
(and its run). The JSON form (:meth:`Batch.to_json` / :meth:`Batch.from_json`) is what the
spool keeps on disk; :meth:`Batch.from_json` checks every field and raises ValueError naming
the first bad one, so a damaged or foreign record is refused whole: the one place batches
are checked (a server's ingest answers its ValueError with 422), by the store's one set of
value checks (``store/_checks.py``). Every number is finite and has a range: times (and intervals,
durations) within ``MAX_ABS_TIME_S`` of the epoch, sample values within float32's (what the
store keeps, see ``store/_codec.py``), integers (steps, exit codes) what the databases hold;
names (metrics, devices, hosts, runs, trials, projects, event kinds and names, scalar names)
are at most ``MAX_NAME_BYTES`` bytes of UTF-8, other text ``MAX_TEXT_BYTES``; no text, and
no key or string inside params, ``where`` or event data, holds a NUL character (databases
refuse it). A batch whose JSON passes :data:`MAX_BATCH_BYTES` is refused by a server: writers split
it first (:meth:`Batch.split`).
"""

from __future__ import annotations

import hashlib
import json
import socket
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from tunescope.store import _checks as checks

__all__ = [
    "MAX_BATCH_BYTES",
    "Batch",
    "EventRow",
    "SampleRow",
    "ScalarRow",
    "TrialEnd",
    "TrialSpec",
    "new_key",
]

MAX_BATCH_BYTES = 16 * 1024 * 1024
"""Largest batch a server takes, as JSON (:meth:`Batch.to_json`) once decompressed: a
flusher's 50,000 events and 50,000 scalars are about 8 MB. :meth:`Batch.split` cuts a larger
one."""

SampleRow = tuple[str, "str | None", "str | None", float, float]
"""(metric, device, note, t, value): one sample of the series (trial, metric, host, device),
the host being the batch's; ``note`` is kept on the series from the first sample that gives
one."""

EventRow = tuple[
    str, float, "str | None", "int | None", "float | None", "float | None", "dict[str, Any] | None"
]
"""(kind, t, name, step, duration, value, data)."""

ScalarRow = tuple[str, "int | None", float, float]
"""(name, step, t, value)."""

_END_STATES = ("completed", "failed", "pruned")


def new_key() -> str:
    """A new random key for a trial or a batch (32 hex digits)."""
    return uuid.uuid4().hex


def made_key(text: str) -> str:
    """A key for a trial or a batch made from ``text``, the same every time and in every
    process (32 hex digits of its SHA-256): for what several writers, or one writer's
    retries, must name alike."""
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class TrialSpec:
    """How to create a trial the store has not seen yet: its run (by name in ``project``,
    created if new, with ``os_user`` and ``host``), its name (None: ``trial-<k>``; a name
    the run already has under another key becomes ``name-2``, ``name-3``…), params (JSON
    values), host, pids, start time and sampling interval."""

    key: str
    run: str
    name: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    host: str = ""
    pids: tuple[int, ...] = ()
    start: float = 0.0
    interval: float = 1.0
    project: str = "default"
    os_user: str = ""
    """The OS user that started the trial (recorded on its run if the run is new)."""

    def doc(self) -> dict[str, Any]:
        """The spec as a JSON object."""
        return {
            "key": self.key,
            "run": self.run,
            "name": self.name,
            "params": self.params,
            "host": self.host,
            "pids": list(self.pids),
            "start": self.start,
            "interval": self.interval,
            "project": self.project,
            "os_user": self.os_user,
        }

    def to_json(self) -> str:
        return json.dumps(self.doc(), separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_doc(cls, v: Any, where: str = "") -> TrialSpec:
        """A spec from its JSON object; ValueError names the first bad field."""
        s = checks.obj(v, where.rstrip(".") or "spec")
        return cls(
            key=_key(s.get("key"), f"{where}key"),
            run=checks.name(s.get("run"), f"{where}run", empty=False),
            name=_opt_name(s.get("name"), f"{where}name"),
            params=checks.json_obj(s.get("params", {}), f"{where}params"),
            host=checks.name(s.get("host", ""), f"{where}host"),
            pids=_pids(s.get("pids", []), f"{where}pids"),
            start=checks.time(s.get("start"), f"{where}start"),
            interval=checks.time(
                _positive(s.get("interval", 1.0), f"{where}interval"), f"{where}interval"
            ),
            project=checks.name(s.get("project", "default"), f"{where}project", empty=False),
            os_user=checks.name(s.get("os_user", ""), f"{where}os_user"),
        )

    @classmethod
    def from_json(cls, raw: str | bytes) -> TrialSpec:
        try:
            doc = json.loads(raw, parse_constant=_no_constant)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"trial spec is not JSON: {exc}") from None
        return cls.from_doc(doc)


@dataclass(frozen=True)
class TrialEnd:
    """How a trial ended: ``state`` (completed, failed or pruned) at ``t``. With
    ``only_if_running`` it changes nothing unless the trial is still running (a sampler that
    saw the training die defers to an owner that recorded the end)."""

    state: str
    t: float
    error: str | None = None
    exit_code: int | None = None
    only_if_running: bool = False


@dataclass(frozen=True)
class Batch:
    """One writer's data for one trial, written in one transaction, exactly once (see the
    module doc). ``trial`` is the trial's key; ``spec`` creates the trial if the store lacks
    it. ``heartbeat`` and ``pids`` change a running trial only; ``params`` replace the trial's
    params; ``end`` ends it. ``host`` is the writer's host (this machine's name unless given):
    the samples belong to that host's series. ``where`` describes where the trial runs on
    that host (JSON values: see ``collect/_where.py``); it is merged into what earlier batches
    said for the host, its keys replacing theirs."""

    trial: str
    id: str = field(default_factory=new_key)
    spec: TrialSpec | None = None
    samples: tuple[SampleRow, ...] = ()
    events: tuple[EventRow, ...] = ()
    scalars: tuple[ScalarRow, ...] = ()
    heartbeat: float | None = None
    pids: tuple[int, ...] | None = None
    params: dict[str, Any] | None = None
    end: TrialEnd | None = None
    host: str = field(default_factory=socket.gethostname)
    where: dict[str, Any] | None = None

    def size(self) -> int:
        """Items carried (samples, events and scalars), for memory bounds."""
        return len(self.samples) + len(self.events) + len(self.scalars)

    def with_spec(self, spec: TrialSpec | None) -> Batch:
        return replace(self, spec=spec)

    def split(self, limit: int = MAX_BATCH_BYTES) -> list[Batch]:
        """This batch as batches whose JSON is at most ``limit`` bytes each, to be written in
        order with the same effect: each carries the spec, the first the trial's changes
        (heartbeat, pids, params, ``where``), the last its end; samples, events and scalars
        are shared out in order. Each part's id is made from this batch's id, its place and
        the number of parts, the same every time, so sending the whole again is still
        exactly once. ``[self]`` when it fits. ValueError when the changes and one item
        cannot fit in ``limit``."""
        if len(self.to_json()) <= limit:
            return [self]
        bare = replace(self, samples=(), events=(), scalars=())
        fixed = len(bare.to_json()) + 64  # the three lists' names and brackets
        room = limit - fixed
        items: list[tuple[int, Any, int]] = []
        for kind, rows in enumerate((self.samples, self.events, self.scalars)):
            for r in rows:
                size = len(json.dumps(list(r), separators=(",", ":"), allow_nan=False)) + 1
                if size > room:
                    raise ValueError(f"one item of {size} bytes does not fit in {limit}")
                items.append((kind, r, size))
        groups: list[list[tuple[int, Any, int]]] = [[]]
        used = 0
        for item in items:
            if used + item[2] > room and groups[-1]:
                groups.append([])
                used = 0
            groups[-1].append(item)
            used += item[2]
        n = len(groups)
        parts = []
        for i, group in enumerate(groups):
            kinds: tuple[list[Any], list[Any], list[Any]] = ([], [], [])
            for kind, r, _size in group:
                kinds[kind].append(r)
            part = Batch(
                trial=self.trial,
                id=made_key(f"{self.id}/{i}/{n}"),
                spec=self.spec,
                samples=tuple(kinds[0]),
                events=tuple(kinds[1]),
                scalars=tuple(kinds[2]),
                host=self.host,
            )
            if i == 0:
                part = replace(
                    part,
                    heartbeat=self.heartbeat,
                    pids=self.pids,
                    params=self.params,
                    where=self.where,
                )
            if i == n - 1:
                part = replace(part, end=self.end)
            parts.append(part)
        return parts

    # ------------------------------------------------------------------ JSON
    def to_json(self) -> bytes:
        """The batch as compact JSON (non-finite numbers are not allowed anywhere)."""
        doc: dict[str, Any] = {"id": self.id, "trial": self.trial, "host": self.host}
        if self.spec is not None:
            doc["spec"] = self.spec.doc()
        if self.samples:
            doc["samples"] = [list(r) for r in self.samples]
        if self.events:
            doc["events"] = [list(r) for r in self.events]
        if self.scalars:
            doc["scalars"] = [list(r) for r in self.scalars]
        if self.heartbeat is not None:
            doc["heartbeat"] = self.heartbeat
        if self.pids is not None:
            doc["pids"] = list(self.pids)
        if self.params is not None:
            doc["params"] = self.params
        if self.where is not None:
            doc["where"] = self.where
        if self.end is not None:
            e = self.end
            doc["end"] = {
                "state": e.state,
                "t": e.t,
                "error": e.error,
                "exit_code": e.exit_code,
                "only_if_running": e.only_if_running,
            }
        return json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()

    @classmethod
    def from_json(cls, raw: bytes | str) -> Batch:
        """Parse and check a batch made by :meth:`to_json`; ValueError names what is wrong.
        A record without ``host`` (written before batches had one) is of its spec's host, or
        else of this machine (spool files are replayed where they were written)."""
        try:
            doc = json.loads(raw, parse_constant=_no_constant)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"batch is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise ValueError("batch must be a JSON object")
        unknown = set(doc) - {
            "id",
            "trial",
            "spec",
            "samples",
            "events",
            "scalars",
            "heartbeat",
            "pids",
            "params",
            "end",
            "host",
            "where",
        }
        if unknown:
            raise ValueError(f"batch has unknown field {sorted(unknown)[0]!r}")
        spec = None if doc.get("spec") is None else TrialSpec.from_doc(doc["spec"], "spec.")
        end = None
        if doc.get("end") is not None:
            e = checks.obj(doc["end"], "end")
            state = checks.text(e.get("state"), "end.state")
            if state not in _END_STATES:
                raise ValueError(f"end.state must be one of {', '.join(_END_STATES)}")
            end = TrialEnd(
                state=state,
                t=checks.time(e.get("t"), "end.t"),
                error=_opt_text(e.get("error"), "end.error"),
                exit_code=_opt_int(e.get("exit_code"), "end.exit_code"),
                only_if_running=checks.boolean(
                    e.get("only_if_running", False), "end.only_if_running"
                ),
            )
        return cls(
            trial=_key(doc.get("trial"), "trial"),
            id=_key(doc.get("id"), "id"),
            spec=spec,
            samples=tuple(
                _sample(r, i) for i, r in enumerate(_list(doc.get("samples"), "samples"))
            ),
            events=tuple(_event(r, i) for i, r in enumerate(_list(doc.get("events"), "events"))),
            scalars=tuple(
                _scalar(r, i) for i, r in enumerate(_list(doc.get("scalars"), "scalars"))
            ),
            heartbeat=None
            if doc.get("heartbeat") is None
            else checks.time(doc["heartbeat"], "heartbeat"),
            pids=None if doc.get("pids") is None else _pids(doc["pids"], "pids"),
            params=None if doc.get("params") is None else checks.json_obj(doc["params"], "params"),
            end=end,
            host=checks.name(doc["host"], "host")
            if "host" in doc
            else (spec.host if spec is not None and spec.host else socket.gethostname()),
            where=None if doc.get("where") is None else checks.json_obj(doc["where"], "where"),
        )


# ---------------------------------------------------------------------- field checks
# (the values' own rules are the store's one set, in store/_checks.py)
def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _list(v: Any, what: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise ValueError(f"{what} must be a list")
    return v


def _key(v: Any, what: str) -> str:
    if not isinstance(v, str) or not 1 <= len(v) <= 64 or not v.isprintable():
        raise ValueError(f"{what} must be a key of 1 to 64 printable characters")
    return v


def _positive(v: Any, what: str) -> float:
    f = checks.number(v, what)
    if f <= 0:
        raise ValueError(f"{what} must be positive")
    return f


_opt_name = checks.optional(checks.name)
_opt_text = checks.optional(checks.text)
_opt_int = checks.optional(checks.integer)
_opt_num = checks.optional(checks.number)


def _pids(v: Any, what: str) -> tuple[int, ...]:
    items = _list(v, what)
    out = []
    for p in items:
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < 2**31:
            raise ValueError(f"{what} must be process ids")
        out.append(p)
    return tuple(out)


def _row(v: Any, n: int, what: str) -> list[Any]:
    if not isinstance(v, list) or len(v) != n:
        raise ValueError(f"{what} must be a list of {n} items")
    return v


def _sample(v: Any, i: int) -> SampleRow:
    r = _row(v, 5, f"samples[{i}]")
    return (
        checks.name(r[0], f"samples[{i}].metric", empty=False),
        _opt_name(r[1], f"samples[{i}].device"),
        _opt_text(r[2], f"samples[{i}].note"),
        checks.time(r[3], f"samples[{i}].t"),
        checks.value32(r[4], f"samples[{i}].value"),
    )


def _event(v: Any, i: int) -> EventRow:
    r = _row(v, 7, f"events[{i}]")
    data = r[6]
    if data is not None and not isinstance(data, dict):
        raise ValueError(f"events[{i}].data must be an object or null")
    return (
        checks.name(r[0], f"events[{i}].kind", empty=False),
        checks.time(r[1], f"events[{i}].t"),
        _opt_name(r[2], f"events[{i}].name"),
        _opt_int(r[3], f"events[{i}].step"),
        None if r[4] is None else checks.time(r[4], f"events[{i}].duration"),
        _opt_num(r[5], f"events[{i}].value"),
        None if data is None else checks.check_json(data, f"events[{i}].data"),
    )


def _scalar(v: Any, i: int) -> ScalarRow:
    r = _row(v, 4, f"scalars[{i}]")
    return (
        checks.name(r[0], f"scalars[{i}].name", empty=False),
        _opt_int(r[1], f"scalars[{i}].step"),
        checks.time(r[2], f"scalars[{i}].t"),
        checks.number(r[3], f"scalars[{i}].value"),
    )
