"""Text for people: numbers in finding messages (sizes, percentages, durations), and names
people typed made safe to print on a terminal."""

from __future__ import annotations

__all__ = ["dur", "pct", "printable", "size"]

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
