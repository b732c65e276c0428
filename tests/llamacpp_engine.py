"""A real serving engine for the tests and the benchmark: llama.cpp's server (the xllamacpp
wheel) on 127.0.0.1, 2 slots, 1 thread, serving a small random model made here with gguf.

The model is a llama of 2 layers, 128 wide, over a vocabulary of 64,000 words (``▁w123``):
the output projection makes a generated token cost about 2 ms on one core, so at
concurrency 6 requests queue at the engine's 2 slots and queueing, not noise, sets TTFT.
Its 3 special and 256 byte tokens have zero output weights, so top-k sampling never picks
them: every generated token is a whole word, one streamed chunk. Made in about a second.

Run as a script (``python tests/llamacpp_engine.py MODEL``) it makes the model if missing,
serves it on a free port, prints ``listening URL`` and serves until SIGTERM (exit 0).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np

VOCAB = 64_000
WIDTH = 128
LAYERS = 2
HEADS = 4
N_BYTES = 256
SLOTS = 2
HERE = Path(__file__).resolve()


def make_model(path: Path) -> Path:
    """Write the random GGUF model to ``path``."""
    import gguf

    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(4096)
    w.add_embedding_length(WIDTH)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(2 * WIDTH)
    w.add_head_count(HEADS)
    w.add_head_count_kv(HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(WIDTH // HEADS)
    w.add_tokenizer_model("llama")
    special = [b"<unk>", b"<s>", b"</s>"]
    byte_tokens = [f"<0x{i:02X}>".encode() for i in range(N_BYTES)]
    n_words = VOCAB - len(special) - N_BYTES
    words = [f"\u2581w{i}".encode() for i in range(n_words)]
    w.add_token_list(special + byte_tokens + words)
    w.add_token_scores([0.0] * (len(special) + N_BYTES) + [-float(i) for i in range(n_words)])
    w.add_token_types([2, 3, 3] + [6] * N_BYTES + [1] * n_words)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    def rand(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    w.add_tensor("token_embd.weight", rand(VOCAB, WIDTH))
    w.add_tensor("output_norm.weight", np.ones(WIDTH, np.float32))
    out = rand(VOCAB, WIDTH)
    out[: len(special) + N_BYTES] = 0.0  # never sampled: every token is a word
    w.add_tensor("output.weight", out)
    for i in range(LAYERS):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(WIDTH, np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(WIDTH, np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(f"blk.{i}.{name}.weight", rand(WIDTH, WIDTH))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", rand(2 * WIDTH, WIDTH))
        w.add_tensor(f"blk.{i}.ffn_up.weight", rand(2 * WIDTH, WIDTH))
        w.add_tensor(f"blk.{i}.ffn_down.weight", rand(WIDTH, 2 * WIDTH))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def serve(model: Path, port: int = 0) -> None:
    """Serve ``model`` on ``port`` (0: a free one) until SIGTERM (then exit 0)."""
    import xllamacpp

    p = xllamacpp.CommonParams()
    p.model.path = str(model)
    p.n_parallel = SLOTS
    p.n_ctx = 4096
    p.cpuparams.n_threads = 1
    p.cpuparams_batch.n_threads = 1
    p.endpoint_metrics = True
    p.endpoint_slots = True
    p.hostnames = ["127.0.0.1"]
    p.port = port
    p.warmup = False
    server = xllamacpp.Server(p)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    print("listening", server.listening_address, flush=True)
    while True:
        time.sleep(3600)


def command(model: Path) -> list[str]:
    """The command that serves ``model`` (for ``tunescope load --server-cmd``)."""
    return [sys.executable, str(HERE), str(model)]


@contextlib.contextmanager
def engine(model: Path, timeout: float = 60.0, quiet: bool = False) -> Iterator[str]:
    """Start the engine in a process of its own; yields its base URL; stops it after.
    ``quiet``: its log (a line or more a request) goes nowhere."""
    if not model.exists():
        make_model(model)
    proc = subprocess.Popen(
        command(model),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL if quiet else None,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = ""
        give_up = time.monotonic() + timeout
        while not url and time.monotonic() < give_up:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the engine ended (code {proc.wait()})")
            if line.startswith("listening "):
                url = line.split()[1]
        wait_ready(url, give_up)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def wait_ready(url: str, give_up: float) -> None:
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > give_up:
            raise RuntimeError(f"{url} not ready")
        time.sleep(0.1)


def metrics(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        text: str = r.read().decode()
    return text


if __name__ == "__main__":
    model = Path(sys.argv[1])
    if not model.exists():
        make_model(model)
    serve(model, int(sys.argv[3]) if sys.argv[2:3] == ["--port"] else 0)
