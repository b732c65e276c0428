"""`tunescope usage`: GPU-hours held and busy, idle GPU-hours, memory share, CPU core-hours,
failed and pruned shares and cost of a project's trials, grouped (``analyze`` computes them,
see ``analyze/_usage.py``). Register with ``app.command(cls=Command)(usage)``."""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from typing import Annotated, Any

import typer

from tunescope.cli import _format as fmt
from tunescope.cli._input import StoreOpt, duration_s
from tunescope.errors import ConfigError

__all__ = ["moment", "usage"]


def moment(text: str, option: str, now: float) -> float:
    """``--since``/``--until``: a time before now (``30d``, ``12h``, ``2w``, ``90m``,
    ``45s``) or a date (``2026-01-31``, UTC midnight) or ISO date and time (UTC unless it
    names its offset). ConfigError (one line, exit 2) otherwise."""
    s = text.strip()
    ago = duration_s(s)
    if ago > 0:
        return now - ago
    try:
        when = dt.datetime.fromisoformat(s)
    except ValueError:
        raise ConfigError(
            f"bad {option} {text!r}: use a duration before now (30d, 12h, 2w) or a date "
            "(2026-01-31, 2026-01-31T12:00)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v:.1f}%"


def _hours(key: str) -> fmt.Column:
    return fmt.Column(key, lambda r: fmt.duration(r[_SECONDS[key]]))


_SECONDS = {
    "GPU-h held": "gpu_held_s",
    "GPU-h busy": "gpu_busy_s",
    "GPU-h idle": "gpu_idle_s",
    "CPU core-h": "cpu_core_s",
    "quota core-h": "cpu_quota_core_s",
}


def _key(name: str) -> fmt.Column:
    return fmt.Column(name, lambda r: "-" if r[name] is None else str(r[name]))


def _columns(by: list[str]) -> list[fmt.Column]:
    keys = [_key(b) for b in by]
    return [
        *keys,
        *(_hours(k) for k in ("GPU-h held", "GPU-h busy", "GPU-h idle")),
        fmt.Column("busy by", lambda r: r["busy_by"] or "-"),
        fmt.Column("mem peak", lambda r: _pct(r["mem_peak_pct"])),
        fmt.Column("mem mean", lambda r: _pct(r["mem_mean_pct"])),
        *(_hours(k) for k in ("CPU core-h", "quota core-h")),
        fmt.Column("trials", lambda r: str(r["trials"])),
        fmt.Column("failed+pruned", lambda r: _pct(r["failed_pruned_pct"])),
        fmt.Column("cost", lambda r: "-" if r["cost_usd"] is None else f"${r['cost_usd']:.2f}"),
    ]


def usage(
    since: Annotated[
        str,
        typer.Option(
            "--since",
            help="Start of the window: a duration before now (30d, 12h, 2w) or a UTC date "
            "or ISO date-time.",
        ),
    ] = "30d",
    until: Annotated[
        str | None,
        typer.Option(
            "--until", help="End of the window, as --since (default: now).", show_default=False
        ),
    ] = None,
    by: Annotated[
        list[str] | None,
        typer.Option(
            "--by",
            help="Group by project, user, run, host, gpu_model, day or week (UTC); "
            "repeatable, default project.",
            show_default=False,
        ),
    ] = None,
    price: Annotated[
        list[str] | None,
        typer.Option(
            "--price",
            help="Hourly price of a GPU, MODEL=USD: the model name as recorded (see "
            "--by gpu_model) or a right-size catalog key (h100-80gb=2.49); repeatable.",
            show_default=False,
        ),
    ] = None,
    out_format: Annotated[
        str, typer.Option("--format", help="table (h:mm:ss for hours), json or csv (seconds).")
    ] = "table",
    store: StoreOpt = None,
) -> None:
    """GPU-hours held and busy, idle GPU-hours, GPU memory share, CPU core-hours against the
    quota, failed and pruned trials' share and cost, per group.

    Busy is weighted by SM activity where GPM reports it, else by GPU utilization (the
    busy-by column says which); idle is held time in stretches at or under
    idle_gpu_util_pct busy lasting idle_stretch_min_s or more (docs/findings.md#settings).
    A local store answers for its project (default, or $TUNESCOPE_PROJECT); a team server
    for its token's. See docs/usage.md."""
    from tunescope.analyze import UsageRow, check_query, load_settings, parse_prices, usage_of
    from tunescope.store import open_store

    fmt.row_format(out_format)
    now = time.time()
    lo = moment(since, "--since", now)
    hi = now if until is None else moment(until, "--until", now)
    if not hi > lo:
        raise ConfigError(f"--until {until or 'now'} is not after --since {since}")
    groups = list(by or ["project"])
    prices = check_query(lo, hi, groups, parse_prices(price or []))
    settings = load_settings().settings  # pyproject.toml, tunescope.toml, $TUNESCOPE_*
    with open_store(store, create=False) as st:
        result = usage_of(st, lo, hi, groups, prices=prices, settings=settings, now=now)
        warnings = fmt.damage_warnings(st)
    rows = [r.to_dict() for r in result.rows]
    if not rows and out_format == "table":
        typer.echo("no trials in this window")
    else:
        # a row's json and csv keys: its grouping keys, then UsageRow's figures in order
        figures = [f.name for f in dataclasses.fields(UsageRow) if f.name != "keys"]
        keys = (*groups, *figures)
        typer.echo(fmt.render_rows(keys, rows, _columns(groups), out_format))
    for line in warnings:
        typer.echo(line, err=True)
