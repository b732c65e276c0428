"""Text for people: numbers in finding messages (sizes, percentages, durations), stored values
in their display units and elapsed times (reports and the CLI's tables, one way for both), and
names people typed made safe to print on a terminal."""

from __future__ import annotations

import math

from tunescope.metrics import metric

__all__ = ["dur", "elapsed", "pct", "printable", "size", "value"]

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


def elapsed(s: float | None) -> str:
    """Seconds as a clock: '4:05', '1:02:03', '-0:05'; '-' for None or a non-finite number."""
    if s is None or not math.isfinite(s):
        return "-"
    sign = "-" if s < 0 else ""
    n = round(abs(s))
    h, rem = divmod(n, 3600)
    mnt, sec = divmod(rem, 60)
    return f"{sign}{h}:{mnt:02d}:{sec:02d}" if h else f"{sign}{mnt}:{sec:02d}"


def value(key: str, v: float | None) -> str:
    """A stored value of metric ``key`` in its display unit: '87%', '3.21 GiB', '120 ms' or
    '1.50 s'; '-' for None or a non-finite number."""
    if v is None or not math.isfinite(v):
        return "-"
    m = metric(key)
    d = v * m.scale
    if m.unit == "%":
        return f"{d:.0f}%"
    if m.unit == "s":
        return f"{d * 1000:.0f} ms" if d < 1 else f"{d:.2f} s"
    return f"{d:.2f} {m.unit}"


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(c: str) -> str:
    n = ord(c)
    if c in _ESCAPES:
        return _ESCAPES[c]
    if n < 0x100:
        return f"\\x{n:02x}"
    return f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def printable(s: str) -> str:
    r"""``s`` with every character a terminal would act on written as an escape, the way
    Python writes it: ESC as ``\x1b``, a newline as ``\n``, a tab as ``\t``, a
    right-to-left override as ``\u202e`` (controls and other non-printable code points).
    Printable characters, accented letters included, are kept as they are."""
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else _escape(c) for c in s)
