"""`tunescope report RUN`: a run's findings and per-trial peaks, means and objective values, as
text, JSON, Markdown or HTML, and with ``--fail-on`` a gate for CI. Register with
``app.command()(report)``."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from tunescope.cli import _input as check
from tunescope.cli._format import damage_warnings
from tunescope.cli._input import StoreOpt, as_run
from tunescope.errors import ConfigError

__all__ = ["report"]


def report(
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run name or id.")],
    trial: Annotated[str | None, typer.Option("--trial", help="Only this trial (by name).")] = None,
    out_format: Annotated[
        str,
        typer.Option(
            "--format",
            help="text, json, md (Markdown with PNG charts written next to --out) or "
            "html (one file, charts embedded; on stdout without --out).",
        ),
    ] = "text",
    out: Annotated[
        str | None,
        typer.Option(
            "--out",
            help="Write to this file instead of stdout (- is stdout); md needs a file.",
            show_default=False,
            callback=check.out_path,
        ),
    ] = None,
    price: Annotated[
        list[str] | None,
        typer.Option(
            "--price",
            help="Hourly price of a GPU of the right-size catalog, KEY=USD (e.g. "
            "h100-80gb=2.49); repeatable.",
            show_default=False,
        ),
    ] = None,
    fail_on: Annotated[
        str | None,
        typer.Option(
            "--fail-on",
            metavar="SEVERITY",
            help="Exit 1 (a CI gate) when a finding of this severity or worse exists: "
            "low, moderate or high. The report is written all the same.",
            show_default=False,
        ),
    ] = None,
    workload: Annotated[
        str | None,
        typer.Option(
            "--workload",
            help="Size a load run for this traffic: KEY=VALUE pairs, e.g. "
            '"context=4096,output=256,concurrency=64,ttft=500ms,tpot=50ms,memory=80GiB,'
            'power=700W" (rate= instead of concurrency=; docs/serving_analysis.md).',
            show_default=False,
        ),
    ] = None,
    store: StoreOpt = None,
) -> None:
    """Report a run's findings with per-trial peaks, means and objective values.

    Findings: input-bound, near out-of-memory, GPU under-used, busy but not working,
    CPU-bound, idle GPUs, memory growth, evaluation spikes and right-sizing (see
    docs/findings.md). md and html carry a chart of the four headline metrics per trial,
    ready to paste into a pull request. Stored samples the store cannot decode (a damaged
    database) are skipped, with a warning per series on stderr. Thresholds come from
    [tool.tunescope.findings] in pyproject.toml, [findings] in tunescope.toml and
    TUNESCOPE_<SETTING> variables (docs/findings.md#settings). A load run's report lists
    its levels (latency percentiles, throughput, goodput); --workload adds replicas, memory,
    GPU and cost for a traffic, each figure measured or extrapolated. Exit code: 0, or 1 with
    --fail-on when a finding at or above that severity exists (said on stderr)."""
    from tunescope.analyze import (
        REPORT_FORMATS,
        SEVERITIES,
        build_report,
        gpu_catalog,
        load_settings,
        parse_prices,
        parse_workload,
        render_report,
        require_charts,
    )
    from tunescope.store import open_store

    if out_format not in REPORT_FORMATS:
        raise ConfigError(f"unknown --format {out_format!r}: use {', '.join(REPORT_FORMATS)}")
    if fail_on is not None and fail_on not in SEVERITIES:
        raise ConfigError(f"unknown --fail-on {fail_on!r}: use {', '.join(reversed(SEVERITIES))}")
    dest = check.out_dest(out, store)
    if out_format == "md" and dest is None:  # its PNG charts are files: they need a folder
        raise ConfigError("--format md needs --out PATH, a file: its charts are written next to it")
    wanted = None if workload is None else parse_workload(workload)
    catalog = gpu_catalog(parse_prices(price or []))
    settings = load_settings()  # pyproject.toml, tunescope.toml, $TUNESCOPE_<SETTING>
    charts = out_format in ("md", "html")
    if charts:
        require_charts()  # refuse before reading anything when matplotlib is missing
    with open_store(store, create=False) as st:  # read-only would leave -wal/-shm files behind
        rep = build_report(
            st,
            as_run(run_ref),
            trial=trial,
            settings=settings,
            catalog=catalog,
            charts=charts,
            workload=wanted,
        )
        warnings = damage_warnings(st)
    stem = dest.stem if dest is not None else "report"
    text, files = render_report(rep, out_format, image_stem=stem)
    if dest is None:
        sys.stdout.write(text)
    else:
        try:
            for name, data in files.items():
                (dest.parent / name).write_bytes(data)
            dest.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot write {out}: {exc.strerror or exc}") from None
        extra = f" and {len(files)} chart(s) beside it" if files else ""
        typer.echo(f"wrote {out}{extra}", err=True)
    _warn(warnings)
    if fail_on is not None:
        worst = SEVERITIES.index(fail_on)  # SEVERITIES runs from the most urgent
        hits = [f for t in rep.trials for f in t.findings if SEVERITIES.index(f.severity) <= worst]
        if hits:
            typer.echo(
                f"tunescope: {len(hits)} finding(s) at severity {fail_on} or above "
                "(--fail-on): exit 1",
                err=True,
            )
            raise typer.Exit(1)


def _warn(lines: list[str]) -> None:
    for line in lines:
        typer.echo(line, err=True)
