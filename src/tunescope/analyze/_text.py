"""Numbers in finding messages: sizes, percentages, durations."""

from __future__ import annotations

__all__ = ["dur", "pct", "size"]

MIB = 1024.0**2
GIB = 1024.0**3


def size(n: float) -> str:
    """Bytes as '3.21 GiB' (1 GiB and more) or '512 MiB'."""
    if abs(n) >= GIB:
        return f"{n / GIB:.2f} GiB"
    return f"{n / MIB:.0f} MiB"


def pct(x: float) -> str:
    """A percentage: '7.8%' under 10, else '42%'."""
    return f"{x:.1f}%" if abs(x) < 10 else f"{x:.0f}%"


def dur(s: float) -> str:
    """Seconds as '42 s', '12.5 min' or '3.2 h'."""
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"
