"""The tracker integrations put a trial's summary into the real MLflow (a file store), W&B
(offline run files) and TensorBoard (event files), read back with each library's own reader:
the numbers are the trial's known peaks and means, its findings are listed with their
severity, and its page is linked. And they never raise into training.

The trackers are imported inside the tests: importing mlflow or wandb takes seconds."""

from __future__ import annotations

import glob
import json
import logging
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tunescope.record as ts
from tunescope._env import ENV_UI_URL
from tunescope.analyze import findings_for_trial, summarize_trial
from tunescope.integrations._summary import (
    DEFAULT_UI_URL,
    TrackerSummary,
    once,
    summarize,
    ui_base,
)
from tunescope.metrics import GIB, headline
from tunescope.store import Event, open_store

T0 = 1_700_000_000.0
UI = "http://ts.example:9000"

# the trial's samples, chosen exact in float32 (the store's codec)
CPU_UTIL = [10.0, 50.0, 90.0, 30.0, 20.0]
GPU_UTIL = {"0": [20.0, 97.0, 60.0], "1": [40.0, 40.0, 40.0]}
CPU_MEM = [10.0, 28.5, 20.0]  # GiB, of a 30 GiB limit: 95 %, a high near-OOM finding
GPU_MEM = {"0": [40.0, 60.0, 50.0]}  # GiB
STEPS = 50

EXPECTED = {
    "tunescope/cpu_utilization_peak_pct": 90.0,
    "tunescope/cpu_utilization_mean_pct": sum(CPU_UTIL) / len(CPU_UTIL),
    "tunescope/gpu_utilization_peak_pct": 97.0,
    "tunescope/gpu_utilization_mean_pct": (20 + 97 + 60 + 40 * 3) / 6,
    "tunescope/cpu_memory_peak_gib": 28.5,
    "tunescope/cpu_memory_mean_gib": (10 + 28.5 + 20) / 3,
    "tunescope/gpu_memory_peak_gib": 60.0,
    "tunescope/gpu_memory_mean_gib": 50.0,
    "tunescope/findings_high": 1.0,
    "tunescope/findings_moderate": 0.0,
    "tunescope/findings_low": 0.0,
    "tunescope/optimizer_steps": float(STEPS),
    "tunescope/duration_s": 120.0,
}

KEYS = ["summary:unrecorded", "summary:incomplete", "summary:ref", "summary:slow"]
KEYS += ["summary:error", "mlflow:no-run", "mlflow:log", "wandb:no-run", "wandb:log"]
KEYS += ["tensorboard:dir", "tensorboard:writer"]


@pytest.fixture(autouse=True)
def fresh_once() -> Iterator[None]:
    """Each test sees the integrations' first warning of each kind."""
    for k in KEYS:
        once.forget(k)
    yield
    for k in KEYS:
        once.forget(k)


@pytest.fixture
def known(tmp_path: Path) -> tuple[str, int, int]:
    """A SQLite store holding one completed trial with the samples above, 50 optimizer steps
    and a CPU memory limit it came near: (url, run id, trial id)."""
    url = str(tmp_path / "store.db")
    with open_store(url) as st:
        run = st.ensure_run("sweep", start=T0)
        tr = st.create_trial(run.id, "lr-3e-4", {"lr": 3e-4}, start=T0, interval=1.0)

        def put(metric: str, values: list[float], device: str | None = None, scale=1.0) -> None:
            sid = st.series(tr.id, metric, device).id
            st.append_samples([(sid, T0 + 1 + k, v * scale) for k, v in enumerate(values)])

        put("cpu.util", CPU_UTIL)
        for dev, vals in GPU_UTIL.items():
            put("gpu.util", vals, dev)
        put("cpu.mem", CPU_MEM, scale=GIB)
        put("cpu.mem.limit", [30.0] * len(CPU_MEM), scale=GIB)
        for dev, vals in GPU_MEM.items():
            put("gpu.mem", vals, dev, scale=GIB)
        st.add_events(
            [Event(tr.id, "optimizer_step", T0 + 1 + k, "AdamW", k + 1) for k in range(STEPS)]
        )
        st.update_trial(tr.id, state="completed", end=T0 + 120)
        return url, run.id, tr.id


def check_numbers(got: dict[str, Any]) -> None:
    for key, value in EXPECTED.items():
        assert got[key] == pytest.approx(value, rel=1e-6), key


def test_the_summary_is_analyze_s_peaks_and_findings(known: tuple[str, int, int]) -> None:
    url, run_id, trial_id = known
    s = summarize(trial_id, store=url, ui_url=UI + "/")
    assert s is not None
    check_numbers(s.metrics)
    with open_store(url) as st:
        info = st.get_trial(trial_id)
        stored = summarize_trial(st, info)
        findings = findings_for_trial(st, info)
    # the same numbers analyze gives (display units), not a second computation
    assert s.metrics["tunescope/gpu_utilization_peak_pct"] == stored.metrics["gpu.util"].peak
    assert s.metrics["tunescope/cpu_memory_peak_gib"] == stored.metrics["cpu.mem"].peak / GIB
    assert [f.id for f in s.findings] == [f.id for f in findings]
    (high,) = [f for f in findings if f.severity == "high"]
    assert high.rule == "near_oom_cpu"
    tags = s.tags()
    assert tags["tunescope/findings"] == f"high: {high.title}"
    assert tags["tunescope/url"] == f"{UI}/#/runs/{run_id}/resources?trial={trial_id}"
    assert tags["tunescope/trial"] == "lr-3e-4" and tags["tunescope/run"] == "sweep"
    assert tags["tunescope/state"] == "completed" and "tunescope/complete" not in tags
    assert s.step == STEPS
    text = s.text()
    assert "| GPU Utilization Percent | 97.00 % |" in text
    assert "Findings: 1 high, 0 moderate, 0 low" in text
    assert f"- high: {high.title}" in text and tags["tunescope/url"] in text
    # by name and run, the same trial
    by_name = summarize("lr-3e-4", run="sweep", store=url, ui_url=UI)
    assert by_name is not None and by_name.trial.id == trial_id


def test_every_headline_metric_has_a_peak_and_a_mean_key(known: tuple[str, int, int]) -> None:
    url, _, trial_id = known
    s = summarize(trial_id, store=url)
    assert s is not None
    stats = {k for k in s.metrics if k.endswith(("_pct", "_gib"))}
    assert len(stats) == 2 * len(headline())
    assert set(EXPECTED) == set(s.metrics)


def test_the_page_s_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_UI_URL, raising=False)
    assert ui_base(None, "tunescope.db") == DEFAULT_UI_URL == "http://127.0.0.1:8765"
    # a team server serves the page at the root of its address; the path is the project
    assert ui_base(None, "https://ts.example.org:8443/vision") == "https://ts.example.org:8443"
    monkeypatch.setenv(ENV_UI_URL, "https://proxy.example/")
    assert ui_base(None, "https://ts.example.org/vision") == "https://proxy.example"
    assert ui_base("http://other:1/", "tunescope.db") == "http://other:1"


# ---------------------------------------------------------------------------- MLflow
@pytest.mark.ml
def test_mlflow_gets_metrics_and_tags_in_the_active_run(
    known: tuple[str, int, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # MLflow 3 refuses the file store unless asked (it is in maintenance mode there)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    import mlflow
    from mlflow.tracking import MlflowClient

    from tunescope.integrations.mlflow import log_summary

    url, run_id, trial_id = known
    mlflow.set_tracking_uri("file:" + str(tmp_path / "mlruns"))
    try:
        with mlflow.start_run() as active:
            got = log_summary(trial_id, store=url, ui_url=UI)
        assert got is not None
        run = MlflowClient().get_run(active.info.run_id)
        check_numbers(run.data.metrics)
        history = MlflowClient().get_metric_history(
            active.info.run_id, "tunescope/gpu_utilization_peak_pct"
        )
        assert [m.step for m in history] == [STEPS]
        tags = run.data.tags
        assert tags["tunescope/findings"].startswith("high: Near out-of-memory (CPU)")
        assert tags["tunescope/url"] == f"{UI}/#/runs/{run_id}/resources?trial={trial_id}"
        assert tags["tunescope/trial_id"] == str(trial_id)

        # after the fact, by name, into a finished run named by its id
        with mlflow.start_run() as other:
            pass
        assert log_summary("lr-3e-4", run="sweep", store=url, mlflow_run_id=other.info.run_id)
        check_numbers(MlflowClient().get_run(other.info.run_id).data.metrics)
    finally:
        mlflow.set_tracking_uri(None)


@pytest.mark.ml
def test_mlflow_without_an_active_run_logs_one_warning(
    known: tuple[str, int, int], caplog: pytest.LogCaptureFixture
) -> None:
    from tunescope.integrations.mlflow import log_summary

    url, _, trial_id = known
    with caplog.at_level(logging.WARNING, "tunescope.integrations"):
        assert log_summary(trial_id, store=url) is None
        assert log_summary(trial_id, store=url) is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "mlflow.start_run()" in lines[0]


# ---------------------------------------------------------------------------- W&B
def wandb_records(run_dir: str) -> list[Any]:
    """The records of an offline run's transaction log (``run-<id>.wandb``): LevelDB's log
    format (32 KiB blocks of records with a 7-byte header) after W&B's 7-byte file header,
    each record a ``wandb_internal_pb2.Record``."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = glob.glob(f"{run_dir}/run-*.wandb")
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B"
    pos, block, out, part = 7, 32768, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:
            pos += left
            continue
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        part = chunk if kind in (1, 2) else part + chunk
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(part)
            out.append(rec)
    return out


@pytest.mark.ml
def test_wandb_gets_the_summary_in_its_offline_run_files(
    known: tuple[str, int, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONSOLE", "off")
    import wandb

    from tunescope.integrations.wandb import log_summary

    url, run_id, trial_id = known
    wb = wandb.init(project="lora-search")
    try:
        got = log_summary(trial_id, store=url, ui_url=UI)
        assert got is not None
    finally:
        wb.finish()
        wandb.teardown()  # its service process ends with the test, not the session
    summary: dict[str, Any] = {}
    for rec in wandb_records(str(Path(wb.dir).parent)):
        if rec.WhichOneof("record_type") == "summary":
            for item in rec.summary.update:
                summary[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    check_numbers(summary)
    assert summary["tunescope/findings"].startswith("high: Near out-of-memory (CPU)")
    assert summary["tunescope/url"] == f"{UI}/#/runs/{run_id}/resources?trial={trial_id}"
    assert "Findings: 1 high, 0 moderate, 0 low" in summary["tunescope/summary"]


@pytest.mark.ml
def test_wandb_without_a_run_logs_one_warning(
    known: tuple[str, int, int], caplog: pytest.LogCaptureFixture
) -> None:
    from tunescope.integrations.wandb import log_summary

    url, _, trial_id = known
    with caplog.at_level(logging.WARNING, "tunescope.integrations"):
        assert log_summary(trial_id, store=url) is None
    (line,) = [r.getMessage() for r in caplog.records]
    assert "wandb.init()" in line


# ---------------------------------------------------------------------------- TensorBoard
def tb_read(logdir: Path) -> Any:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def check_tb(acc: Any, step: int) -> str:
    got = {}
    for tag in EXPECTED:
        (ev,) = acc.Scalars(tag)
        assert ev.step == step
        got[tag] = ev.value
    check_numbers(got)
    # torch's SummaryWriter.add_text writes the tag with "/text_summary" appended
    (tag,) = [t for t in acc.Tags()["tensors"] if t.startswith("tunescope/summary")]
    (text,) = acc.Tensors(tag)
    return str(text.tensor_proto.string_val[0].decode())


@pytest.mark.ml
def test_tensorboard_into_a_log_dir(known: tuple[str, int, int], tmp_path: Path) -> None:
    from tunescope.integrations.tensorboard import log_summary

    url, run_id, trial_id = known
    assert log_summary(trial_id, tmp_path / "tb", store=url, ui_url=UI) is not None
    text = check_tb(tb_read(tmp_path / "tb"), STEPS)
    assert "Findings: 1 high, 0 moderate, 0 low" in text
    assert "- high: Near out-of-memory (CPU)" in text
    assert f"{UI}/#/runs/{run_id}/resources?trial={trial_id}" in text


@pytest.mark.ml
def test_tensorboard_through_torch_s_summary_writer(
    known: tuple[str, int, int], tmp_path: Path
) -> None:
    from torch.utils.tensorboard import SummaryWriter

    from tunescope.integrations.tensorboard import log_summary

    url, _, trial_id = known
    writer = SummaryWriter(str(tmp_path / "tb"))
    try:
        assert log_summary(trial_id, writer, step=7, store=url) is not None
    finally:
        writer.close()
    assert "| CPU Memory Usage | 28.50 GiB |" in check_tb(tb_read(tmp_path / "tb"), 7)


@pytest.mark.ml
def test_a_trial_of_the_sdk_is_summarised_once_its_data_landed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's trial object, straight after its block: what it recorded is in the store
    and in the summary (its last batch, with the steps and the end, is written on exit)."""
    from tunescope.integrations.tensorboard import log_summary

    monkeypatch.delenv(ENV_UI_URL, raising=False)
    url = str(tmp_path / "sdk.db")
    with ts.run("sdk", store=url, sampler=False) as run, run.trial("t") as trial:
        for k in range(1, 6):
            trial.optimizer_step(k)
    got = log_summary(trial, tmp_path / "tb")
    assert isinstance(got, TrackerSummary)
    assert got.complete is True and got.trial.state == "completed"
    assert got.step == 5 and got.metrics["tunescope/optimizer_steps"] == 5.0
    assert got.tags()["tunescope/complete"] == "true"
    assert got.url == f"{DEFAULT_UI_URL}/#/runs/{got.run.id}/resources?trial={trial.id}"
    (ev,) = tb_read(tmp_path / "tb").Scalars("tunescope/optimizer_steps")
    assert (ev.step, ev.value) == (5, 5.0)


# ---------------------------------------------------------------------------- never raise
@pytest.mark.ml
def test_a_store_that_never_answered_logs_and_raises_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from tunescope.integrations.tensorboard import log_summary

    # nothing listens on port 9: the trial's data is spooled, the store never saw it
    with ts.run("away", store="http://127.0.0.1:9/p", sampler=False) as run, run.trial() as t:
        t.optimizer_step(1)
    with caplog.at_level(logging.WARNING, "tunescope.integrations"):
        assert log_summary(t, tmp_path / "tb", timeout=2.0) is None
        assert log_summary(t, tmp_path / "tb", timeout=2.0) is None
    lines = [r.getMessage() for r in caplog.records if r.name == "tunescope.integrations"]
    assert len(lines) == 2, lines  # once each: the data not landed, the store unreachable
    assert "has not reached the store" in lines[0] and "cannot summarise" in lines[1]
    assert not (tmp_path / "tb").exists()


@pytest.mark.ml
def test_a_tracker_that_fails_and_bad_input_raise_nothing(
    known: tuple[str, int, int], caplog: pytest.LogCaptureFixture
) -> None:
    from tunescope.integrations.tensorboard import log_summary

    class Broken:
        def add_scalar(self, *args: object) -> None:
            raise OSError("disk full")

    url, _, trial_id = known
    with caplog.at_level(logging.WARNING, "tunescope.integrations"):
        assert log_summary(trial_id, Broken(), store=url) is None
        assert log_summary(trial_id, Broken(), store=url) is None
        assert log_summary("lr-3e-4", Broken(), store=url) is None  # a name without its run
        assert log_summary(3.5, Broken(), store=url) is None  # type: ignore[arg-type]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert "OSError: disk full" in lines[0]
    assert "give its run too" in lines[1]
    assert "not 'float'" in lines[2]
