"""Trial charts for reports: what a chart shows (:class:`TrialChart`, read from the store by
:func:`trial_chart`) and its PNG (matplotlib, imported only to draw: ``pip install
'tunescope[report]'``).

One figure per trial: the four headline metrics in a 2 x 2 grid against the time elapsed
since the run began, one line per device, the band between bucket minima and maxima shaded
so that spikes stay visible. On charts whose catalog row has ``markers`` (as on the page):
optimizer steps as thin green lines (a green density strip at the bottom when there are too
many to draw) and evaluations shaded orange.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

from tunescope.analyze._summary import sampler_gaps, trial_end
from tunescope.errors import ConfigError
from tunescope.metrics import headline
from tunescope.store import Store, TrialInfo

__all__ = [
    "CHART_POINTS",
    "EVAL_COLOR",
    "STEP_COLOR",
    "ChartLine",
    "ChartPanel",
    "TrialChart",
    "require_charts",
    "trial_chart",
    "trial_png",
]

CHART_POINTS = 600
"""Buckets per series in a chart."""


@dataclass(frozen=True)
class ChartLine:
    """One series in a chart: ``t`` seconds since the run began, values in display units
    (bucket means, with ``lo``/``hi`` their minima and maxima)."""

    label: str
    t: list[float]
    v: list[float]
    lo: list[float]
    hi: list[float]


@dataclass(frozen=True)
class ChartPanel:
    key: str
    label: str
    unit: str
    max_value: float | None
    markers: bool
    lines: list[ChartLine]


@dataclass(frozen=True)
class TrialChart:
    """What one trial's chart shows; times in seconds since the run began. ``steps`` holds
    step times, or (t0, t1, count) bins when there are too many; ``evals`` (start, end);
    ``gaps`` (start, end) of the spans without hardware samples (a sampler restarted)."""

    panels: list[ChartPanel]
    steps: list[float]
    step_bins: list[tuple[float, float, int]]
    evals: list[tuple[float, float]]
    gaps: list[tuple[float, float]] = field(default_factory=list)


def trial_chart(store: Store, t: TrialInfo, origin: float) -> TrialChart:
    """The trial's chart, times counted from ``origin`` (the run's start)."""
    ext = [e for s in store.list_series(t.id) if (e := store.series_extent(s.id)) is not None]
    end = trial_end(t)
    lo = min([t.start, *(e[0] for e in ext)])
    hi = max([end if end is not None else t.start, *(e[1] for e in ext)])
    hi = max(hi, lo + 1.0)
    panels = []
    several = len({s.host for s in store.list_series(t.id)}) > 1  # a multi-node trial
    for m in headline():
        lines = []
        for s in store.list_series(t.id, m.key):
            w = store.window(s.id, lo, hi + 1e-3, CHART_POINTS)
            if w.t:
                label = _device_label(s.device)
                lines.append(
                    ChartLine(
                        f"{s.host} {label}" if several else label,
                        [x - origin for x in w.t],
                        [x * m.scale for x in w.mean],
                        [x * m.scale for x in w.min],
                        [x * m.scale for x in w.max],
                    )
                )
        panels.append(ChartPanel(m.key, m.label, m.unit, m.max_value, m.markers, lines))
    steps_w = store.events(t.id, lo, hi, kinds=["optimizer_step"], limit=400)
    evals = store.all_events(t.id, lo, hi, kinds=["evaluation"])
    return TrialChart(
        panels,
        [e.t - origin for e in steps_w.events or []],
        [(b.t0 - origin, b.t1 - origin, b.count) for b in steps_w.bins or [] if b.count],
        [(e.t - origin, e.t + (e.duration or 0.0) - origin) for e in evals],
        [(a - origin, a + d - origin) for a, d in sampler_gaps(store, t)],
    )


def _device_label(device: str | None) -> str:
    return "trial" if device is None else f"GPU {device}"


STEP_COLOR = "#1a9b50"
EVAL_COLOR = "#f08c00"
GAP_COLOR = "#8a8f98"
LINE_COLORS = (
    "#3366cc",
    "#dc3912",
    "#7b3fb5",
    "#0099c6",
    "#dd4477",
    "#66aa00",
    "#b82e2e",
    "#316395",
)


def _matplotlib() -> tuple[Any, Any, Any, Any]:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
    except ImportError as exc:
        raise ConfigError(
            "charts (report --format md or html) need matplotlib: "
            f"pip install 'tunescope[report]' ({exc})"
        ) from None
    return Figure, FigureCanvasAgg, Line2D, Patch


def require_charts() -> None:
    """ConfigError, naming the extra to install, when matplotlib cannot be imported."""
    _matplotlib()


def _draw_panel(ax: Any, p: ChartPanel, chart: TrialChart) -> None:
    ax.set_title(f"{p.label} ({p.unit})", fontsize=10)
    ax.grid(True, color="#e6e6e6", linewidth=0.6)
    ax.set_axisbelow(True)
    for a, b in chart.gaps:  # no samples here: the sampler died and was restarted
        ax.axvspan(a, max(b, a + 1e-3), color=GAP_COLOR, alpha=0.25, linewidth=0, hatch="//")
    if p.markers:
        for a, b in chart.evals:
            ax.axvspan(a, max(b, a + 1e-3), color=EVAL_COLOR, alpha=0.15, linewidth=0)
        if chart.steps:
            ax.vlines(
                chart.steps,
                0,
                1,
                transform=ax.get_xaxis_transform(),
                colors=STEP_COLOR,
                alpha=0.3,
                linewidth=0.5,
            )
        elif chart.step_bins:
            top = max(n for _, _, n in chart.step_bins)
            for a, b, n in chart.step_bins:
                ax.axvspan(
                    a,
                    b,
                    ymin=0.0,
                    ymax=0.05,
                    color=STEP_COLOR,
                    alpha=0.15 + 0.7 * n / top,
                    linewidth=0,
                )
    if not p.lines:
        ax.text(
            0.5, 0.5, "not recorded", ha="center", va="center", color="#888", transform=ax.transAxes
        )
        ax.set_yticks([])
        return
    for k, line in enumerate(p.lines):
        color = LINE_COLORS[k % len(LINE_COLORS)]
        if line.lo != line.v or line.hi != line.v:
            ax.fill_between(line.t, line.lo, line.hi, color=color, alpha=0.15, linewidth=0)
        ax.plot(
            line.t,
            line.v,
            color=color,
            linewidth=1.2,
            label=line.label if len(p.lines) > 1 or line.label != "trial" else None,
        )
    if p.max_value is not None:
        ax.set_ylim(0, p.max_value * 1.05)
    else:
        ax.set_ylim(bottom=0)
    if len(p.lines) > 1:
        ax.legend(loc="best", fontsize=8, frameon=False)


def trial_png(chart: TrialChart, *, title: str, dpi: int = 100) -> bytes:
    """The trial's chart as PNG bytes."""
    Figure, FigureCanvasAgg, Line2D, Patch = _matplotlib()
    fig = Figure(figsize=(11, 6.6), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 2, sharex=True)
    for ax, panel in zip(axes.flat, chart.panels, strict=False):
        _draw_panel(ax, panel, chart)
    for ax in axes[1]:
        ax.set_xlabel("elapsed since the run began (s)", fontsize=9)
    fig.suptitle(title, fontsize=12)
    handles = [
        Line2D([0], [0], color=STEP_COLOR, linewidth=1.5, label="optimizer step"),
        Patch(facecolor=EVAL_COLOR, alpha=0.3, label="evaluation"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=2, fontsize=9, frameon=False)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()
