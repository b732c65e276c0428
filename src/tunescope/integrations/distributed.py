"""One trial for every rank of a ``torch.distributed`` training (torchrun, DDP, Lightning).

::

    import tunescope.integrations.distributed as tsd

    with tsd.trial(run="ddp-lora", params={"lr": 1e-4}) as trial:   # the same line on every rank
        ...  # DDP training: steps, evaluations and scalars are recorded once, by rank 0

How the ranks agree on one trial:

* In a process started inside a trial (``tunescope run -- torchrun ...``, which sets
  ``TUNESCOPE_TRIAL_KEY``): every rank joins that trial, and the command's sampler watches the
  whole tree (torchrun's agent and its workers). When ranks run on other nodes, rank 0 also
  hands the trial over through torchrun's agent store (below), so that the ranks of a node
  that no ``tunescope run`` wraps join it too rather than wait for a hand-over.
* Otherwise, with more than one rank: rank 0 opens the trial and hands its key to the other
  ranks, which join it (through the ``TUNESCOPE_*`` variables, so their child processes join
  too). No password crosses the wire: each rank uses its own URL for the store (the one rank 0
  names, without its password, when the rank has none of its own). The hand-over goes through
  torch's c10d ``TCPStore`` at ``MASTER_ADDR:MASTER_PORT`` when torchrun's agent serves one
  (``TORCHELASTIC_USE_AGENT_STORE``; it does from the start, so :func:`trial` may come before
  ``init_process_group``), else with ``broadcast_object_list`` over the initialised default
  process group (on a gloo group of its own when the default
  backend is another). With neither, rank 0 records alone and the others record nothing (one
  warning).
* One rank alone: an ordinary trial.

Processes: rank 0 starts the sampler. Under torchrun it watches the tree of torchrun's agent
(rank 0's parent), so every rank of the node, its data-loader workers and its GPUs (per
process, through NVML) are the trial's, as under ``tunescope run -- torchrun``; otherwise it
watches rank 0's own tree, which holds the ranks that rank 0 started (Lightning's DDP
launcher). Ranks that are not in that tree (``mp.spawn`` starts them beside rank 0) are not
sampled: open the trial in the launching process instead (``with run.trial():`` around
``mp.spawn``, or ``tunescope run -- python train.py``): ranks that enter :func:`trial`
after ``init_process_group`` join it, as replicas but for rank 0.
On every other node, the node's first rank (``$LOCAL_RANK`` 0, a global rank other than 0)
starts a *node sampler* over the same tree of its node (its torchrun agent's, else its own):
its processes and GPUs join the trial under the node's host name; it records no events and
never ends the trial, which rank 0 does once for the job.

Events: a rank other than 0 joins as a *replica* (``Trial.replica``): the optimizer steps,
evaluations, checkpoints and scalars of data-parallel training are the same on every rank, so
only rank 0 writes them; each replica still records its own torch allocator series.

Nothing here raises into training once the trial is open; opening raises only what
:func:`tunescope.record.run` raises for bad input (an explicit store that cannot be opened), on
rank 0, after telling the other ranks.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from types import TracebackType
from typing import Any

import tunescope.record as ts
from tunescope._env import ENV_INTERVAL, ENV_RUN, ENV_STORE, ENV_TRIAL_ID, ENV_TRIAL_KEY
from tunescope._once import Once
from tunescope.integrations._common import LOG
from tunescope.store import TrialSpec, project_of, redact, resolve_url

__all__ = ["DistributedTrial", "rank", "trial", "world_size"]

_KEY_PREFIX = "tunescope/trial"
_once = Once(LOG)
_calls = itertools.count()
"""How many trials this process opened: every rank opens them in the same order, so the k-th
of each rank meets the k-th of rank 0 under the same key."""


def rank() -> int:
    """This process's global rank: torch.distributed's when initialised, else ``$RANK``, else 0."""
    return ts.process_rank() or 0


def world_size() -> int:
    """Ranks in the job: torch.distributed's when initialised, else ``$WORLD_SIZE``, else 1."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_world_size())
    except ImportError:
        pass
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def _under_torchrun() -> bool:
    return bool(os.environ.get("TORCHELASTIC_RUN_ID")) and os.getppid() > 1


def _first_on_node(me: int) -> bool:
    """Whether this rank is the first of a node other than rank 0's (``$LOCAL_RANK`` 0)."""
    return me != 0 and os.environ.get("LOCAL_RANK", "").strip() == "0"


def _sampled_root() -> int:
    """The process whose tree a sampler of this rank watches: torchrun's agent, else us."""
    return os.getppid() if _under_torchrun() else os.getpid()


class _NoChannel(Exception):
    """The ranks have no way to talk yet."""


def _agent_store() -> tuple[str, int] | None:
    """The address of the store torchrun's agent serves, when it serves one."""
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and addr and port:
        try:
            return addr, int(port)
        except ValueError:
            return None
    return None


def _other_nodes(n: int) -> bool:
    """Whether some of the ``n`` ranks run on another node than this one."""
    try:
        return int(os.environ.get("LOCAL_WORLD_SIZE") or n) < n
    except ValueError:
        return False


def _exchange(
    payload: dict[str, Any] | None, me: int, timeout: float, *, agent_only: bool = False
) -> dict[str, Any] | None:
    """Rank 0's ``payload`` on every rank (see the module doc for the channel).
    ``agent_only``: through torchrun's agent store or not at all (rank 0 publishing for
    whoever asks; no collective call)."""
    import torch.distributed as dist

    key = f"{_KEY_PREFIX}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{next(_calls)}"
    agent = _agent_store()
    if agent is not None:
        addr, port = agent
        wait = timedelta(seconds=timeout)
        store = dist.TCPStore(addr, port, is_master=False, timeout=wait)  # type: ignore[attr-defined]
        if me == 0:
            store.set(key, json.dumps(payload))
            return payload
        value: dict[str, Any] | None = json.loads(store.get(key))
        return value
    if agent_only:
        return payload
    if dist.is_available() and dist.is_initialized():
        group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
        box: list[Any] = [payload]
        dist.broadcast_object_list(box, src=0, group=group)
        if group is not None:
            dist.destroy_process_group(group)
        return box[0] if isinstance(box[0], dict) else None
    raise _NoChannel


class DistributedTrial:
    """The trial of this rank, opened with :meth:`open` and closed with :meth:`close`: for
    integrations whose hooks open and close it at different moments (the Lightning callback);
    :func:`trial` is the context manager for scripts. Arguments as :func:`trial`."""

    def __init__(
        self,
        *,
        run: str | None = None,
        name: str | None = None,
        params: dict[str, Any] | None = None,
        store: str | os.PathLike[str] | None = None,
        interval: float = 1.0,
        sampler: bool = True,
        timeout: float = 300.0,
    ) -> None:
        self._args = (run, name, params, store, float(interval), sampler, float(timeout))
        self._run: ts.Run | None = None
        self._trial: ts.Trial | None = None
        self._sampler: ts.Supervised | None = None
        self._env_saved: dict[str, str | None] | None = None

    @property
    def trial(self) -> ts.Trial | None:
        """The open trial, None before :meth:`open` and after :meth:`close`."""
        return self._trial

    def open(self) -> ts.Trial:
        """Open (rank 0, or a single process) or join (other ranks) the trial and enter it.
        Every rank must call it, in the same order as its other trials."""
        run_name, name, params, store, interval, sampler, timeout = self._args
        me, n = rank(), world_size()
        if ts.disabled() or ENV_TRIAL_KEY in os.environ or n == 1:
            # disabled (a no-op run: nothing shared), joined through the environment, or alone
            joined = ENV_TRIAL_KEY in os.environ and not ts.disabled()
            self._run = ts.run(run_name, store=store, interval=interval, sampler=sampler)
            t = self._enter(self._run.trial(name, params=params))
            if joined and me == 0 and _other_nodes(n) and _agent_store() is not None:
                self._publish(t, sampler, timeout)
            return t
        if me == 0:
            return self._open_rank0(run_name, name, params, store, interval, sampler, timeout)
        return self._join(timeout)

    def _open_rank0(
        self,
        run_name: str | None,
        name: str | None,
        params: dict[str, Any] | None,
        store: str | os.PathLike[str] | None,
        interval: float,
        sampler: bool,
        timeout: float,
    ) -> ts.Trial:
        payload: dict[str, Any] | None = None
        try:
            self._run = ts.run(run_name, store=store, interval=interval, sampler=False)
            t = self._enter(self._run.trial(name, params=params))
            if t.recording and t.key is not None:
                # no password over the wire: each rank has its own URL for the store
                payload = {
                    "store": self._run.url,
                    "run": self._run.name,
                    "key": t.key,
                    "interval": self._run.interval,
                    "sampler": sampler,
                    "spec": None if t.spec is None else t.spec.doc(),
                }
        finally:  # the other ranks wait for this, whatever happened
            self._share(payload, 0, timeout)
        if sampler and payload is not None and t.spec is not None:
            self._sampler = ts.Supervised(
                self._run.store_url, t.spec, _sampled_root(), self._run.interval
            )
            self._sampler.ready(ts.ENTER_WAIT_S - ts.WAKE_MARGIN_S)
        return t

    def _publish(self, t: ts.Trial, sampler: bool, timeout: float) -> None:
        """Rank 0, in a trial joined through the environment: hand it over through the
        agent store to the ranks of nodes that no ``tunescope run`` wraps (module doc)."""
        run = self._run
        if run is None or not t.recording or t.key is None:
            return
        payload = {
            "store": run.url,
            "run": run.name,
            "key": t.key,
            "interval": run.interval,
            "sampler": sampler,
            "spec": None,  # the trial's owner holds it; the trial exists or is on its way
        }
        try:
            _exchange(payload, 0, timeout, agent_only=True)
        except Exception as exc:
            _once.warn(
                "dist-publish",
                "tunescope: rank 0 could not hand the trial to other nodes (%s: %s)",
                type(exc).__name__,
                exc,
            )

    def _join(self, timeout: float) -> ts.Trial:
        got = self._share(None, rank(), timeout)
        if got is None:  # rank 0 records nothing: neither does this rank
            self._run = ts.Run("unrecorded", "", interval=1.0, sampler=False, recording=False)
            return self._enter(self._run.trial())
        own = resolve_url(self._args[3])
        url = own if redact(own) == got["store"] else str(got["store"])
        names = (ENV_STORE, ENV_RUN, ENV_TRIAL_KEY, ENV_INTERVAL, ENV_TRIAL_ID)
        self._env_saved = {k: os.environ.get(k) for k in names}
        os.environ.pop(ENV_TRIAL_ID, None)
        os.environ.update(ts.trial_env(url, str(got["run"]), str(got["key"]), got["interval"]))
        self._run = ts.run()  # joins the trial the environment now names
        t = self._enter(self._run.trial())
        if got.get("sampler") and _first_on_node(rank()):
            self._start_node_sampler(url, got)
        return t

    def _start_node_sampler(self, url: str, got: dict[str, Any]) -> None:
        """This node's sampler, in the trial rank 0 opened (see the module doc)."""
        try:
            if got.get("spec"):
                spec = TrialSpec.from_doc(got["spec"])
            else:  # the trial's spec stays with its owner: this one only names it
                spec = TrialSpec(
                    key=str(got["key"]),
                    run=str(got["run"]),
                    host=socket.gethostname(),
                    start=time.time(),
                    interval=float(got["interval"]),
                    project=project_of(url),
                )
            self._sampler = ts.Supervised(
                url, spec, _sampled_root(), float(got["interval"]), node=True
            )
            self._sampler.ready(ts.ENTER_WAIT_S - ts.WAKE_MARGIN_S)
        except Exception as exc:
            _once.warn(
                "dist-node-sampler",
                "tunescope: rank %d cannot sample its node (%s: %s); the trial goes on without it",
                rank(),
                type(exc).__name__,
                exc,
            )

    def _share(self, payload: dict[str, Any] | None, me: int, timeout: float) -> Any:
        try:
            return _exchange(payload, me, timeout)
        except _NoChannel:
            _once.warn(
                "dist-channel",
                "tunescope: rank %d cannot reach rank 0 (torch.distributed is not initialised "
                "and no torchrun agent store is named); %s",
                me,
                "rank 0 records the trial alone" if me == 0 else "this rank records nothing",
            )
        except Exception as exc:
            _once.warn(
                "dist-share",
                "tunescope: rank %d could not share the trial with the other ranks (%s: %s); %s",
                me,
                type(exc).__name__,
                exc,
                "rank 0 records it alone" if me == 0 else "this rank records nothing",
            )
        return None

    def _enter(self, t: ts.Trial) -> ts.Trial:
        self._trial = t.__enter__()
        return self._trial

    def close(self, exc: BaseException | None = None) -> None:
        """Stop the sampler and end the trial: ``failed`` with ``exc`` when given (rank 0's
        exception), else ``completed``. Never raises; a second call does nothing."""
        t, self._trial = self._trial, None
        try:
            if self._sampler is not None:
                self._sampler.request_stop()
            if t is not None:
                if exc is None:
                    t.__exit__(None, None, None)
                else:
                    t.__exit__(type(exc), exc, exc.__traceback__)
            if self._run is not None:
                self._run.close()
                self._run = None
        except Exception as err:
            LOG.warning("tunescope: closing the trial failed (%s: %s)", type(err).__name__, err)
        finally:
            saved, self._env_saved = self._env_saved, None
            for k, v in (saved or {}).items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def __enter__(self) -> ts.Trial:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(exc)


@contextmanager
def trial(
    *,
    run: str | None = None,
    name: str | None = None,
    params: dict[str, Any] | None = None,
    store: str | os.PathLike[str] | None = None,
    interval: float = 1.0,
    sampler: bool = True,
    timeout: float = 300.0,
) -> Iterator[ts.Trial]:
    """The trial of a distributed training, entered on every rank with the same call.

    ``run``, ``name``, ``params``, ``store``, ``interval`` and ``sampler`` mean what they mean
    to :func:`tunescope.record.run` and :meth:`~tunescope.record.Run.trial`, and are read on
    rank 0 only. ``timeout``: seconds the other ranks wait for rank 0 to open the trial. The
    block's exception on rank 0 ends the trial ``failed`` and propagates unchanged."""
    dt = DistributedTrial(
        run=run,
        name=name,
        params=params,
        store=store,
        interval=interval,
        sampler=sampler,
        timeout=timeout,
    )
    t = dt.open()
    try:
        yield t
    except BaseException as exc:
        dt.close(exc)
        raise
    dt.close()
