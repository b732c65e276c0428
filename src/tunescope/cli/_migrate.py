"""`tunescope migrate`: copy a whole store into another (SQLite, PostgreSQL, ClickHouse),
resumably, and check the copy by counting both sides.

Everything goes through the store contract. Each trial is written as batches
(:meth:`~tunescope.store.Store.write`) whose ids are made from the trial's key and the batch's
place (``migrate:<key>:<n>``) and whose content follows from the source alone (series in
:meth:`~tunescope.store.Store.list_series` order, samples by time, then value; events and
scalars likewise sorted), so a copy killed part way and run again sends the same batches: the
target skips those it holds (exactly once, by batch id) and writes the rest. A trial whose
counts and details already agree on both sides is not read again. The trial's details a batch
cannot carry (its end, state, error, exit code, last heartbeat) are set once its data is in, by
:meth:`~tunescope.store.Store.update_trial`; runs keep their start through
:meth:`~tunescope.store.Store.ensure_run`.

Memory is bounded by the batch size: a series is read in time slices of about that many
samples, a trial's events likewise, its scalars one name at a time.

Where ``tunescope compact --keep-raw`` dropped a series' raw samples, the minute rollups stand
for them before its ``raw_from``: those are copied as rows (``put_minute_rows``, ``batch``
rows at a time with the span they cover, each sent again unchanged on a resumed copy), the raw
samples from ``raw_from`` on as samples, and the findings the source kept before it dropped
them, so the copy answers windows, counts, latest values and findings as the source does.
Access tokens are copied by the digest a store keeps of each (SQL stores, ClickHouse's metadata
included): their clients keep working against the target. Not copied: usage figures kept per
ended trial (computed again on the target by the first ``tunescope usage`` or by ``tunescope
compact``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from tunescope.analyze import Finding
from tunescope.cli import _format as fmt
from tunescope.errors import ConfigError, Conflict, NotFound, StoreError
from tunescope.store import (
    Batch,
    EventRow,
    RunInfo,
    SampleRow,
    ScalarRow,
    Store,
    TrialInfo,
    TrialSpec,
    check_url,
    display,
    made_key,
    open_store,
    same_store,
)

__all__ = ["BATCH_ITEMS", "migrate"]

BATCH_ITEMS = 100_000
"""Samples (or events, or scalars) a batch carries by default: about 5 MB of JSON, well
inside a server's limit (a batch past it is split, its parts' ids made from its own)."""

MINUTE = 60
"""Seconds a minute row spans (what ``minute_rows`` returns, one row a minute)."""

Say = Callable[[str], None]
Extents = dict[int, tuple[float, float, int] | None]
"""Series id: (first t, last t, sample count), None for a series without samples."""


@dataclass(frozen=True)
class Counts:
    """What one side holds of a trial."""

    series: int
    samples: int
    events: int
    scalars: int

    def items(self) -> int:
        return self.samples + self.events + self.scalars


@dataclass(frozen=True)
class Source:
    """A trial to copy: its project, run and record in the source."""

    project: str
    run: RunInfo
    trial: TrialInfo

    @property
    def key(self) -> str:
        """The trial's key in the target: its own, or (a trial recorded before keys) one
        made from its place, the same every time."""
        if self.trial.key:
            return self.trial.key
        return made_key(f"{self.project}\0{self.run.name}\0{self.trial.name}")

    @property
    def label(self) -> str:
        """How messages name the trial: ``[project:]run/trial``, printable."""
        name = f"{self.run.name}/{self.trial.name}"
        return fmt.printable(name if self.project == "default" else f"{self.project}:{name}")


def migrate(
    src_url: str, dst_url: str, *, batch: int = BATCH_ITEMS, dry_run: bool = False, say: Say
) -> int:
    """Copy the store at ``src_url`` into the one at ``dst_url``; the exit code: 0 when every
    trial's counts agree on both sides, 1 when some do not (listed). ConfigError (exit 2, one
    line, nothing written) for the same store twice, a source that cannot be read, or a
    target that holds other data under a run's name."""
    if batch < 1:
        raise ConfigError(f"--batch-size {batch} must be at least 1")
    src_url, dst_url = check_url(src_url), check_url(dst_url)
    for flag, url in (("--from", src_url), ("--to", dst_url)):
        if url.startswith(("http://", "https://")):
            raise ConfigError(
                f"{flag} {display(url)} is a tunescope server: migrate copies between databases "
                "(SQLite, PostgreSQL, ClickHouse); give the URL of the store it serves"
            )
    if same_store(src_url, dst_url):
        raise ConfigError(f"--from and --to name the same store ({display(src_url)})")
    try:
        src = open_store(src_url, create=False, readonly=True)
    except StoreError as exc:
        raise ConfigError(f"cannot read the source {display(src_url)}: {exc}") from None
    with src:
        plan = _plan(src)
        dst = _open_target(dst_url, dry_run)
        try:
            tokens = _tokens(src)
            _refuse_other_data(plan, tokens, dst, dst_url)
            if dry_run or dst is None:
                return _dry_run(src, plan, dst_url, say)
            trials = sum(i.trial is not _NO_TRIAL for i in plan)
            say(f"copying {trials} trial(s) from {display(src_url)} to {display(dst_url)}")
            _copy_tokens(tokens, dst, say)
            for item in plan:
                _copy_trial(src, dst, item, batch, say)
            return _verify(src, dst, plan, say)
        finally:
            if dst is not None:
                dst.close()


def _open_target(url: str, dry_run: bool) -> Store | None:
    """The target, created where missing; for a dry run opened only if there (None when
    not: an empty store)."""
    try:
        return open_store(url, create=not dry_run)
    except NotFound:
        if dry_run:
            return None
        raise
    except StoreError as exc:
        raise ConfigError(f"cannot open the target {display(url)}: {exc}") from None


def _plan(src: Store) -> list[Source]:
    """Every trial of every project, runs oldest first, trials in creation order."""
    out: list[Source] = []
    for project in src.list_projects():
        for run in reversed(src.list_runs(project=project)):
            out.extend(Source(project, run, t) for t in src.list_trials(run.id))
            if not run.trials:
                out.append(Source(project, run, _NO_TRIAL))
    return out


_NO_TRIAL = TrialInfo(-1, -1, "", {}, "running", "", (), 0.0, None, None, None, 1.0)
"""Stands in the plan for a run without trials (copied as a run only)."""


def _refuse_other_data(
    plan: list[Source], src_tokens: list[tuple[Any, str]], dst: Store | None, dst_url: str
) -> None:
    """ConfigError, before anything is written, when the target holds a run of a source
    run's name (in its project) that this copy did not make: another start, or a trial
    whose key is not among the source run's. A trial key of the source found elsewhere in
    the target is refused too."""
    if dst is None:
        return
    _refuse_other_tokens(src_tokens, dst, dst_url)
    by_run: dict[tuple[str, str], list[Source]] = {}
    for item in plan:
        by_run.setdefault((item.project, item.run.name), []).append(item)
    for (project, name), items in by_run.items():
        run = items[0].run
        where = f"{display(dst_url)} already holds run {name!r} of project {project!r}"
        fix = "migrate into an empty store, or into the one an earlier migrate of this source made"
        try:
            there = dst.get_run(name, project=project)
        except NotFound:
            there = None
        keys = {i.key for i in items if i.trial is not _NO_TRIAL}
        if there is not None:
            if there.start != run.start:
                raise ConfigError(f"{where}, started at another time: {fix}")
            for t in dst.list_trials(there.id):
                if t.key not in keys:
                    raise ConfigError(f"{where} with trial {t.name!r} the source lacks: {fix}")
        for item in items:
            if item.trial is _NO_TRIAL:
                continue
            try:
                found = dst.trial_by_key(item.key)
            except NotFound:
                continue
            if there is None or found.run_id != there.id or found.name != item.trial.name:
                raise ConfigError(
                    f"{display(dst_url)} already holds trial {item.label!r}'s key under "
                    f"another run or name: {fix}"
                )


def _tokens(st: Store) -> list[tuple[Any, str]]:
    """The store's access tokens with their digests ([] for a store without: an HTTP one)."""
    digests = getattr(st, "token_digests", None)
    return [] if digests is None else list(digests())


def _refuse_other_tokens(tokens: list[tuple[Any, str]], dst: Store, dst_url: str) -> None:
    """ConfigError when the target has a token of a source token's project and name but
    another digest (another token)."""
    if not tokens or getattr(dst, "token_digests", None) is None:
        return
    there = {(info.project, info.name): d for info, d in _tokens(dst)}
    for info, d in tokens:
        if there.get((info.project, info.name), d) != d:
            raise ConfigError(
                f"{display(dst_url)} already holds another token named {info.name!r} in "
                f"project {info.project!r}: migrate into an empty store, or into the one an "
                "earlier migrate of this source made"
            )


def _copy_tokens(tokens: list[tuple[Any, str]], dst: Store, say: Say) -> None:
    """Every access token, by its digest: its clients keep working against the target."""
    if not tokens:
        return
    keep = getattr(dst, "keep_token", None)
    if keep is None:
        say(
            f"{len(tokens)} access token(s) not copied: the target keeps none (make new ones "
            "where its server's store is, with `tunescope token create`)"
        )
        return
    added = sum(bool(keep(info, d)) for info, d in tokens)
    say(
        f"{len(tokens)} access token(s) copied by digest ({added} new): their clients keep "
        "working against the target"
    )


# ---------------------------------------------------------------------- copying
def _copy_trial(src: Store, dst: Store, item: Source, batch: int, say: Say) -> None:
    run, t = item.run, item.trial
    dst.ensure_run(run.name, run.start, project=item.project, os_user=run.os_user, host=run.host)
    if t is _NO_TRIAL:
        say(f"{fmt.printable(run.name)}: a run without trials, copied")
        return
    series = src.list_series(t.id)
    extents = _extents(src, series)  # read once: for the counts and for the copy
    have = _tally(src, t.id, series, extents)
    there = _target_trial(dst, item.key)
    if there is not None and _counts(dst, there.id) == have and not _differing(src, t, dst, there):
        say(f"{item.label}: already copied ({have.items():,} item(s))")
        return
    writer = _Sender(dst, item.key, _spec(item), say, item.label, have.items())
    hosts = src.hosts(t.id)
    tid = writer.send(Batch(item.key, host=t.host, where=hosts.pop(t.host, None) or None))
    for host, where in hosts.items():
        if where:
            writer.send(Batch(item.key, host=host, where=where))
    raw_from = _raw_from(src, series)
    there_ids = {}  # every series, those without a sample too, each with its note
    for s in series:
        there_ids[s.id] = dst.series(tid, s.metric, s.device, s.note, s.host).id
    for host, rows in _sample_parts(src, series, extents, batch, raw_from):
        writer.send(Batch(item.key, host=host, samples=tuple(rows)), len(rows))
    for events in _event_parts(src, t, batch):
        writer.send(Batch(item.key, host=t.host, events=tuple(events)), len(events))
    for scalars in _scalar_parts(src, t.id, batch):
        writer.send(Batch(item.key, host=t.host, scalars=tuple(scalars)), len(scalars))
    if raw_from:
        n = _copy_minute_rows(src, dst, series, extents, there_ids, raw_from, batch)
        say(f"  {item.label}: {n:,} minute row(s) of {len(raw_from)} series copied")
    _copy_kept_findings(src, t.id, dst, tid)
    dst.update_trial(
        tid,
        state="running" if t.state == "lost" else t.state,  # lost is read from the heartbeat
        end=t.end,
        error=t.error,
        heartbeat=t.heartbeat,
        exit_code=src.exit_code(t.id),
        params=t.params,
    )
    say(f"{item.label}: copied ({writer.done:,} item(s) in {writer.parts} batch(es))")


def _spec(item: Source) -> TrialSpec:
    t = item.trial
    return TrialSpec(
        key=item.key,
        run=item.run.name,
        name=t.name,
        params=t.params,
        host=t.host,
        pids=t.pids,
        start=t.start,
        interval=t.interval,
        project=item.project,
        os_user=item.run.os_user or "",
    )


class _Sender:
    """Writes one trial's batches, numbered in order: ``migrate:<key>:<n>``, the same ids and
    the same content every time the source is copied."""

    def __init__(self, dst: Store, key: str, spec: TrialSpec, say: Say, label: str, total: int):
        self.dst, self.key, self.spec, self.say = dst, key, spec, say
        self.label, self.total = label, total
        self.parts = 0
        self.done = 0

    def send(self, batch: Batch, items: int = 0) -> int:
        bid = f"migrate:{self.key}:{self.parts}"
        if len(bid) > 64:  # a key longer than batch ids allow: its digest
            bid = "migrate:" + made_key(bid)
        whole = Batch(
            self.key,
            id=bid,
            spec=self.spec,
            samples=batch.samples,
            events=batch.events,
            scalars=batch.scalars,
            host=batch.host,
            where=batch.where,
        )
        tid = 0
        try:
            for part in whole.split():
                tid = self.dst.write(part)
        except Conflict:
            raise ConfigError(
                f"{self.label}: the target holds batch {bid!r} of an earlier copy with other "
                "content: the source changed since (stop what writes to it, then copy into "
                "an empty store)"
            ) from None
        self.parts += 1
        if items:
            self.done += items
            self.say(f"  {self.label}: {self.done:,} of {self.total:,} item(s)")
        return tid


def _slices(lo: float, hi: float, n: int) -> Iterator[tuple[float, float]]:
    """``n`` spans covering every time once: [edge_i, just before edge_i+1], the first from
    -inf, the last to +inf."""
    edges = np.linspace(lo, hi, n + 1) if n > 1 else np.array([lo, hi])
    for i in range(n):
        a = -math.inf if i == 0 else float(edges[i])
        b = math.inf if i == n - 1 else float(np.nextafter(edges[i + 1], -np.inf))
        yield a, b


def _sample_parts(
    src: Store, series: list[Any], extents: Extents, batch: int, raw_from: dict[int, float]
) -> Iterator[tuple[str, list[SampleRow]]]:
    """The samples of every series as (host, rows) of at most ``batch`` rows, one host each,
    each series read in time slices of about ``batch`` samples; of a series in ``raw_from``,
    those from its ``raw_from`` on (its minute rows stand for those before)."""
    rows: list[SampleRow] = []
    host: str | None = None
    for s in series:
        extent = extents[s.id]
        if extent is None:
            continue
        if host is not None and s.host != host and rows:
            yield host, rows
            rows = []
        host = s.host
        first, last, count = extent
        since = raw_from.get(s.id, -math.inf)
        for a, b in _slices(max(first, since), last, max(1, math.ceil(count / batch))):
            if b < since:
                continue
            ts, vs = src.read_samples(s.id, max(a, since), b)
            order = np.lexsort((vs, ts))  # ties in time (any order on ClickHouse) by value
            for tt, vv in zip(ts[order].tolist(), vs[order].tolist(), strict=True):
                rows.append((s.metric, s.device, s.note, tt, vv))
                if len(rows) >= batch:
                    yield host, rows
                    rows = []
    if rows and host is not None:
        yield host, rows


def _raw_from(st: Store, series: list[Any]) -> dict[int, float]:
    """The series whose raw samples were dropped before a time, by id: that time (the
    ``raw_from`` SQL stores and ClickHouse's metadata note; {} for a store without)."""
    raw_from = getattr(st, "raw_from", None)
    if raw_from is None:
        return {}
    found = {s.id: raw_from(s.id) for s in series}
    return {sid: float(r) for sid, r in found.items() if r is not None}


def _copy_minute_rows(
    src: Store,
    dst: Store,
    series: list[Any],
    extents: Extents,
    there_ids: dict[int, int],
    raw_from: dict[int, float],
    batch: int,
) -> int:
    """Copy the minute rows of each series in ``raw_from`` that stand for its dropped raw
    samples, ``batch`` rows at a time, each put with the span it covers (to the next put's
    first minute, the last to ``raw_from``); how many rows. Every database keeps rollups
    (an HTTP store, which does not, is refused before anything is read)."""
    put = dst.put_minute_rows  # type: ignore[attr-defined]
    read = src.minute_rows  # type: ignore[attr-defined]
    copied = 0
    for s in series:
        until = raw_from.get(s.id)
        extent = extents[s.id]
        if until is None or extent is None:
            continue
        lo = float(min(math.floor(extent[0] / MINUTE) * MINUTE, until))
        while True:
            rows = read(s.id, lo, until, batch)
            hi = until if len(rows) < batch else float(rows[-1, 0]) + MINUTE
            put(there_ids[s.id], lo, hi, rows, until)
            copied += len(rows)
            if hi >= until:
                break
            lo = hi
    return copied


def _copy_kept_findings(src: Store, tid: int, dst: Store, there: int) -> None:
    """The findings the source kept of a trial before its raw samples were dropped, as the
    target's trial's: the first ``tunescope compact`` made them from every raw sample."""
    kept = getattr(src, "kept_findings", None)
    keep = getattr(dst, "keep_findings", None)
    text = None if kept is None else kept(tid)
    if text is None or keep is None:
        return
    found = [Finding.from_dict(d) for d in json.loads(text)]
    moved = [dataclasses.replace(f, trial_id=there).to_dict() for f in found]
    keep(there, json.dumps(moved), time.time())


def _event_parts(src: Store, t: TrialInfo, batch: int) -> Iterator[list[EventRow]]:
    """The trial's events in parts of at most ``batch``, read in time slices (an event in
    the slice its start falls in), each sorted by time, then content."""
    total = src.count_events(t.id)
    if not total:
        return
    last = max(x for x in (t.start, t.end, t.heartbeat) if x is not None)

    def ordered() -> Iterator[EventRow]:
        for a, b in _slices(t.start, last, max(1, math.ceil(total / batch))):
            got = [e for e in src.all_events(t.id, a, b) if a <= e.t <= b]
            part = [(e.kind, e.t, e.name, e.step, e.duration, e.value, e.data) for e in got]
            part.sort(key=lambda r: (r[1], json.dumps(r, sort_keys=True, default=repr)))
            yield from part

    yield from _in_parts(ordered(), batch)


def _scalar_parts(src: Store, tid: int, batch: int) -> Iterator[list[ScalarRow]]:
    """The trial's scalars, one name at a time, in parts of at most ``batch``."""

    def ordered() -> Iterator[ScalarRow]:
        for name in src.scalar_names(tid):
            got = [(s.name, s.step, s.t, s.value) for s in src.scalars(tid, name)]
            got.sort(key=lambda r: (r[1] is not None, r[1] or 0, r[2], r[3]))
            yield from got

    yield from _in_parts(ordered(), batch)


_R = TypeVar("_R")


def _in_parts(rows: Iterable[_R], batch: int) -> Iterator[list[_R]]:
    """``rows`` in lists of ``batch`` (the last one shorter), in order."""
    part: list[_R] = []
    for r in rows:
        part.append(r)
        if len(part) >= batch:
            yield part
            part = []
    if part:
        yield part


# ---------------------------------------------------------------------- checking
def _target_trial(dst: Store, key: str) -> TrialInfo | None:
    try:
        return dst.trial_by_key(key)
    except NotFound:
        return None


def _extents(st: Store, series: list[Any]) -> Extents:
    """Each series' (first, last, count) by id; None for one without samples."""
    return {s.id: st.series_extent(s.id) for s in series}


def _counts(st: Store, tid: int) -> Counts:
    series = st.list_series(tid)
    return _tally(st, tid, series, _extents(st, series))


def _tally(st: Store, tid: int, series: list[Any], extents: Extents) -> Counts:
    """A trial's counts, its series and their extents read already."""
    samples = sum(e[2] for e in extents.values() if e is not None)
    scalars = sum(len(st.scalars(tid, name)) for name in st.scalar_names(tid))
    return Counts(len(series), samples, st.count_events(tid), scalars)


_DETAILS = (
    "name", "params", "state", "host", "pids", "start", "end", "heartbeat", "error",
    "interval", "exit code", "hosts", "raw from", "kept findings",
)  # fmt: skip


def _details(st: Store, t: TrialInfo) -> tuple[Any, ...]:
    """What a copy keeps of a trial besides its data, in :data:`_DETAILS` order."""
    series = st.list_series(t.id)
    raw_from = _raw_from(st, series)
    dropped = sorted(
        (s.metric, s.host, s.device, raw_from[s.id]) for s in series if s.id in raw_from
    )
    kept = getattr(st, "kept_findings", None)
    text = None if kept is None else kept(t.id)
    findings = (
        None if text is None else [(d["rule"], d["metric"], d["device"]) for d in json.loads(text)]
    )
    return (
        t.name, t.params, t.state, t.host, tuple(sorted(t.pids)), t.start, t.end,
        t.heartbeat, t.error, t.interval, st.exit_code(t.id), st.hosts(t.id), dropped,
        findings,
    )  # fmt: skip


def _differing(src: Store, a: TrialInfo, dst: Store, b: TrialInfo) -> list[str]:
    """The names of the details in which the trial's copy differs from it."""
    pairs = zip(_DETAILS, _details(src, a), _details(dst, b), strict=True)
    return [name for name, x, y in pairs if x != y]


def _cell(a: int, b: int | None) -> str:
    return f"{a:,}" if a == b else f"{a:,} / {'-' if b is None else f'{b:,}'}"


def _verify(src: Store, dst: Store, plan: list[Source], say: Say) -> int:
    """Count every trial on both sides and print the table; 0 when all agree, else 1 and
    the trials that do not."""
    rows, bad = [], []
    totals = [0, 0, 0]
    for item in plan:
        if item.trial is _NO_TRIAL:
            continue
        have = _counts(src, item.trial.id)
        there = _target_trial(dst, item.key)
        got = None if there is None else _counts(dst, there.id)
        differ = [] if there is None else _differing(src, src.get_trial(item.trial.id), dst, there)
        ok = got == have and not differ
        check = "ok" if ok else f"{', '.join(differ) or 'counts'} differ"
        if there is None:
            check = "missing"
        if not ok:
            bad.append(item.label)
        totals = [totals[0] + have.samples, totals[1] + have.events, totals[2] + have.scalars]
        rows.append(
            [
                item.label,
                _cell(have.series, None if got is None else got.series),
                _cell(have.samples, None if got is None else got.samples),
                _cell(have.events, None if got is None else got.events),
                _cell(have.scalars, None if got is None else got.scalars),
                check,
            ]
        )
    say("")
    say(fmt.table(["trial", "series", "samples", "events", "scalars", "check"], rows))
    say(
        f"{len(rows)} trial(s): {totals[0]:,} samples, {totals[1]:,} events, "
        f"{totals[2]:,} scalars counted in both stores (source / target where they differ)"
    )
    say(_NOT_COPIED)
    if bad:
        say(f"{len(bad)} trial(s) differ: {', '.join(bad)}")
        return 1
    say("every count agrees")
    return 0


_NOT_COPIED = (
    "usage figures kept per ended trial are not copied: the first `tunescope usage` "
    "(or `tunescope compact`) on the target computes them again"
)


def _dry_run(src: Store, plan: list[Source], dst_url: str, say: Say) -> int:
    items = [i for i in plan if i.trial is not _NO_TRIAL]
    counts = [_counts(src, i.trial.id) for i in items]
    rows = [
        [i.label, *(f"{n:,}" for n in (c.series, c.samples, c.events, c.scalars))]
        for i, c in zip(items, counts, strict=True)
    ]
    say(fmt.table(["trial", "series", "samples", "events", "scalars"], rows))
    total = sum(c.items() for c in counts)
    say(f"dry run: would copy {len(items)} trial(s), {total:,} item(s), to {display(dst_url)}")
    return 0
