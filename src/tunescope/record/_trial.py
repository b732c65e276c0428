"""Trials: the context manager that records one configuration of a run.

A :class:`Trial` entered in its own process (an *owner* trial) creates the trial in the store,
starts its flusher and its sampler, makes itself the current trial, and names itself in the
environment (see ``_env``) so child processes join it. On exit it makes itself not current,
stops the sampler in order, makes the final flush, and then sets the state: ``completed``
after a normal end (or ``SystemExit`` with code 0 / None), ``failed`` with
``"ExcType: message"`` after any other exception, KeyboardInterrupt included. The exception
propagates unchanged. When the store cannot be used the block still runs, recording nothing.

An *attached* trial (``attach_to``: this process was started inside another process's trial)
records into that trial, starts no sampler and changes no state on exit. An attached trial in
a ``torch.distributed`` rank other than 0 (see ``_env.process_rank``) is a *replica*: the
optimizer steps, evaluations, checkpoints, marks, data waits and scalars of a data-parallel
training are the same on every rank, so only rank 0 records them; a replica records only what
is its own (the torch allocator series of its GPU), and its processes are the sampler's.

How an owner trial ends, in order: the state given to :meth:`Trial.end_as` if any; ``pruned``
when the block ends with Optuna's ``TrialPruned`` (recognised without importing optuna);
``failed`` for any other exception (``SystemExit`` 0 / None excepted); else ``completed``.
"""

from __future__ import annotations

import math
import os
import socket
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from tunescope.errors import Conflict
from tunescope.record import _state
from tunescope.record._env import process_rank, restore_env, set_env
from tunescope.record._flush import Flusher, flush_period
from tunescope.record._launch import SamplerHandle, start_sampler
from tunescope.record._safety import LOG, Once, guarded, once
from tunescope.record._watch import Watched
from tunescope.store import Store, TrialInfo, open_store

if TYPE_CHECKING:
    from tunescope.record._run import Run

__all__ = ["Trial", "rec_trial"]

T = TypeVar("T")


def _jsonable(value: Any) -> Any:
    """Params as JSON values: non-finite floats become None, unknown objects their str()."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    try:
        as_float = float(value)
        return _jsonable(as_float)
    except (TypeError, ValueError):
        return str(value)


def _error_text(exc: BaseException) -> str:
    msg = str(exc)
    text = f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
    return text if len(text) <= 4000 else text[:3997] + "..."


def _is_pruned(exc: BaseException) -> bool:
    """Whether ``exc`` is Optuna's ``TrialPruned`` (looked up, never imported)."""
    pruned = getattr(sys.modules.get("optuna.exceptions"), "TrialPruned", None)
    return isinstance(pruned, type) and isinstance(exc, pruned)


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
        attach_to: int | None = None,
    ) -> None:
        self._run = run
        self._name = name
        self._params = dict(params or {})
        self._attach_to = attach_to
        self._id: int | None = None
        self._rec: _state.Recorder | None = None
        self._prev: _state.Recorder | None = None
        self._flusher: Flusher | None = None
        self._sampler: SamplerHandle | None = None
        self._env_saved: dict[str, str | None] | None = None
        self._entered = False
        self._replica = False
        self._end_as: tuple[str, str | None] | None = None
        self._once = Once()

    # ------------------------------------------------------------------ identity
    @property
    def id(self) -> int | None:
        """The trial's id in the store; None when nothing is recorded."""
        return self._id

    @property
    def name(self) -> str | None:
        return self._name

    @property
    def params(self) -> dict[str, Any]:
        return dict(self._params)

    @property
    def run(self) -> Run:
        return self._run

    @property
    def attached(self) -> bool:
        """True when this process joined a trial another process owns."""
        return self._attach_to is not None

    @property
    def replica(self) -> bool:
        """True in a rank other than 0 of a ``torch.distributed`` job attached to the trial:
        it records no events nor scalars (rank 0 records those; see the module doc)."""
        return self._replica

    @property
    def recording(self) -> bool:
        """True while the trial is open and its data goes to the store."""
        return self._rec is not None and not self._rec.closed

    def __repr__(self) -> str:
        return (
            f"Trial(id={self._id}, name={self._name!r}, run={self._run.name!r}, "
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
            self._teardown_partial()
        except BaseException as exc:  # Ctrl-C while starting: the block never runs
            self._teardown_partial()
            try:
                self._set_state(time.time(), exc)
            except Exception:
                pass
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self._finish(exc)
        except Exception as err:
            once.warn(
                "finish",
                "tunescope: ending trial %s failed (%s: %s)",
                self._id,
                type(err).__name__,
                err,
            )

    def _start(self) -> None:
        run = self._run
        store = run._store
        if store is None:
            return
        if self._attach_to is None:
            info = self._create(store)
        else:
            info = store.get_trial(self._attach_to)
            self._params = dict(info.params)
        self._id, self._name = info.id, info.name
        rec = _state.Recorder(info.id)
        if self._attach_to is not None and (process_rank() or 0) > 0:
            self._replica = True
            rec.auto_steps = False
        rec_trial[id(rec)] = self
        self._flusher = Flusher(rec, run.url, period=flush_period(run.interval))
        self._flusher.start()
        self._rec = rec
        self._prev = _state.push(rec)
        if self._attach_to is None:
            assert run.id is not None
            self._env_saved = set_env(run.url, run.id, info.id, run.interval)
        _state.ensure_hook()
        if self._attach_to is None and run.sampler:
            self._sampler = start_sampler(run.url, info.id, os.getpid(), run.interval)
            self._flusher.sampler = self._sampler

    def _create(self, store: Store) -> TrialInfo:
        run_id = self._run.id
        assert run_id is not None
        params = _jsonable(self._params)
        kw: dict[str, Any] = {
            "host": socket.gethostname(),
            "pids": [os.getpid()],
            "interval": self._run.interval,
        }
        if self._name is None:
            return store.create_trial(run_id, None, params, **kw)
        for k in range(1, 1000):
            name = self._name if k == 1 else f"{self._name}-{k}"
            try:
                info = store.create_trial(run_id, name, params, **kw)
            except Conflict:
                continue
            if k > 1:
                LOG.warning(
                    "tunescope: run %r already has a trial %r; recording as %r",
                    self._run.name,
                    self._name,
                    name,
                )
            return info
        raise Conflict(f"too many trials named {self._name!r}")

    def _restore_env(self) -> None:
        saved, self._env_saved = self._env_saved, None
        if saved is not None and self._id is not None:
            restore_env(saved, self._id)

    def _teardown_partial(self) -> None:
        try:
            if self._rec is not None:
                _state.pop(self._rec, self._prev)
                self._rec.closed = True
                rec_trial.pop(id(self._rec), None)
            self._restore_env()
            if self._sampler is not None:
                self._sampler.stop()
            if self._flusher is not None:
                self._flusher.close()
        except Exception:
            pass
        self._rec = None

    def _finish(self, exc: BaseException | None) -> None:
        rec = self._rec
        if rec is None or rec.closed:
            return
        t_end = time.time()
        rec.closed = True
        _state.pop(rec, self._prev)
        self._restore_env()
        if self._sampler is not None:
            self._sampler.stop()
        if self._flusher is not None:
            self._flusher.close()
        rec_trial.pop(id(rec), None)
        self._set_state(t_end, exc)

    def _set_state(self, t_end: float, exc: BaseException | None) -> None:
        """Record how an owner trial ended (attached trials leave that to the owner)."""
        if self._attach_to is not None or self._id is None:
            return
        state, error = "completed", None
        if self._end_as is not None:
            state, error = self._end_as
        elif exc is not None and _is_pruned(exc):
            state = "pruned"
        elif exc is not None and not (isinstance(exc, SystemExit) and exc.code in (None, 0)):
            state, error = "failed", _error_text(exc)
        store = self._run._store
        if store is not None:
            store.update_trial(self._id, state=state, end=t_end, error=error)
            return
        with open_store(self._run.url) as own:  # the run was closed before its trial
            own.update_trial(self._id, state=state, end=t_end, error=error)

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
        t0 = time.time()
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

    @guarded()
    def log(self, step: int | None = None, **values: Any) -> None:
        """Record scalars (``loss=…``, ``**{"eval/accuracy": …}``). Values that are not
        finite numbers are skipped with one warning per name."""
        rec = self._rec
        if rec is None or rec.closed or self._replica:
            return
        _state.ensure_hook()
        t = time.time()
        st = None if step is None else int(step)
        for key, v in values.items():
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
                continue
            rec.scalars.append((key, st, t, f))

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
        t = time.time()
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
            events.append(("optimizer_step", time.time(), name, int(step), None, None, None))

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
        if self._id is None:
            return
        merged = {**self._params, **params}
        store = self._run._store
        if store is not None:
            store.update_trial(self._id, params=_jsonable(merged))
        else:
            with open_store(self._run.url) as own:  # the run was closed before its trial
                own.update_trial(self._id, params=_jsonable(merged))
        self._params = merged

    @guarded()
    def end_as(self, state: str, error: str | None = None) -> None:
        """Set how this (owner) trial ends, whatever ends its block: ``"completed"``,
        ``"pruned"`` (stopped early by a pruner) or ``"failed"`` with ``error``."""
        if state not in ("completed", "pruned", "failed"):
            raise ValueError(f"a trial ends completed, pruned or failed, not {state!r}")
        self._end_as = (state, None if error is None else str(error)[:4000])

    @guarded()
    def mark(self, name: str) -> None:
        """Record a point event ``mark`` called ``name``."""
        events = self._events()
        if events is not None:
            events.append(("mark", time.time(), str(name), None, None, None, None))


rec_trial: dict[int, Trial] = {}
"""Open trials by id() of their recorder, for :func:`current_trial`."""
