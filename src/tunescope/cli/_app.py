"""The `tunescope` command. Errors from below arrive as TunescopeError and leave here as one
line on stderr with exit code 2; nothing below the CLI prints."""

from __future__ import annotations

import csv
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from tunescope._env import ENV_JOB_ID, ENV_KEEP_RAW, ENV_MAX_SERIES
from tunescope._names import default_run_name, page_link
from tunescope.analyze import Objective, data_wait_share, summarize_trial, trial_objective
from tunescope.cli import _format as fmt
from tunescope.cli import _input as check
from tunescope.cli._completion import completion
from tunescope.cli._input import Command, StoreOpt, as_run
from tunescope.cli._report import report
from tunescope.cli._sync import spool_note
from tunescope.cli._sync import sync as sync_spool
from tunescope.cli._tokens import tokens
from tunescope.cli._usage import usage
from tunescope.errors import ConfigError
from tunescope.metrics import CATALOG, metric
from tunescope.store import (
    EVENT_COLUMNS,
    SAMPLE_COLUMNS,
    Store,
    absolute_url,
    check_url,
    export_rows,
    open_store,
)

app = typer.Typer(
    name="tunescope",
    help="Second-by-second hardware use of every trial of an ML fine-tune, tied to what "
    "training was doing.",
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.command(
    cls=Command,
    context_settings={
        "allow_extra_args": True,
        "ignore_unknown_options": True,
        # options end at the command: all from its first word on is the command's own
        "allow_interspersed_args": False,
    },
)
def run(
    cmd: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="CMD",
            help="The command to run and its arguments: all from its first word on is its "
            "own (-- before it is optional).",
            show_default=False,
        ),
    ] = None,
    run_name: Annotated[
        str | None,
        typer.Option(
            "--run",
            help="Run to add the trial to (created if new); default CMD-DATE.",
            callback=check.not_empty,
        ),
    ] = None,
    trial: Annotated[
        str | None,
        typer.Option("--trial", help="Trial name; default trial-N.", callback=check.not_empty),
    ] = None,
    param: Annotated[
        list[str] | None,
        typer.Option(
            "--param",
            help="A trial parameter KEY=VALUE (VALUE read as JSON if it parses); repeatable.",
        ),
    ] = None,
    store: StoreOpt = None,
    interval: Annotated[
        float, typer.Option("--interval", help="Seconds between samples (0.1 to 3600).")
    ] = 1.0,
    job_id: Annotated[
        str | None,
        typer.Option(
            "--job-id",
            help="A multi-node job's id: every node run with the same id records into one "
            f"trial (else ${ENV_JOB_ID}, torchrun's --rdzv-id, Slurm's job and step).",
        ),
    ] = None,
    node_rank: Annotated[
        int | None,
        typer.Option(
            "--node-rank",
            min=0,
            help="This node's rank in a multi-node job; node 0 records the trial's end "
            "(else torchrun's --node-rank or accelerate's --machine_rank, $SLURM_NODEID, "
            "$NODE_RANK, $GROUP_RANK).",
        ),
    ] = None,
) -> None:
    """Run CMD as a trial: sample its process tree, record its end state.

    Example: tunescope run --run sweep --param lr=3e-4 -- python train.py --run 7
    tunescope's options go before CMD; everything from CMD's first word on (here
    --run 7 too) is CMD's, with or without --. CMD's exit code is passed through (128+N
    when killed by signal N). Run on every node of a multi-node job, the nodes record one
    trial (see --job-id); node rank 0 records its end."""
    from tunescope.cli._run import run_command

    if cmd and cmd[0].startswith("-"):  # an unknown option before the command, not a command
        raise ConfigError(f"no such option: {cmd[0]} (tunescope's options go before the command)")
    code = run_command(
        cmd or [],
        run=run_name,
        trial=trial,
        params=param or [],
        store=store,
        interval=interval,
        job_id=job_id,
        node_rank=node_rank,
    )
    raise typer.Exit(code)


@app.command(cls=Command)
def load(
    url: Annotated[
        str,
        typer.Argument(
            metavar="URL",
            help="The server's base URL (http://HOST:PORT, or with /v1); requests go to "
            "its /v1/completions or /v1/chat/completions only.",
            show_default=False,
        ),
    ],
    concurrency: Annotated[
        str | None,
        typer.Option(
            "--concurrency",
            metavar="N,N,...",
            help="Closed-loop levels: N requests open at once (default 1).",
            callback=check.not_empty,
        ),
    ] = None,
    rate: Annotated[
        str | None,
        typer.Option(
            "--rate",
            metavar="R,R,...",
            help="Open-loop levels: R requests/s arriving as a Poisson process.",
            callback=check.not_empty,
        ),
    ] = None,
    burstiness: Annotated[
        float | None,
        typer.Option(
            "--burstiness",
            help="Gamma shape of the arrival gaps with --rate (1 = Poisson, below 1 burstier).",
        ),
    ] = None,
    requests: Annotated[
        int | None,
        typer.Option("--requests", metavar="N", help="Requests per level (default 50)."),
    ] = None,
    seconds: Annotated[
        float | None,
        typer.Option("--seconds", metavar="S", help="Start no request after S seconds of a level."),
    ] = None,
    prompt_tokens: Annotated[
        str,
        typer.Option(
            "--prompt-tokens",
            metavar="SPEC",
            help="Synthetic prompt length in words (about a token each): 128, 64-256 or "
            "normal:MEAN,SD.",
        ),
    ] = "128",
    output_tokens: Annotated[
        str,
        typer.Option(
            "--output-tokens",
            metavar="SPEC",
            help="max_tokens per request: 128, 64-256 or normal:MEAN,SD.",
        ),
    ] = "128",
    prompts: Annotated[
        str | None,
        typer.Option(
            "--prompts",
            metavar="FILE",
            help="JSON Lines of {prompt|messages, output_tokens?} used in turn instead of "
            "synthetic prompts.",
            callback=check.not_empty,
        ),
    ] = None,
    api: Annotated[
        str, typer.Option("--api", help="completions (/v1/completions) or chat.")
    ] = "completions",
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="Model name to ask for (default the server's first).",
            callback=check.not_empty,
        ),
    ] = None,
    slo: Annotated[
        str | None,
        typer.Option(
            "--slo",
            metavar="KEY=DUR,...",
            help="Latency targets for goodput: ttft=500ms,tpot=50ms,e2el=10s.",
            callback=check.not_empty,
        ),
    ] = None,
    engine_metrics: Annotated[
        str | None,
        typer.Option(
            "--engine-metrics",
            metavar="URL",
            help="The engine's Prometheus page, scraped at 1 Hz (default the server's "
            "/metrics; none: no scraping).",
            callback=check.not_empty,
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option("--timeout", metavar="S", help="Per-request timeout in seconds."),
    ] = 300.0,
    ignore_eos: Annotated[
        bool,
        typer.Option(
            "--ignore-eos", help="Ask the engine to generate max_tokens (ignore_eos: true)."
        ),
    ] = False,
    seed: Annotated[
        int, typer.Option("--seed", help="Seed of synthetic prompts, lengths and arrivals.")
    ] = 0,
    run_name: Annotated[
        str | None,
        typer.Option(
            "--run",
            help="Run to add the levels to (created if new); default load-DATE.",
            callback=check.not_empty,
        ),
    ] = None,
    store: StoreOpt = None,
    server_cmd: Annotated[
        str | None,
        typer.Option(
            "--server-cmd",
            metavar="CMD",
            help="Start the engine with this command under tunescope run (its own trial "
            "of the run), wait until it serves, stop it after the sweep.",
            callback=check.not_empty,
        ),
    ] = None,
    server_wait: Annotated[
        float,
        typer.Option(
            "--server-wait", metavar="S", help="How long to wait for --server-cmd to serve."
        ),
    ] = 600.0,
) -> None:
    """Sweep load levels against an OpenAI-compatible server: each level a trial.

    Example: tunescope load http://127.0.0.1:8000 --concurrency 1,2,4,8 --requests 100
    --slo ttft=500ms,tpot=50ms. Per request: TTFT, TPOT, inter-token latencies, end-to-end
    latency, tokens from the server's usage. The engine's metrics are scraped at 1 Hz. Exit
    code 1 when a level failed (the sweep stops there; what ran is kept)."""
    from tunescope.cli._load import load_command

    code = load_command(
        url,
        concurrency=concurrency,
        rate=rate,
        burstiness=burstiness,
        requests=requests,
        seconds=seconds,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        prompts=prompts,
        api=api,
        model=model,
        slo=slo,
        engine_metrics=engine_metrics,
        timeout=timeout,
        ignore_eos=ignore_eos,
        seed=seed,
        run=run_name,
        store=store,
        server_cmd=server_cmd,
        server_wait=server_wait,
    )
    raise typer.Exit(code)


@app.command(name="import", cls=Command)
def import_(
    tool: Annotated[
        str,
        typer.Argument(
            metavar="TOOL", help="The tool that wrote the files: vllm-bench, guidellm or aiperf."
        ),
    ],
    files: Annotated[
        list[str],
        typer.Argument(
            metavar="FILE...",
            help="Result files: vllm bench serve --save-result JSON, guidellm's "
            "benchmarks.json, AIPerf's profile_export_aiperf.json.",
        ),
    ],
    run_name: Annotated[
        str | None,
        typer.Option(
            "--run",
            help="Run to add the levels to (created if new); default TOOL-DATE.",
            callback=check.not_empty,
        ),
    ] = None,
    store: StoreOpt = None,
) -> None:
    """Import other load testers' results as load levels: each benchmark a trial.

    Example: tunescope import guidellm benchmarks.json --run llama-h100. Each level's
    percentiles, throughput and goodput become scalars (load.ttft_p99_s, ...); guidellm's
    per-request stats become request events. Every file is read before anything is written."""

    from tunescope.serving import TOOLS, import_levels, read_levels
    from tunescope.store import absolute_url, os_user, project_of

    if tool not in TOOLS:
        raise ConfigError(f"unknown tool {tool!r}: use {', '.join(TOOLS)}")
    levels = [lv for f in files for lv in read_levels(tool, f)]
    url = absolute_url(store)
    run = run_name or default_run_name(tool)
    names = import_levels(levels, run, url, project_of(url), os_user())
    typer.echo(f"run {run!r}: imported {len(names)} level(s): {', '.join(names)}")


FormatOpt = Annotated[
    str,
    typer.Option(
        "--format",
        help="table (for people), json (a list of objects) or csv (a header, then a line "
        "each); json and csv keys and units are listed in the README.",
    ),
]

RUN_KEYS = (
    "id",
    "run",
    "state",
    "trials",
    "start",
    "end",
    "duration_s",
    "ram_peak_bytes",
    "vram_peak_bytes",
)
RUN_COLUMNS = (
    fmt.Column("run", lambda r: str(r["run"])),
    fmt.Column("state", lambda r: str(r["state"])),
    fmt.Column("trials", lambda r: str(r["trials"])),
    fmt.Column("start", lambda r: fmt.when(r["start"])),
    fmt.Column("duration", lambda r: fmt.duration(r["duration_s"])),
    fmt.Column("peak RAM", lambda r: fmt.value("cpu.mem", r["ram_peak_bytes"])),
    fmt.Column("peak VRAM", lambda r: fmt.value("gpu.mem", r["vram_peak_bytes"])),
)


def _runs_rows(st: Store) -> list[dict[str, Any]]:
    rows = []
    for r in st.list_runs():
        peaks: dict[str, float] = {}
        for t in st.list_trials(r.id):
            summ = summarize_trial(st, t)
            for k, m in summ.metrics.items():
                peaks[k] = max(peaks.get(k, -math.inf), m.peak)
        rows.append(
            {
                "id": r.id,
                "run": r.name,
                "state": r.state,
                "trials": r.trials,
                "start": r.start,
                "end": r.end,
                "duration_s": None if r.end is None else r.end - r.start,
                "ram_peak_bytes": peaks.get("cpu.mem"),
                "vram_peak_bytes": peaks.get("gpu.mem"),
            }
        )
    return rows


@app.command(cls=Command)
def runs(store: StoreOpt = None, out_format: FormatOpt = "table") -> None:
    """List runs: state, trials, start, duration and peak memory."""
    fmt.row_format(out_format)
    with open_store(store, create=False) as st:
        rows = _runs_rows(st)
    if not rows and out_format == "table":
        typer.echo("no runs yet")
    else:
        typer.echo(fmt.render_rows(RUN_KEYS, rows, RUN_COLUMNS, out_format))
    note = spool_note(store)
    if note is not None:
        typer.echo(note, err=True)


@app.command(cls=Command)
def sync(
    store: StoreOpt = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Give up after this many seconds.")
    ] = 300.0,
) -> None:
    """Write what the spool holds for a store (data kept while the store was unreachable).

    Samplers do this by themselves once the store is back; run it for what is left. Exit
    code 0 when nothing is left, 1 when some still waits (the store is unreachable or
    refuses the token, or a process still writing owns it) or frames were damaged (their
    bytes are kept in the spool's rejected/ folder, the rest is written)."""
    if not (math.isfinite(timeout) and timeout > 0):
        raise ConfigError(f"--timeout {timeout:g} must be a positive number of seconds")
    code, lines = sync_spool(check_url(absolute_url(store)), timeout)
    for line in lines:
        typer.echo(line)
    raise typer.Exit(code)


@app.command(cls=Command)
def migrate(
    from_url: Annotated[
        str,
        typer.Option(
            "--from",
            metavar="URL",
            help="The store to copy (read only; never changed).",
            callback=check.not_empty,
            show_default=False,
        ),
    ],
    to_url: Annotated[
        str,
        typer.Option(
            "--to",
            metavar="URL",
            help="The store to copy into (created if missing): empty, or one an earlier "
            "migrate of the same source wrote.",
            callback=check.not_empty,
            show_default=False,
        ),
    ],
    batch_size: Annotated[
        int,
        typer.Option(
            "--batch-size",
            metavar="N",
            min=1,
            help="Samples (or events, or scalars) per batch written; memory use follows it.",
        ),
    ] = 100_000,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Write nothing: check the target, list what would go."),
    ] = False,
) -> None:
    """Copy a whole store into another: SQLite, PostgreSQL, ClickHouse, either way.

    Example: tunescope migrate --from tunescope.db --to chdb:/data/ts. Projects, runs,
    trials (details, states, ends), series, every sample, event and scalar; where compact
    --keep-raw dropped raw samples, the minute rollups that stand for them and the findings
    kept before. Resumable: run it again after it stopped part way and it finishes the copy,
    duplicating nothing. Ends with each trial's counts on both sides: exit code 0 when all
    agree, 1 when some differ (listed), 2 for bad input (the same store twice, a tunescope
    server's URL, a source that cannot be read, a target holding other data under a run's
    name). Access tokens go by their digests; kept usage figures are computed again on the
    target. See docs/scale.md#moving-a-store."""
    from tunescope.cli._migrate import migrate as copy_store

    raise typer.Exit(
        copy_store(from_url, to_url, batch=batch_size, dry_run=dry_run, say=typer.echo)
    )


_HEADLINE = (  # (metric, label, field prefix, unit suffix) of the trials' peak/mean pairs
    ("cpu.util", "CPU", "cpu_util", "pct"),
    ("cpu.mem", "RAM", "ram", "bytes"),
    ("gpu.util", "GPU", "gpu_util", "pct"),
    ("gpu.mem", "VRAM", "vram", "bytes"),
)
TRIAL_KEYS = (
    "run",
    "id",
    "trial",
    "state",
    "start",
    "end",
    "duration_s",
    *(f"{p}_{w}_{u}" for _, _, p, u in _HEADLINE for w in ("peak", "mean")),
    "optimizer_steps",
    "evaluations",
    "checkpoints",
    "data_wait_pct",
    "objective",
    "direction",
    "params",
)


def _peak_mean(key: str, prefix: str, unit: str) -> Callable[[Mapping[str, Any]], str]:
    def cell(r: Mapping[str, Any]) -> str:
        peak, mean = r[f"{prefix}_peak_{unit}"], r[f"{prefix}_mean_{unit}"]
        if peak is None and mean is None:
            return "-"
        return f"{fmt.value(key, peak)} / {fmt.value(key, mean)}"

    return cell


def _objective_cell(r: Mapping[str, Any]) -> str:
    return Objective(tuple(r["objective"]), tuple(r["direction"])).text()


TRIAL_COLUMNS = (
    fmt.Column("trial", lambda r: str(r["trial"])),
    fmt.Column("state", lambda r: str(r["state"])),
    fmt.Column("duration", lambda r: fmt.duration(r["duration_s"])),
    *(
        fmt.Column(f"{label} peak/mean", _peak_mean(key, prefix, unit))
        for key, label, prefix, unit in _HEADLINE
    ),
    fmt.Column("steps", lambda r: str(r["optimizer_steps"])),
    fmt.Column("evals", lambda r: str(r["evaluations"])),
    fmt.Column("ckpts", lambda r: str(r["checkpoints"])),
    fmt.Column("data wait", lambda r: fmt.value("train.data_wait", r["data_wait_pct"])),
    fmt.Column("objective", _objective_cell),
    fmt.Column("params", lambda r: ", ".join(f"{k}={v}" for k, v in r["params"].items()) or "-"),
)


def _trials_rows(st: Store, run_ref: str) -> list[dict[str, Any]]:
    r = st.get_run(as_run(run_ref))
    rows = []
    for t in st.list_trials(r.id):
        s = summarize_trial(st, t)
        obj = trial_objective(st, t)
        row: dict[str, Any] = {
            "run": r.name,
            "id": t.id,
            "trial": t.name,
            "state": t.state,
            "start": t.start,
            "end": t.end,
            "duration_s": s.duration,
        }
        for key, _, prefix, unit in _HEADLINE:
            m = s.metrics.get(key)
            row[f"{prefix}_peak_{unit}"] = None if m is None else m.peak
            row[f"{prefix}_mean_{unit}"] = None if m is None else m.mean
        row |= {
            "optimizer_steps": s.optimizer_steps,
            "evaluations": s.evaluations,
            "checkpoints": s.checkpoints,
            "data_wait_pct": data_wait_share(st, t),
            "objective": list(obj.values),
            "direction": list(obj.directions),
            "params": t.params,
        }
        rows.append(row)
    return rows


def trials_table(st: Store, run_ref: str) -> str:
    """The per-trial table of `tunescope trials` and the demo."""
    return fmt.render_rows(TRIAL_KEYS, _trials_rows(st, run_ref), TRIAL_COLUMNS, "table")


@app.command(cls=Command)
def trials(
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run name or id.")],
    store: StoreOpt = None,
    out_format: FormatOpt = "table",
) -> None:
    """List a run's trials with states, durations, peaks and objective values.

    Columns: state, duration, peak/mean of the four headline metrics, optimizer steps,
    evaluations, checkpoints, data-wait share, the objective value(s) with the search's
    direction (Optuna: eval/objective and the optuna.direction param) and params."""
    fmt.row_format(out_format)
    with open_store(store, create=False) as st:
        rows = _trials_rows(st, run_ref)
    typer.echo(fmt.render_rows(TRIAL_KEYS, rows, TRIAL_COLUMNS, out_format))


@app.command(cls=Command)
def export(
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run name or id.")],
    trial: Annotated[str | None, typer.Option("--trial", help="Only this trial.")] = None,
    metric_key: Annotated[
        str | None, typer.Option("--metric", help="Only this metric key (see docs/metrics.md).")
    ] = None,
    what: Annotated[
        str, typer.Option("--what", help="samples or events (csv); json carries both.")
    ] = "samples",
    out_format: Annotated[str, typer.Option("--format", help="csv or json.")] = "csv",
    out: Annotated[
        str | None,
        typer.Option(
            "--out",
            help="Write to this file instead of stdout (- is stdout).",
            callback=check.out_path,
        ),
    ] = None,
    store: StoreOpt = None,
) -> None:
    """Export a run's raw samples or events as CSV or JSON.

    Samples: run,trial,metric,host,device,t,elapsed_s,value (host: the node that measured
    it; value in the metric's base unit).
    Events: run,trial,kind,name,step,t,elapsed_s,duration_s. Samples the store cannot
    decode (a damaged database) are left out, with a warning per series on stderr; so are
    raw samples `tunescope compact` dropped (their rollups remain, docs/retention.md)."""
    if out_format not in ("csv", "json"):
        raise ConfigError(f"unknown --format {out_format!r}: use csv or json")
    if what not in ("samples", "events"):
        raise ConfigError(f"unknown --what {what!r}: use samples or events")
    if metric_key is not None:
        try:
            metric(metric_key)
        except KeyError as exc:
            raise ConfigError(str(exc.args[0])) from None
    dest = check.out_dest(out, store)
    with open_store(store, create=False) as st:
        got = export_rows(
            st,
            as_run(run_ref),
            trial=trial,
            metrics=metric_key,
            samples=out_format == "json" or what == "samples",
            events=out_format == "json" or what == "events",
        )
        warnings = fmt.damage_warnings(st) + fmt.dropped_warnings(got.dropped)
    samples, events = got.samples, got.events
    s_head, e_head = SAMPLE_COLUMNS, EVENT_COLUMNS
    try:
        sink = sys.stdout if dest is None else dest.open("w", newline="", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {out}: {exc.strerror or exc}") from None
    try:
        if out_format == "json":
            json.dump(
                {
                    "samples": [dict(zip(s_head, r, strict=True)) for r in samples],
                    "events": [dict(zip(e_head, r, strict=True)) for r in events],
                },
                sink,
            )
            sink.write("\n")
        else:
            w = csv.writer(sink, lineterminator="\n")
            head, rows = (s_head, samples) if what == "samples" else (e_head, events)
            w.writerow(head)
            w.writerows(["" if c is None else c for c in r] for r in rows)
    finally:
        if dest is not None:
            sink.close()
    for line in warnings:
        typer.echo(line, err=True)


app.command(cls=Command)(report)
app.command(cls=Command)(usage)
app.add_typer(tokens)


KeepRawOpt = Annotated[
    str,
    typer.Option(
        "--keep-raw",
        metavar="DURATION",
        help="Keep raw samples this long (30d, 12h, 2w: a number and s, m, h, d or w); "
        "older ones are dropped once their minute and hour rollups hold them.",
        callback=check.duration,
    ),
]


@app.command(cls=Command)
def compact(
    keep_raw: KeepRawOpt,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Change nothing: say what would be dropped.")
    ] = False,
    store: StoreOpt = None,
) -> None:
    """Drop raw samples older than --keep-raw, keeping their rollups: a store bounded for years.

    Windows, charts, a trial's latest values and usage read the minute and hour rollups
    (count, min, max, sum) where the raw samples are gone; a finished trial's findings are
    computed before its raw samples go and kept. Series written before rollups existed are
    rolled up first. Then every ended trial's usage figures are computed and kept where none
    are (docs/usage.md#kept-figures), so the first `tunescope usage` reads them back. Safe
    while others write (one series at a time). See docs/retention.md."""
    from tunescope.analyze import compact_raw, load_settings
    from tunescope.cli._tokens import admin_store

    settings = None if dry_run else load_settings().settings
    with admin_store(store, who="compact works (or serve --keep-raw)") as st:
        done = compact_raw(st, check.duration_s(keep_raw), dry_run=dry_run, settings=settings)
    typer.echo(fmt.retention_line(done.raw))
    if done.usage is not None:
        typer.echo(fmt.usage_kept_line(done.usage))


@app.command(cls=Command)
def metrics() -> None:
    """List the metric catalog: key, label, unit and source."""
    typer.echo(
        fmt.table(
            ["key", "label", "unit", "source", "per"],
            [[m.key, m.label, m.unit, m.source, m.scope] for m in CATALOG],
        )
    )


@app.command(cls=Command)
def demo(
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            help="Where the demo's run goes; default ./tunescope.db.",
            callback=check.not_empty,
        ),
    ] = None,
    serve: Annotated[
        bool,
        typer.Option("--serve/--no-serve", help="Serve the page on the demo's run when it ends."),
    ] = True,
    seconds: Annotated[
        float, typer.Option("--seconds", help="Training time per trial, in seconds (at most 3600).")
    ] = 35.0,
    port: Annotated[
        int, typer.Option("--port", help="Port for the page.", callback=check.port)
    ] = 8765,
) -> None:
    """LoRA-fine-tune MiniLM in a 3-trial Optuna sweep on the CPU, recorded, and show it.

    Hugging Face Trainer + PEFT, offline. One trial is input-bound by design, one is pruned.
    Prints the per-trial table, then serves the page."""
    from tunescope.cli._demo import require, run_demo

    if not (math.isfinite(seconds) and 0 < seconds <= 3600):
        raise ConfigError(f"--seconds {seconds:g} is out of range: use more than 0, at most 3600")
    require()  # refuse before writing anything when what the demo needs is missing
    with open_store(absolute_url(store)):
        pass  # refuse a bad store before training (a new one is created: the demo fills it)
    url, run_name = run_demo(store, seconds_per_trial=seconds)
    with open_store(url) as st:
        typer.echo("")
        typer.echo(trials_table(st, run_name))
    shown_url, shown_run = fmt.printable(url), fmt.printable(run_name)
    typer.echo(f"\nData: {shown_url}  (run {shown_run})")
    typer.echo(f"Export: tunescope export {shown_run} --store {shown_url}")
    if serve:
        _serve(url, "127.0.0.1", port, run_name)


def _serve(
    url: str,
    host: str,
    port: int,
    run_name: str | None = None,
    allow_hosts: Sequence[str] = (),
    *,
    auth: Literal["local", "tokens"] = "local",
    tls: tuple[Path, Path] | None = None,
    otlp_endpoint: str | None = None,
    trusted_proxies: Sequence[str] = (),
    bounds: dict[str, Any] | None = None,
) -> None:
    try:
        from tunescope.analyze import load_settings
        from tunescope.server import page_host
        from tunescope.server import serve as serve_app
    except ImportError as exc:
        raise ConfigError(
            f"the page needs the server extra: pip install 'tunescope[server]' ({exc})"
        ) from None
    load_settings()  # bad finding settings refuse the server before it listens (exit 2)
    _can_listen(host, port)
    base = f"{'http' if tls is None else 'https'}://{page_host(host)}:{port}"
    link = f"{base}/" if run_name is None else page_link(base, run_name)
    typer.echo(f"Open {link}  (Ctrl-C to stop)")
    serve_app(
        url,
        host=host,
        port=port,
        allowed_hosts=allow_hosts,
        auth=auth,
        tls_cert=None if tls is None else tls[0],
        tls_key=None if tls is None else tls[1],
        otlp_endpoint=otlp_endpoint,
        trusted_proxies=trusted_proxies,
        **(bounds or {}),
    )


def _can_listen(host: str, port: int) -> None:
    """ConfigError, on one line, when the page could not listen on host:port (a port in use,
    a host name that names no interface here): said before the server starts, not in its
    log."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise ConfigError(
            f"--host {host!r} names no address here ({exc.strerror or exc})"
        ) from None
    family, kind, proto, _name, addr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


HostOpt = Annotated[str, typer.Option("--host", help="Interface to bind.", callback=check.host)]
PortOpt = Annotated[int, typer.Option("--port", help="Port to listen on.", callback=check.port)]
OtlpOpt = Annotated[
    str | None,
    typer.Option(
        "--otlp-endpoint",
        metavar="URL",
        envvar="OTEL_EXPORTER_OTLP_ENDPOINT",
        help="Also push the running trials' metrics to this OpenTelemetry collector "
        "(its OTLP/HTTP base URL; the otel extra). See docs/prometheus.md.",
        callback=check.http_url,
    ),
]
AllowHostOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-host",
        metavar="NAME",
        help="Also answer requests for this host name (repeatable); needed with --host "
        "0.0.0.0 or ::, which name no host. '*' answers any name: only behind a reverse "
        "proxy that checks Host itself.",
        show_default=False,
        callback=check.allowed_hosts,
    ),
]


TrustedProxyOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--trusted-proxy",
        metavar="ADDR",
        help="Believe X-Forwarded-For and X-Forwarded-Proto from this reverse proxy's address "
        "or network (repeatable; none by default: the client is the socket's peer).",
        show_default=False,
        callback=check.trusted_proxies,
    ),
]


@app.command(cls=Command)
def ui(
    store: StoreOpt = None,
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8765,
    allow_host: AllowHostOpt = None,
    otlp_endpoint: OtlpOpt = None,
) -> None:
    """Serve the web page and JSON API for a store (binds 127.0.0.1 unless told).

    Requests are answered only when their Host is localhost, 127.0.0.1, [::1], the --host
    address or an --allow-host name (a guard against DNS rebinding)."""
    from tunescope.store import resolve_url

    with open_store(store, create=False):
        pass  # refuse a bad store before binding a port
    _serve(
        resolve_url(store), host, port, allow_hosts=allow_host or [], otlp_endpoint=otlp_endpoint
    )


@app.command(cls=Command)
def serve(
    store: StoreOpt = None,
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8765,
    allow_host: AllowHostOpt = None,
    tls_cert: Annotated[
        str | None,
        typer.Option(
            "--tls-cert",
            metavar="FILE",
            help="Answer https with this PEM certificate (chain); needs --tls-key.",
            callback=check.not_empty,
        ),
    ] = None,
    tls_key: Annotated[
        str | None,
        typer.Option(
            "--tls-key",
            metavar="FILE",
            help="The certificate's PEM private key (not encrypted); needs --tls-cert.",
            callback=check.not_empty,
        ),
    ] = None,
    otlp_endpoint: OtlpOpt = None,
    trusted_proxy: TrustedProxyOpt = None,
    max_series: Annotated[
        int,
        typer.Option(
            "--max-series",
            metavar="N",
            envvar=ENV_MAX_SERIES,
            min=1,
            help="Most series (metrics x devices x hosts) one trial may have; a batch "
            "past it is refused (422).",
        ),
    ] = 4096,
    read_timeout: Annotated[
        float,
        typer.Option(
            "--read-timeout",
            metavar="SECONDS",
            min=0.1,
            help="Close a connection that sends no whole request head within this time, "
            "and refuse a body that stalls this long (408).",
        ),
    ] = 10.0,
    max_connections: Annotated[
        int,
        typer.Option(
            "--max-connections",
            metavar="N",
            min=1,
            help="Most connections and requests at once (503 beyond); the open-files "
            "limit is raised to the hard limit at start.",
        ),
    ] = 1024,
    keep_raw: Annotated[
        str | None,
        typer.Option(
            "--keep-raw",
            metavar="DURATION",
            envvar=ENV_KEEP_RAW,
            help="Run `tunescope compact --keep-raw DURATION` daily (first a minute after "
            "start): raw samples older than this are dropped once rolled up, and ended "
            "trials' usage figures kept. Default: keep all.",
            callback=check.duration,
        ),
    ] = None,
) -> None:
    """Serve a team: the page, the JSON API and recording, every request with a token.

    A token (tunescope token create) sees and records one project only. The store is the
    team's PostgreSQL database (a SQLite file works on one host); it must exist already.
    See docs/team.md for a systemd unit, TLS and a reverse proxy."""
    from tunescope.cli._tokens import admin_store
    from tunescope.store import resolve_url

    tls = check.tls_files(tls_cert, tls_key)
    with admin_store(store) as st:  # refuse a bad store (or a server's URL) before binding
        url = st.url
    if url.startswith("sqlite:"):
        typer.echo(
            "note: a SQLite file serves the processes of this host only; a team's store is "
            "PostgreSQL (docs/team.md)",
            err=True,
        )
    _serve(
        resolve_url(store),
        host,
        port,
        allow_hosts=allow_host or [],
        auth="tokens",
        tls=tls,
        otlp_endpoint=otlp_endpoint,
        trusted_proxies=trusted_proxy or [],
        bounds={
            "max_series": max_series,
            "read_timeout": read_timeout,
            "max_connections": max_connections,
            "keep_raw": None if keep_raw is None else check.duration_s(keep_raw),
        },
    )


app.command(cls=Command)(completion)


def _print_version(value: bool) -> None:
    if value:
        from tunescope import __version__

        typer.echo(f"tunescope {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print tunescope's version and exit.",
            is_eager=True,
            callback=_print_version,
        ),
    ] = False,
) -> None:
    pass  # the app's own options; each acts in its callback
