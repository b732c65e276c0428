"""Where a trial runs: what its sampler records of the host it samples, once, when it starts.

The sampler sends it in its first batch (``Batch.where``); the store keeps it per trial and
host (``Store.hosts``), so a multi-node trial says where each of its nodes ran. Only what is
known goes in: a key is absent when its value is unknown or does not apply.

* ``hostname``: ``socket.gethostname()``.
* ``gpus``: ``[{index, uuid, name}]`` of the GPUs the trial may use (those its
  ``CUDA_VISIBLE_DEVICES`` names, else every one the backend lists): NVML's index, UUID and
  model name, or a replayed recording's (``uuid`` left out when the backend has none).
* ``cuda_visible_devices``: the training process's ``CUDA_VISIBLE_DEVICES`` (as the GPU probe
  read it from ``/proc/PID/environ``; without a probe, the sampler's own).
* ``slurm``: ``job_id``, ``step_id``, ``array_job_id``, ``array_task_id``, ``node_id``,
  ``proc_id`` from ``SLURM_JOB_ID``, ``SLURM_STEP_ID``, ``SLURM_ARRAY_JOB_ID``,
  ``SLURM_ARRAY_TASK_ID``, ``SLURM_NODEID``, ``SLURM_PROCID``, each when set.
* ``kubernetes``: ``pod`` (``POD_NAME``, ``MY_POD_NAME`` or ``KUBERNETES_POD_NAME``, the first
  set), ``namespace`` (``POD_NAMESPACE``), ``node`` (``NODE_NAME``): the names the downward API
  is commonly given; present when ``KUBERNETES_SERVICE_HOST`` or one of those is set.
* ``container``: ``{runtime, id}``, from ``/proc/self/cgroup`` (``docker-<id>.scope``,
  ``/docker/<id>``, ``cri-containerd-<id>``, ``crio-<id>``, ``libpod-<id>``, or a bare id
  under ``kubepods``: no runtime then), else from the mounts of ``/proc/self/mountinfo``
  (``/docker/containers/<id>/``, ``io.containerd.runtime.v2.task/<ns>/<id>/``,
  ``overlay-containers/<id>/userdata``: ``podman`` when ``/run/.containerenv`` exists, else
  ``cri-o``); absent outside a container (or when no id can be read, as with a private
  cgroup namespace and no telling mount).

The Slurm and Kubernetes values come from the sampler's environment, which it inherits from
the training process (or, under ``tunescope run``, passes on to it). Nothing here raises: what
cannot be read is left out.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tunescope.collect._gpuprobe import GpuProbe

__all__ = ["SLURM_VARS", "container_of", "where"]

SLURM_VARS: tuple[tuple[str, str], ...] = (
    ("job_id", "SLURM_JOB_ID"),
    ("step_id", "SLURM_STEP_ID"),
    ("array_job_id", "SLURM_ARRAY_JOB_ID"),
    ("array_task_id", "SLURM_ARRAY_TASK_ID"),
    ("node_id", "SLURM_NODEID"),
    ("proc_id", "SLURM_PROCID"),
)
"""(key in ``where["slurm"]``, the environment variable it is read from)."""

_POD_VARS = ("POD_NAME", "MY_POD_NAME", "KUBERNETES_POD_NAME")
_K8S_VARS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("pod", _POD_VARS),
    ("namespace", ("POD_NAMESPACE",)),
    ("node", ("NODE_NAME",)),
)

_ID = r"([0-9a-f]{64})"
_CGROUP: tuple[tuple[re.Pattern[str], str | None], ...] = (
    (re.compile(rf"docker[-/]{_ID}(?:\.scope)?(?:/|$)"), "docker"),
    (re.compile(rf"cri-containerd-{_ID}\.scope"), "containerd"),
    (re.compile(rf"crio-{_ID}\.scope"), "cri-o"),
    (re.compile(rf"libpod-{_ID}\.scope"), "podman"),
    (re.compile(rf"/kubepods\S*/{_ID}$"), None),
)
_MOUNTS: tuple[tuple[re.Pattern[str], str | None], ...] = (
    (re.compile(rf"/docker/containers/{_ID}/"), "docker"),
    (re.compile(rf"/io\.containerd\.runtime\.v2\.task/[^/\s]+/{_ID}/"), "containerd"),
    (re.compile(rf"/overlay-containers/{_ID}/userdata"), "overlay"),
)


def container_of(cgroup: str, mountinfo: str, *, podman: bool = False) -> dict[str, str] | None:
    """The container a process runs in, from the text of its ``/proc/self/cgroup`` and
    ``/proc/self/mountinfo`` (see the module doc); ``podman``: ``/run/.containerenv`` exists.
    None outside a container."""
    for text, patterns in ((cgroup, _CGROUP), (mountinfo, _MOUNTS)):
        for line in text.splitlines():
            for pattern, runtime in patterns:
                m = pattern.search(line.strip())
                if m is None:
                    continue
                if runtime == "overlay":  # containers/storage: podman's or CRI-O's
                    runtime = "podman" if podman else "cri-o"
                return {"id": m.group(1)} | ({"runtime": runtime} if runtime else {})
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def where(
    gpu: GpuProbe | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    proc: Path = Path("/proc"),
    run: Path = Path("/run"),
) -> dict[str, Any]:
    """Where the trial runs on this host (see the module doc): ``gpu`` is the sampler's GPU
    probe (None: no GPU backend), ``environ`` the environment to read (the sampler's own by
    default), ``proc`` and ``run`` where ``/proc`` and ``/run`` are."""
    env = os.environ if environ is None else environ
    out: dict[str, Any] = {"hostname": socket.gethostname()}
    if gpu is not None:
        infos = [i for i in gpu.infos if gpu.visible is None or i.index in gpu.visible]
        out["gpus"] = [
            {"index": i.index, **({"uuid": i.uuid} if i.uuid else {}), "name": i.name}
            for i in infos
        ]
        cvd = gpu.cuda_visible_devices
    else:
        cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        out["cuda_visible_devices"] = cvd
    slurm = {key: env[var] for key, var in SLURM_VARS if env.get(var)}
    if slurm:
        out["slurm"] = slurm
    k8s = {
        key: value
        for key, names in _K8S_VARS
        if (value := next((env[n] for n in names if env.get(n)), None)) is not None
    }
    if k8s or env.get("KUBERNETES_SERVICE_HOST"):
        out["kubernetes"] = k8s
    container = container_of(
        _read(proc / "self" / "cgroup"),
        _read(proc / "self" / "mountinfo"),
        podman=(run / ".containerenv").exists(),
    )
    if container is not None:
        out["container"] = container
    return out
