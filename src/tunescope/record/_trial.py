"""Trials: the context manager that records one configuration of a run.

A :class:`Trial` entered in its own process (an *owner* trial) makes a key for the trial and
its spec, starts its writer (which creates the trial in the store when it first reaches it),
its flusher and its sampler, makes itself the current trial, and names itself in the
environment (see ``_env``) so child processes join it. Entering waits at most
:data:`ENTER_WAIT_S` for the store (to learn the trial's id and name) and the sampler's first
sample; leaving at most :data:`EXIT_WAIT_S`: it asks the sampler for a final sample, hands the
last batch (with how the trial ended) to the writer, and gives the store until the deadline to
take it. What the store has not taken by then is spooled, and replayed by the sampler, which
outlives the training, or by ``tunescope sync``. The end is written ahead of the process's
exit: it goes to the writer (store, else spool) and is handed to the sampler too, which writes
it unless the trial has ended by then; when neither kept it, leaving says so on stderr. The
state: ``completed`` after a normal end (or ``SystemExit`` with code 0 / None), ``failed``
with ``"ExcType: message"`` after any other exception, KeyboardInterrupt included; a
``torch.cuda.OutOfMemoryError`` (recognised without importing torch) ends it ``failed`` with
``"out of memory (CUDA); allocator peak X on cuda:N; OutOfMemoryError: ..."`` (the peak
from ``torch.cuda.max_memory_allocated`` where CUDA was initialised). The exception
propagates unchanged. When the store cannot be used at all the block still runs, recording nothing.

An *attached* trial (``attach``: this process was started inside another process's trial)
records into that trial, starts no sampler and changes no state on exit. An attached trial in
a ``torch.distributed`` rank other than 0 (see ``_env.process_rank``) is a *replica*: the
optimizer steps, evaluations, checkpoints, marks, data waits and scalars of a data-parallel
training are the same on every rank, so only rank 0 records them; a replica records only what
is its own (the torch allocator series of its GPU), and its processes are the sampler's.

How an owner trial ends, in order: the state given to :meth:`Trial.end_as` if any (with
``defer``, written only if the store still has the trial running); ``pruned``
when the block ends with Optuna's ``TrialPruned`` (recognised without importing optuna);
``failed`` for any other exception (``SystemExit`` 0 / None excepted); else ``completed``.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from tunescope import _clock
from tunescope._env import ENV_TRIAL_ID
from tunescope._protocol import OOM_CUDA
from tunescope.record import _state
from tunescope.record._env import process_rank, restore_env, set_env, trial_env
from tunescope.record._flush import Flusher, flush_period
from tunescope.record._launch import Supervised
from tunescope.record._safety import LOG, Once, guarded, once, skipped
from tunescope.record._watch import Watched
from tunescope.store import Batch, TrialEnd, TrialSpec, Writer, new_key, os_user

if TYPE_CHECKING:
    from tunescope.record._run import Run

__all__ = [
    "ENTER_WAIT_S",
    "EXIT_WAIT_S",
    "WAKE_MARGIN_S",
    "Trial",
    "error_text",
    "jsonable",
    "rec_trial",
]

ENTER_WAIT_S = 0.5
"""Longest entering a run or a trial holds the training thread, counted from the call."""

_monotonic = time.monotonic
"""``Trial.log``'s clock: a reading the flusher puts on the trial's axis (one C call here)."""
_hooked = False
"""Whether the optimizer hook is in: once it is, ``Trial.log`` no longer looks for torch."""
_modules = sys.modules
"""Where ``Trial.log`` looks for torch's optimizer module (one dict lookup, no call)."""
_OPTIMIZER_MODULE = _state.OPTIMIZER_MODULE
"""The name it looks up there, bound here: no attribute read of ``_state`` on that path."""

WAKE_MARGIN_S = 0.15
"""Of :data:`ENTER_WAIT_S`, what is left for the work after the waits: a thread whose wait
times out is woken when the machine gives it a core again, which on a busy machine takes
tens of milliseconds past the timeout. The waits for the store and the sampler's first
sample end this much before the bound, so that entering still returns within it."""

EXIT_WAIT_S = 0.8
"""Longest leaving a trial waits for its last writes (the rest is spooled), so that leaving
returns within a second whatever the store does."""

T = TypeVar("T")


def jsonable(value: Any) -> Any:
    """Params as JSON values: non-finite floats become None, unknown objects their str()
    (how a trial keeps its params; for integrations that write a trial's spec themselves)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    try:
        as_float = float(value)
        return jsonable(as_float)
    except (TypeError, ValueError):
        return str(value)


def error_text(exc: BaseException) -> str:
    """How a failed trial records its exception: ``"Type: message"``, at most 4000 chars."""
    msg = str(exc)
    text = f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
    return text if len(text) <= 4000 else text[:3997] + "..."


def _is_pruned(exc: BaseException) -> bool:
    """Whether ``exc`` is Optuna's ``TrialPruned`` (looked up, never imported)."""
    pruned = getattr(sys.modules.get("optuna.exceptions"), "TrialPruned", None)
    return isinstance(pruned, type) and isinstance(exc, pruned)


def cuda_oom(exc: BaseException | None) -> BaseException | None:
    """The ``torch.cuda.OutOfMemoryError`` that ``exc`` is or was raised from (its cause or
    context, a few levels deep), looked up in torch if loaded, never imported; else None."""
    torch = sys.modules.get("torch")
    cls = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)
    if not isinstance(cls, type):
        return None
    for _ in range(5):
        if exc is None:
            return None
        if isinstance(exc, cls):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def cuda_oom_text(exc: BaseException) -> str:
    """How a trial that a CUDA OOM ended records it: :data:`~tunescope._protocol.OOM_CUDA`,
    the allocator's peak where CUDA was initialised, and the exception."""
    parts = [OOM_CUDA]
    try:
        cuda = sys.modules["torch"].cuda
        if cuda.is_initialized():
            peaks = [(cuda.max_memory_allocated(i), i) for i in range(cuda.device_count())]
            peak, dev = max(peaks, default=(0, 0))
            if peak > 0:
                parts.append(f"allocator peak {peak / 2**30:.2f} GiB on cuda:{dev}")
    except Exception:  # a peak is a bonus: the reason stands without it
        pass
    parts.append(error_text(exc))
    text = "; ".join(parts)
    return text if len(text) <= 4000 else text[:3997] + "..."


def _tree_bytes(path: Path) -> int | None:
    try:
        if path.is_file():
            return path.stat().st_size
        if not path.is_dir():
            return None
        total = 0
        for root, _dirs, files in os.walk(path):
            for f in files:
                try:
                    total += os.lstat(os.path.join(root, f)).st_size
                except OSError:
                    pass
        return total
    except OSError:
        return None


class Trial:
    """One configuration tried inside a run; a context manager (see the module doc).

    Outside its ``with`` block, or when the store could not be used, every method is a cheap
    no-op that returns what training expects (``watch`` gives the iterable back).
    """

    def __init__(
        self,
        run: Run,
        name: str | None,
        params: dict[str, Any] | None,
        *,
        attach: tuple[str, str] | None = None,
        key: str | None = None,
    ) -> None:
        self._run = run
        self._name = name
        self._params = dict(params or {})
        self._attach = attach
        self._given_key = key
        self._key: str | None = None
        self._spec: TrialSpec | None = None
        self._rec: _state.Recorder | None = None
        self._prev: _state.Recorder | None = None
        self._writer: Writer | None = None
        self._flusher: Flusher | None = None
        self._sampler: Supervised | None = None
        self._env_saved: dict[str, str | None] | None = None
        self._entered = False
        self._left = False
        self._replica = False
        # where log() puts a scalar: the recorder's scalars.append while the trial is open
        # and records scalars (not a replica); None before, after and otherwise
        self._sink: Callable[[Any], None] | None = None
        self._end_as: tuple[str, str | None, bool] | None = None
        self._once = Once(LOG)
        self._clocked = False

    # ------------------------------------------------------------------ identity
    @property
    def id(self) -> int | None:
        """The trial's id in the store, once the store has answered; None before, and when
        nothing is recorded."""
        w = self._writer
        return None if w is None else w.trial_id

    @property
    def key(self) -> str | None:
        """The key the trial's writers name it by (see ``store/produce/_batch.py``)."""
        return self._key

    @property
    def spec(self) -> TrialSpec | None:
        """How the store creates this (owner) trial if it has not seen it (None when
        attached or not recording): for a launcher that starts the trial's sampler itself."""
        return self._spec

    @property
    def name(self) -> str | None:
        """The trial's name: as the store gave it once it answered (a default ``trial-<k>``,
        or a taken name with a ``-2`` suffix), else as asked."""
        w = self._writer
        if w is not None and w.trial is not None:
            return w.trial.name
        return self._name

    @property
    def params(self) -> dict[str, Any]:
        w = self._writer
        if self._attach is not None and w is not None and w.trial is not None:
            return dict(w.trial.params)
        return dict(self._params)

    @property
    def run(self) -> Run:
        return self._run

    @property
    def attached(self) -> bool:
        """True when this process joined a trial another process owns."""
        return self._attach is not None

    @property
    def replica(self) -> bool:
        """True in a rank other than 0 of a ``torch.distributed`` job attached to the trial:
        it records no events nor scalars (rank 0 records those; see the module doc)."""
        return self._replica

    @property
    def recording(self) -> bool:
        """True while the trial is open and its data goes to the store."""
        return self._rec is not None and not self._rec.closed

    @property
    def writer(self) -> Writer | None:
        """The trial's writer in this process (its counts tell what was written, spooled,
        rejected), while the trial records."""
        return self._writer

    def __repr__(self) -> str:
        return (
            f"Trial(id={self.id}, name={self.name!r}, run={self._run.name!r}, "
            f"attached={self.attached}, recording={self.recording})"
        )

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> Trial:
        if self._entered:
            once.warn(
                "reenter", "tunescope: a trial can be entered once; %r records nothing more", self
            )
            return self
        self._entered = True
        try:
            self._start()
        except Exception as exc:
            LOG.warning(
                "tunescope: cannot record trial %s (%s: %s); training goes on unrecorded",
                self._name or "",
                type(exc).__name__,
                exc,
            )
            self._teardown(None, record_end=False)
        except BaseException as exc:  # Ctrl-C while starting: the block never runs
            self._teardown(exc)
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self._teardown(exc)
        except Exception as err:
            once.warn(
                "finish",
                "tunescope: ending trial %s failed (%s: %s)",
                self.name,
                type(err).__name__,
                err,
            )

    def _start(self) -> None:
        run = self._run
        if not run.recording:
            return
        deadline = time.monotonic() + ENTER_WAIT_S - WAKE_MARGIN_S
        start = _clock.start()  # the trial's times: this anchor + monotonic (see _clock)
        self._clocked = True
        owner = self._attach is None
        url = run.store_url
        spec: TrialSpec | None = None
        if owner:
            key = self._given_key or new_key()
            spec = TrialSpec(
                key=key,
                run=run.name,
                name=self._name,
                params=jsonable(self._params),
                host=socket.gethostname(),
                pids=(os.getpid(),),
                start=start,
                interval=run.interval,
                project=run.project,
                os_user=os_user(),
            )
        else:
            assert self._attach is not None
            key = self._attach[1]
        self._key, self._spec = key, spec
        rec = _state.Recorder(key)
        if not owner and (process_rank() or 0) > 0:
            self._replica = True
            rec.auto_steps = False
        label = f"trial {self._name or key[:8]}"
        writer = self._writer = Writer(url, spec=spec, name=label, log=self._once)
        # the trial exists as soon as the store answers; a joining process adds its pid
        writer.put(Batch(key, spec=spec, pids=None if owner else (os.getpid(),)))
        if owner and run.sampler:
            assert spec is not None
            self._sampler = Supervised(url, spec, os.getpid(), run.interval)
        rec_trial[id(rec)] = self
        self._flusher = Flusher(
            rec, writer, period=flush_period(run.interval), sampler=self._sampler
        )
        self._flusher.start()
        self._rec = rec
        if not self._replica:
            self._sink = rec.scalars.append
        self._prev = _state.push(rec)
        if owner:
            self._env_saved = set_env(trial_env(url, run.name, key, run.interval))
        _state.ensure_hook()
        writer.flush(deadline - time.monotonic())
        if self._sampler is not None:
            self._sampler.ready(deadline - time.monotonic())
        if owner and writer.trial_id is not None:
            os.environ[ENV_TRIAL_ID] = str(writer.trial_id)

    def _teardown(self, exc: BaseException | None, *, record_end: bool = True) -> None:
        """Leave the trial: stop the sampler, hand over the last batch (with how the trial
        ended, unless ``record_end`` is False), bounded by :data:`EXIT_WAIT_S` (see the
        module doc). Safe on a trial that started half-way, and a second time."""
        rec = self._rec
        writer = self._writer
        t_end = _clock.now()
        if self._clocked:
            self._clocked = False
            _clock.stop()
        if writer is None or self._left:
            return
        self._left = True
        self._sink = None
        deadline = time.monotonic() + EXIT_WAIT_S
        if rec is not None:
            if self._sampler is not None:
                gap = self._sampler.gap_to(t_end)
                if gap is not None:
                    rec.events.append(gap)
            rec.closed = True
            _state.pop(rec, self._prev)
        self._restore_env()
        end = self._end(t_end, exc) if record_end else None
        handed = False
        if self._sampler is not None:  # stdin stays open for what the writer cannot keep
            handed = self._sampler.request_stop(end, keep_open=True)
        if self._flusher is not None:
            self._flusher.close(end, timeout=max(0.0, deadline - time.monotonic()))
        elif end is not None and self._key is not None:
            writer.put(Batch(self._key, end=end))
        hand = self._sampler.hand if self._sampler is not None else None
        landed = writer.close(max(0.0, deadline - time.monotonic() - 0.05), handoff=hand)
        if self._sampler is not None:
            self._sampler.close_stdin()
        if end is not None and not (landed or handed or writer.left_in_spool):
            self._say_end_lost(end)
        if self._sampler is not None:
            self._sampler.wait(deadline - time.monotonic())
        if rec is not None:
            rec_trial.pop(id(rec), None)

    def _say_end_lost(self, end: TrialEnd) -> None:
        """Neither the store, the spool nor a sampler took the trial's end: say so."""
        how = end.state if end.error is None else f"{end.state}: {end.error[:200]}"
        with contextlib.suppress(Exception):  # a closed stderr: nothing more to do
            sys.stderr.write(
                f"tunescope: the end of trial {self.name or self._key} ({how}) was not kept: "
                "the store did not take it in time, the spool could not, and no sampler "
                "was there to hand it to\n"
            )
            sys.stderr.flush()

    def _restore_env(self) -> None:
        saved, self._env_saved = self._env_saved, None
        if saved is not None and self._key is not None:
            restore_env(saved, self._key)

    def _end(self, t_end: float, exc: BaseException | None) -> TrialEnd | None:
        """How an owner trial ended (attached trials leave that to the owner)."""
        if self._attach is not None:
            return None
        state, error, defer = "completed", None, False
        if self._end_as is not None:
            state, error, defer = self._end_as
        elif exc is not None and _is_pruned(exc):
            state = "pruned"
        elif (oom := cuda_oom(exc)) is not None:
            state, error = "failed", cuda_oom_text(oom)
        elif exc is not None and not (isinstance(exc, SystemExit) and exc.code in (None, 0)):
            state, error = "failed", error_text(exc)
        return TrialEnd(state, t_end, error, only_if_running=defer)

    # ------------------------------------------------------------------ recording
    def _events(self) -> Any:
        rec = self._rec
        if rec is None or rec.closed or self._replica:
            return None
        _state.ensure_hook()
        return rec.events

    def watch(self, iterable: Iterable[T], name: str | None = None) -> Iterable[T]:
        """Wrap a data iterable: each batch records a ``data_wait`` event (wait in ``next()``
        as duration, batch index as step, step time as value). The iterable itself is
        returned unchanged when nothing is recorded."""
        try:
            events = self._events()
            if events is None:
                return iterable
            return Watched(iterable, events, name)
        except Exception as exc:
            self._once.warn(
                "watch",
                "tunescope: watch() failed (%s: %s); the iterable is used unwatched",
                type(exc).__name__,
                exc,
            )
            return iterable

    @contextmanager
    def evaluation(self, name: str = "eval") -> Iterator[None]:
        """Record the block as an ``evaluation`` interval (t = start, duration in s), also
        when it raises."""
        t0 = _clock.now()
        p0 = time.perf_counter()
        try:
            yield
        finally:
            self._interval("evaluation", name, t0, time.perf_counter() - p0)

    @guarded()
    def _interval(
        self, kind: str, name: str, t0: float, duration: float, step: int | None = None
    ) -> None:
        events = self._events()
        if events is not None:
            events.append((kind, t0, name, step, duration, None, None))

    def log(self, step: int | None = None, **values: Any) -> None:
        """Record scalars (``loss=…``, ``**{"eval/accuracy": …}``). Values that are not
        finite numbers are skipped with one warning per name.

        A torch tensor is never read here: reading a CUDA tensor waits for the device, which
        would stall the training thread. A one-element tensor is kept as ``detach().clone()``
        (no graph held, no wait: the copy is queued on the device like any kernel, and later
        in-place changes or a CUDA-graph replay of the original do not change it) and the
        flusher thread turns it into a float, at most a flush period later; until then the
        buffer holds that one-element copy (a few hundred bytes of device memory each). One
        that cannot be converted there, or is not finite, is dropped with one warning per
        name.

        The call is on the training loop's path, once a step, usually right after work that
        left the processor's caches cold: a finite Python float (``loss.item()``) takes the
        shortest path, a tuple appended (``make bench-peers`` times it in the loop). It is
        guarded as every SDK call is (an internal error logs once and is skipped), by a
        ``try`` of its own: :func:`~tunescope.record._safety.guarded`'s wrapper would cost a
        call and two dicts of keywords."""
        global _hooked
        try:
            append = self._sink
            if append is None:  # not open, or a replica
                return
            if not _hooked and _OPTIMIZER_MODULE in _modules:  # once in, it stays
                _hooked = _state.ensure_hook()
            t = _monotonic()
            if step.__class__ is not int and step is not None:
                step = int(step)
            for key, v in values.items():
                if v.__class__ is float and v - v == 0.0:  # finite (nan - nan, inf: nan)
                    append((key, step, t, v))
                else:
                    self._log_other(append, key, step, t, v)
        except Exception as exc:  # never into training
            skipped("Trial.log", exc)

    def _log_other(self, append: Any, key: str, st: int | None, t: float, v: Any) -> None:
        """:meth:`log` of a value other than a finite float: a tensor (see there), a number
        of another type, or something skipped with one warning per name."""
        tensor = getattr(sys.modules.get("torch"), "Tensor", None)
        if tensor is not None and isinstance(v, tensor):
            try:
                if v.numel() != 1:  # metadata only: no device wait
                    raise TypeError(f"a tensor of {v.numel()} elements, not one")
                append((key, st, t, v.detach().clone()))
            except Exception as exc:
                self._once.warn(
                    f"log:{key}",
                    "tunescope: log(%s=…) skipped: %s (further ones of %s are skipped silently)",
                    key,
                    exc,
                    key,
                )
            return
        try:
            if isinstance(v, (str, bytes)):
                raise TypeError("not a number")
            f = float(v)
        except (TypeError, ValueError, RuntimeError):
            f = math.nan
        if not math.isfinite(f):
            self._once.warn(
                f"log:{key}",
                "tunescope: log(%s=%r) skipped: not a finite "
                "number (further ones of %s are skipped silently)",
                key,
                v,
                key,
            )
            return
        append((key, st, t, f))

    @guarded()
    def checkpoint(
        self, path: str | os.PathLike[str], name: str | None = None, *, step: int | None = None
    ) -> None:
        """Record a ``checkpoint`` event for a file or directory just written (``name``
        ``"adapter"`` for an adapter save): data ``{"path": absolute path, "bytes": size or
        total of the tree (None if missing)}``, ``step`` the optimizer step it was saved at."""
        events = self._events()
        if events is None:
            return
        t = _clock.now()
        p = Path(path).absolute()
        data = {"path": str(p), "bytes": _tree_bytes(p)}
        st = None if step is None else int(step)
        events.append(("checkpoint", t, name or "checkpoint", st, None, None, data))

    # ------------------------------------------------------------------ for integrations
    @property
    def auto_optimizer_steps(self) -> bool:
        """Whether torch's global optimizer hook records this trial's optimizer steps (True
        by default). An integration that knows the framework's own step numbers (the HF
        Trainer's ``global_step``, Lightning's ``global_step``) sets it False for the
        duration of training and calls :meth:`optimizer_step` once per real step."""
        rec = self._rec
        return True if rec is None else rec.auto_steps

    @auto_optimizer_steps.setter
    def auto_optimizer_steps(self, value: bool) -> None:
        rec = self._rec
        if rec is not None and not self._replica:  # a replica records no steps
            rec.auto_steps = bool(value)

    @guarded()
    def optimizer_step(self, step: int, name: str | None = None) -> None:
        """Record one optimizer step, now, numbered ``step`` (e.g. the Trainer's global step
        after the update). It counts in ``train.throughput`` like a hooked step."""
        events = self._events()
        if events is not None:
            events.append(("optimizer_step", _clock.now(), name, int(step), None, None, None))

    @guarded()
    def record_evaluation(
        self, name: str, start: float, duration: float, step: int | None = None
    ) -> None:
        """Record an ``evaluation`` interval that already happened (``start`` epoch s,
        ``duration`` s), at optimizer step ``step``: for a framework that reports an
        evaluation once it is over (the Trainer's ``on_evaluate`` with ``eval_runtime``)."""
        self._interval(
            "evaluation",
            str(name),
            float(start),
            float(duration),
            None if step is None else int(step),
        )

    @guarded()
    def update_params(self, params: dict[str, Any]) -> None:
        """Merge ``params`` into the trial's params, in the store too (for params known only
        once training runs: Optuna suggests them inside the objective)."""
        w, key = self._writer, self._key
        if w is None or key is None:
            return
        merged = {**self.params, **params}
        batch = Batch(key, params=jsonable(merged))
        if self._left:  # the trial's writer is closed: one of its own, bounded like an exit
            late = Writer(self._run.store_url, name=f"{w.name} (late params)", log=self._once)
            late.put(batch)
            late.close(EXIT_WAIT_S)
        else:
            w.put(batch)
        self._params = merged

    @guarded()
    def end_as(self, state: str, error: str | None = None, *, defer: bool = False) -> None:
        """Set how this (owner) trial ends, whatever ends its block: ``"completed"``,
        ``"pruned"`` (stopped early by a pruner) or ``"failed"`` with ``error``. With
        ``defer`` the end is written only if the trial is still running in the store then:
        another process that knows better (Ray Tune's driver) may have ended it already."""
        if state not in ("completed", "pruned", "failed"):
            raise ValueError(f"a trial ends completed, pruned or failed, not {state!r}")
        self._end_as = (state, None if error is None else str(error)[:4000], bool(defer))

    @guarded()
    def mark(self, name: str) -> None:
        """Record a point event ``mark`` called ``name``."""
        events = self._events()
        if events is not None:
            events.append(("mark", _clock.now(), str(name), None, None, None, None))


rec_trial: dict[int, Trial] = {}
"""Open trials by id() of their recorder, for :func:`current_trial`."""
