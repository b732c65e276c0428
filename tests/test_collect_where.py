"""Where a trial runs (``collect/_where.py``): host, GPUs, scheduler and container ids, only
what is known; and the sampler's first batch carrying it for its host."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from collect_helpers import StoreSink
from tunescope._once import Once
from tunescope.collect import ReplayBackend, _gpuprobe
from tunescope.collect._gpuprobe import GpuProbe
from tunescope.collect._loop import Sampler
from tunescope.collect._where import container_of, where
from tunescope.store import Batch, Store, open_store

ID = "0123456789abcdef" * 4
OTHER = "fedcba9876543210" * 4


@pytest.mark.parametrize(
    ("cgroup", "mountinfo", "podman", "want"),
    [
        # cgroup v1 and v2 (systemd driver) under Docker
        (f"12:memory:/docker/{ID}\n11:cpu:/docker/{ID}\n", "", False, ("docker", ID)),
        (f"0::/system.slice/docker-{ID}.scope\n", "", False, ("docker", ID)),
        # Kubernetes over containerd and CRI-O, podman
        (
            f"0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-{ID}.scope\n",
            "",
            False,
            ("containerd", ID),
        ),
        (f"0::/kubepods.slice/kubepods-pod1.slice/crio-{ID}.scope\n", "", False, ("cri-o", ID)),
        (f"0::/machine.slice/libpod-{ID}.scope/container\n", "", True, ("podman", ID)),
        # the cgroupfs driver names the container by its id alone: the runtime is unknown
        (f"4:memory:/kubepods/burstable/pod1234/{ID}\n", "", False, (None, ID)),
        # a private cgroup namespace hides the path: the mounts still tell
        (
            "0::/\n",
            f"612 590 0:52 /var/lib/docker/containers/{ID}/resolv.conf /etc/resolv.conf rw\n",
            False,
            ("docker", ID),
        ),
        (
            "0::/\n",
            f"1 0 0:1 / / rw - overlay overlay rw,upperdir=/run/containerd/"
            f"io.containerd.runtime.v2.task/k8s.io/{ID}/rootfs\n",
            False,
            ("containerd", ID),
        ),
        (
            "0::/\n",
            f"7 1 8:1 /var/lib/containers/storage/overlay-containers/{ID}/userdata/hostname "
            "/etc/hostname rw\n",
            True,
            ("podman", ID),
        ),
        (
            "0::/\n",
            f"7 1 8:1 /var/run/containers/storage/overlay-containers/{ID}/userdata/hostname "
            "/etc/hostname rw\n",
            False,
            ("cri-o", ID),
        ),
        # the cgroup wins over the mounts; the first line that names a container wins
        (
            f"0::/system.slice/docker-{ID}.scope\n",
            f"1 0 0:1 /var/lib/docker/containers/{OTHER}/hosts /etc/hosts rw\n",
            False,
            ("docker", ID),
        ),
    ],
)
def test_the_container_is_read_from_cgroup_then_mounts(
    cgroup: str, mountinfo: str, podman: bool, want: tuple[str | None, str]
) -> None:
    got = container_of(cgroup, mountinfo, podman=podman)
    runtime, cid = want
    assert got == {"id": cid} | ({"runtime": runtime} if runtime else {})


def test_outside_a_container_there_is_none() -> None:
    host_cgroup = "0::/user.slice/user-1000.slice/session-3.scope\n"
    host_mounts = (
        "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
        # a host running Docker has its layers mounted, which name no container
        f"90 22 0:45 / /var/lib/docker/overlay2/{ID}/merged rw - overlay overlay rw\n"
    )
    assert container_of(host_cgroup, host_mounts) is None
    assert container_of("", "") is None
    # a short hex id is no container id
    assert container_of("12:memory:/docker/0123abcd\n", "") is None


def _proc(tmp_path: Path, cgroup: str = "0::/\n", mountinfo: str = "") -> Path:
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "self" / "cgroup").write_text(cgroup)
    (tmp_path / "proc" / "self" / "mountinfo").write_text(mountinfo)
    (tmp_path / "run").mkdir()
    return tmp_path / "proc"


def test_only_known_keys_are_recorded(tmp_path: Path) -> None:
    proc = _proc(tmp_path)
    got = where(environ={"PATH": "/bin", "HOSTNAME": "x"}, proc=proc, run=tmp_path / "run")
    assert got == {"hostname": socket.gethostname()}


def test_slurm_kubernetes_cuda_and_container_from_environment_and_proc(tmp_path: Path) -> None:
    proc = _proc(tmp_path, cgroup=f"0::/kubepods.slice/cri-containerd-{ID}.scope\n")
    env = {
        "SLURM_JOB_ID": "811",
        "SLURM_STEP_ID": "0",
        "SLURM_ARRAY_JOB_ID": "800",
        "SLURM_ARRAY_TASK_ID": "11",
        "SLURM_NODEID": "1",
        "SLURM_PROCID": "8",
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        "MY_POD_NAME": "train-0",
        "POD_NAMESPACE": "ml",
        "NODE_NAME": "gpu-node-3",
        "CUDA_VISIBLE_DEVICES": "2,3",
    }
    got = where(environ=env, proc=proc, run=tmp_path / "run")
    assert got == {
        "hostname": socket.gethostname(),
        "cuda_visible_devices": "2,3",
        "slurm": {
            "job_id": "811",
            "step_id": "0",
            "array_job_id": "800",
            "array_task_id": "11",
            "node_id": "1",
            "proc_id": "8",
        },
        "kubernetes": {"pod": "train-0", "namespace": "ml", "node": "gpu-node-3"},
        "container": {"id": ID, "runtime": "containerd"},
    }
    # only the Slurm ids that are set; POD_NAME comes before MY_POD_NAME
    got = where(
        environ={"SLURM_JOB_ID": "5", "POD_NAME": "a", "MY_POD_NAME": "b"},
        proc=proc,
        run=tmp_path / "run",
    )
    assert got["slurm"] == {"job_id": "5"} and got["kubernetes"] == {"pod": "a"}
    # inside Kubernetes without downward-API names: it says so, and nothing more
    got = where(environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, proc=proc, run=tmp_path / "run")
    assert got["kubernetes"] == {}


@pytest.fixture
def root() -> Iterator[subprocess.Popen[bytes]]:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="GPU-6f7a8b9c-0d1e-4f2a-9b3c-4d5e6f7a8b02")
    p = subprocess.Popen(["sleep", "120"], env=env)
    yield p
    p.kill()
    p.wait()


def test_gpus_are_the_probes_visible_ones_and_the_roots_cuda_visible_devices(
    root: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    """A replayed A100 pair (synthetic), the training process naming the second by UUID
    prefix: where lists that one, and the value as the training process has it (not the
    sampler's own)."""
    backend = ReplayBackend.open("a100_no_gpm", root_pid=root.pid)
    probe = GpuProbe(backend, root.pid, log=Once("test"))
    second = probe.infos[1]
    got = where(probe, environ={"CUDA_VISIBLE_DEVICES": "0"}, run=tmp_path)
    assert got["gpus"] == [{"index": 1, "uuid": second.uuid, "name": second.name}]
    assert got["cuda_visible_devices"] == "GPU-6f7a8b9c-0d1e-4f2a-9b3c-4d5e6f7a8b02"


def test_the_samplers_first_batch_says_where_for_its_host(
    sqlite_url: str, root: subprocess.Popen[bytes]
) -> None:
    batches: list[Batch] = []

    class Keep(StoreSink):
        def put(self, batch: Batch) -> None:
            batches.append(batch)
            super().put(batch)

    with open_store(sqlite_url) as store:
        assert isinstance(store, Store)
        trial = store.create_trial(store.ensure_run("r").id, host="launcher")
        sampler = Sampler(Keep(store), trial.key, root.pid, 0.2, log=Once("test"))
        for _ in range(2):
            sampler.sample()
            sampler.flush()
        assert [b.where is not None for b in batches] == [True, False]
        assert {b.host for b in batches} == {socket.gethostname()}
        here = store.hosts(trial.id)
        assert list(here) == sorted(["launcher", socket.gethostname()])
        assert here[socket.gethostname()]["hostname"] == socket.gethostname()
        assert here["launcher"] == {}
        assert {s.host for s in store.list_series(trial.id)} == {socket.gethostname()}


def test_a_root_caught_inside_exec_is_read_once_its_environment_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/proc/PID/environ`` and ``cmdline`` read empty while a process is inside ``execve``
    (its parent may already have been told the exec succeeded): the probe reads again until
    they show, so the root's ``CUDA_VISIBLE_DEVICES`` is not taken for unset. A process whose
    environment is empty but whose arguments show (``env -i``) is read as it is, at once."""
    pid = tmp_path / "4242"
    pid.mkdir()
    (pid / "environ").write_bytes(b"")
    (pid / "cmdline").write_bytes(b"")

    def exec_completes() -> None:
        (pid / "environ").write_bytes(b"A=1\0CUDA_VISIBLE_DEVICES=1\0")
        (pid / "cmdline").write_bytes(b"python\0train.py\0")

    timer = threading.Timer(0.05, exec_completes)
    timer.start()
    try:
        got = _gpuprobe._environ_var(4242, "CUDA_VISIBLE_DEVICES", tmp_path)
    finally:
        timer.join()
    assert got == (True, "1")
    (pid / "environ").write_bytes(b"")  # env -i python train.py
    waits: list[float] = []
    monkeypatch.setattr(_gpuprobe.time, "sleep", waits.append)
    assert _gpuprobe._environ_var(4242, "CUDA_VISIBLE_DEVICES", tmp_path) == (True, None)
    assert waits == []
