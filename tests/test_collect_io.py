"""Disk and network I/O of a trial, measured against real processes whose I/O is known.

Each test runs the real sampler process (``python -m tunescope.collect``) on a real child and
integrates the rates it stored (rate x interval) back into bytes.

* Disk: a child writes exactly 16 MiB with ``fsync``, then drops the file from the page cache
  and reads it back (``read_bytes`` counts reads that reach storage, so the re-read counts),
  and a grandchild writes 8 MiB and exits. ``write_bytes`` counts pages as they are dirtied,
  plus a little file-system metadata (a few KiB a file here), so the bytes seen lie in
  [N, N + 1 MiB]. The integral weighs each rate by the stored interval while the sampler
  divided by its monotonic one: stored times are rounded to 1 ms, so up to 1 ms on a 0.2 s
  interval, 0.5 %, when all the bytes fall in one interval; the bounds are [0.99 N, 1.01 N +
  1 MiB] (measured here: 23.94 MiB written of 24, 15.96 read of 16).
* Network: per-process network bytes do not exist on Linux, so the metric is the trial's
  network namespace, ``lo`` excluded. The child runs in its own namespace (``unshare --net``,
  as root) joined to the test's by a veth pair; it sends 8 MiB and receives 4 MiB over TCP,
  and also sends 16 MiB to itself over loopback, which must not count. TCP/IP and Ethernet
  headers add < 5 % and the peer's ACKs < 3 % of the other direction; IPv6 neighbour discovery
  a few hundred bytes: the integral lies in [0.99 N, 1.08 N + 0.04 M + 256 KiB] (the 1 %
  as for disk; measured here: 8.01 MiB sent, 4.01 received).
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import numpy as np

from collect_helpers import (
    Proc,
    make_trial,
    python,
    sampled_after,
    series,
    start_sampler,
    stop_sampler,
)
from tunescope.collect._host import HostProbe, parse_net_dev

MIB = 1024 * 1024
INTERVAL = 0.2


def total_bytes(url: str, trial: int, key: str) -> tuple[float, np.ndarray]:
    """Integral of a rate over the trial: each sample covers the interval since the previous
    sample (cpu.capacity is written at every sample, the first included)."""
    t_cap, _ = series(url, trial, "cpu.capacity")
    t, v = series(url, trial, key)
    total = 0.0
    for ti, vi in zip(t, v, strict=True):
        i = int(np.searchsorted(t_cap, ti))
        assert t_cap[i] == ti and i > 0
        total += float(vi) * (ti - t_cap[i - 1])
    return total, v


# ---------------------------------------------------------------------- disk
WRITER = """
import os, subprocess, sys
MIB = 1024 * 1024
def step(word):
    print(word, flush=True)
    sys.stdin.readline()
path = sys.argv[1]
step("up")
block = os.urandom(MIB)
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
for _ in range(16):
    os.write(fd, block)
os.fsync(fd)
os.close(fd)
fd = os.open(path, os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)   # the re-read must reach storage
while os.read(fd, MIB):
    pass
os.close(fd)
grand = subprocess.Popen(
    [sys.executable, "-B", "-c", sys.argv[2], path + ".g"],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
)
assert grand.stdout.readline() == b"written\\n"
step("grandchild wrote")
grand.stdin.close()      # the grandchild exits between two samples
grand.wait()
step("grandchild gone")
"""

GRANDCHILD = """
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
for _ in range(8):
    os.write(fd, os.urandom(1024 * 1024))
os.fsync(fd)
os.close(fd)
print("written", flush=True)
sys.stdin.read()
"""


def test_disk_rates_integrate_to_the_bytes_written_and_read(
    sqlite_url: str, procs: list[Proc], tmp_path: Path
) -> None:
    trial = make_trial(sqlite_url)
    cmd = python(WRITER, str(tmp_path / "data.bin"), GRANDCHILD)
    child = Proc([cmd[0], "-B", *cmd[1:]])
    procs.append(child)
    assert child.expect() == "up"
    s = start_sampler(procs, sqlite_url, trial, child.p.pid, INTERVAL)
    sampled_after(sqlite_url, trial, time.time())  # a baseline before any I/O
    child.send("")
    assert child.expect(timeout=60) == "grandchild wrote"
    sampled_after(sqlite_url, trial, time.time())  # the grandchild's bytes were seen
    child.send("")
    assert child.expect(timeout=60) == "grandchild gone"
    gone = time.time()
    sampled_after(sqlite_url, trial, gone + 3 * INTERVAL)  # and a few samples without it
    child.send("")
    stop_sampler(s)
    written, w_rates = total_bytes(sqlite_url, trial, "disk.write")
    read, r_rates = total_bytes(sqlite_url, trial, "disk.read")
    n = 24 * MIB  # 16 by the child, 8 by the grandchild
    assert 0.99 * n <= written <= 1.01 * n + MIB, written / MIB
    assert 0.99 * 16 * MIB <= read <= 1.01 * 16 * MIB + MIB, read / MIB
    # a process exiting never makes a rate negative, nor jump after it left
    assert (w_rates >= 0).all() and (r_rates >= 0).all()
    t, v = series(sqlite_url, trial, "disk.write")
    assert (v[t > gone + INTERVAL] < 1 * MIB).all(), v[t > gone + INTERVAL] / MIB


# ---------------------------------------------------------------------- network
NET_CHILD = """
import socket, sys, threading
MIB = 1024 * 1024
print("up", flush=True)
host, port = sys.stdin.readline().split()
# loopback: 16 MiB to itself, which the metric leaves out
srv = socket.create_server(("127.0.0.1", 0))
def sink():
    c, _ = srv.accept()
    while c.recv(1 << 20):
        pass
    c.close()
th = threading.Thread(target=sink)
th.start()
with socket.create_connection(srv.getsockname()) as lo:
    lo.sendall(b"l" * (16 * MIB))
th.join()
# over the veth: 8 MiB out, 4 MiB back
with socket.create_connection((host, int(port))) as c:
    c.sendall(b"x" * (8 * MIB))
    c.shutdown(socket.SHUT_WR)
    got = 0
    while True:
        data = c.recv(1 << 20)
        if not data:
            break
        got += len(data)
print("done", got, flush=True)
sys.stdin.readline()
"""


def _ip(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


def _serve(srv: socket.socket, out: dict[str, int]) -> None:
    conn, _ = srv.accept()
    with conn:
        got = 0
        while data := conn.recv(1 << 20):
            got += len(data)
        out["got"] = got
        conn.sendall(b"y" * (4 * MIB))


def test_network_rates_are_the_namespace_traffic_without_loopback(
    sqlite_url: str, procs: list[Proc]
) -> None:
    trial = make_trial(sqlite_url)
    child = Proc(["unshare", "--net", *python(NET_CHILD)])
    procs.append(child)
    assert child.expect() == "up"
    pid = str(child.p.pid)  # unshare execs python: same pid, in the new namespace
    ours, theirs = f"tsio{os.getpid() % 10000}a", f"tsio{os.getpid() % 10000}b"
    host, peer = "10.213.7.1", "10.213.7.2"
    try:
        _ip("ip", "link", "add", ours, "type", "veth", "peer", "name", theirs, "netns", pid)
        _ip("ip", "addr", "add", f"{host}/30", "dev", ours)
        _ip("ip", "link", "set", ours, "up")
        inside = ("nsenter", "-t", pid, "-n", "ip")
        _ip(*inside, "addr", "add", f"{peer}/30", "dev", theirs)
        _ip(*inside, "link", "set", theirs, "up")
        _ip(*inside, "link", "set", "lo", "up")
        srv = socket.create_server((host, 0))
        out: dict[str, int] = {}
        server = threading.Thread(target=_serve, args=(srv, out), daemon=True)
        server.start()
        s = start_sampler(procs, sqlite_url, trial, child.p.pid, INTERVAL)
        sampled_after(sqlite_url, trial, time.time())
        child.send(f"{host} {srv.getsockname()[1]}")
        assert child.expect(timeout=60) == f"done {4 * MIB}"
        server.join(timeout=30)
        srv.close()
        assert out["got"] == 8 * MIB
        sampled_after(sqlite_url, trial, time.time())
        child.send("")
        stop_sampler(s)
    finally:
        subprocess.run(["ip", "link", "del", ours], capture_output=True, timeout=30)
    sent, s_rates = total_bytes(sqlite_url, trial, "net.sent")
    recv, r_rates = total_bytes(sqlite_url, trial, "net.recv")
    n, m = 8 * MIB, 4 * MIB
    assert 0.99 * n <= sent <= 1.08 * n + 0.04 * m + 256 * 1024, sent / MIB
    assert 0.99 * m <= recv <= 1.08 * m + 0.04 * n + 256 * 1024, recv / MIB
    assert (s_rates >= 0).all() and (r_rates >= 0).all()


def test_net_dev_is_parsed_without_loopback() -> None:
    text = (
        "Inter-|   Receive                                                |  Transmit\n"
        " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets "
        "errs drop fifo colls carrier compressed\n"
        "    lo: 9000 10 0 0 0 0 0 0 9000 10 0 0 0 0 0 0\n"
        "  eth0: 1234 5 0 0 0 0 0 0 5678 6 0 0 0 0 0 0\n"
        "veth-x:10 1 0 0 0 0 0 0 20 2 0 0 0 0 0 0\n"
        "broken line\n"
        "  bad0: x 1 0 0 0 0 0 0 y 2 0 0 0 0 0 0\n"
    )
    assert parse_net_dev(text) == {"eth0": (1234.0, 5678.0), "veth-x": (10.0, 20.0)}
    real = parse_net_dev(Path("/proc/self/net/dev").read_text(encoding="ascii"))
    assert "lo" not in real


def test_interface_and_namespace_changes_never_make_a_rate_negative_or_jump(
    tmp_path: Path, procs: list[Proc]
) -> None:
    """Against a /proc whose net/dev the test writes: an interface that appears counts from
    zero, one whose counters drop (deleted and made again) or that goes away counts nothing
    below zero, and a different namespace (the root gone, another process read) gives no rate
    for that sample rather than the difference of two namespaces' counters."""
    child = Proc(python("import sys; print('up', flush=True); sys.stdin.readline()"))
    procs.append(child)
    assert child.expect() == "up"
    pid = child.p.pid
    (tmp_path / str(pid) / "net").mkdir(parents=True)
    (tmp_path / str(pid) / "ns").mkdir()
    head = "Inter-| Receive | Transmit\n face |bytes packets|bytes packets\n"

    def dev(**ifaces: tuple[int, int]) -> None:
        lines = [f"{n}: {rx} 0 0 0 0 0 0 0 {tx} 0 0 0 0 0 0 0\n" for n, (rx, tx) in ifaces.items()]
        (tmp_path / str(pid) / "net" / "dev").write_text(head + "".join(lines))

    def namespace() -> None:  # a new file: a new inode, as a new namespace has
        ns = tmp_path / str(pid) / "ns" / "net"
        fresh = ns.with_name("net.new")  # made while the old one exists: another inode
        fresh.write_text("")
        fresh.replace(ns)

    probe = HostProbe(pid, proc=tmp_path)
    namespace()
    dev(lo=(10**9, 10**9), eth0=(1000, 2000))
    assert "net.recv" not in probe.sample(0.0)  # the first sample is the baseline
    dev(lo=(2 * 10**9, 2 * 10**9), eth0=(3000, 2500), veth1=(500, 100))
    got = probe.sample(1.0)
    assert (got["net.recv"], got["net.sent"]) == (2000 + 500, 500 + 100)  # lo left out
    dev(eth0=(10, 20), veth1=(700, 100))  # eth0 made again: it counts from zero
    got = probe.sample(2.0)
    assert (got["net.recv"], got["net.sent"]) == (10 + 200, 20 + 0)
    namespace()
    dev(eth0=(10**12, 10**12))
    assert "net.recv" not in probe.sample(3.0)  # another namespace: a new baseline
    dev(eth0=(10**12 + 4000, 10**12 + 8000))
    got = probe.sample(5.0)
    assert (got["net.recv"], got["net.sent"]) == (2000, 4000)  # bytes/s over 2 s
    child.send("")


def test_a_process_that_moves_to_another_namespace_is_read_there(procs: list[Proc]) -> None:
    """The probe keeps its ``/proc/PID/net/dev`` descriptor between samples, and a
    descriptor stays bound to the namespace it was opened in: when the process moves to a
    network namespace of its own (``unshare(CLONE_NEWNET)``), the probe reads that one (only
    ``lo``: no interface counted), not the one it left, and it gives no rate across the move."""
    child = Proc(
        python(
            "import ctypes, sys; print('up', flush=True); sys.stdin.readline()\n"
            "assert ctypes.CDLL(None).unshare(0x40000000) == 0  # CLONE_NEWNET\n"
            "print('moved', flush=True); sys.stdin.readline()"
        )
    )
    procs.append(child)
    assert child.expect() == "up"
    here = set(parse_net_dev(Path("/proc/self/net/dev").read_text(encoding="ascii")))
    assert here, "this namespace has an interface besides lo"
    probe = HostProbe(child.p.pid)
    try:
        probe.sample(0.0)
        probe.sample(1.0)
        assert set(probe._net or {}) == here
        child.send("")
        assert child.expect() == "moved"
        got = probe.sample(2.0)
        assert "net.recv" not in got  # another namespace: a new baseline
        assert probe._net == {}
        got = probe.sample(3.0)
        assert (got["net.recv"], got["net.sent"]) == (0.0, 0.0)
    finally:
        probe.close()
        child.send("")
