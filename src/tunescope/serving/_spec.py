"""What people type for a load sweep, parsed and checked before anything is sent or written:
levels, token counts (fixed or a distribution) and prompt files. Each parser raises
:class:`~tunescope.errors.ConfigError` naming what was wrong. (``--slo`` is parsed by the
serving analysis' ``tunescope.analyze.parse_slo``, the one parser of ``--slo`` and
``--workload``.)"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunescope.errors import ConfigError

__all__ = [
    "MAX_LEVELS",
    "Prompt",
    "TokenSpec",
    "parse_levels",
    "read_prompts",
    "synthetic_prompt",
]

MAX_LEVELS = 64
"""The most load levels one sweep takes."""


def parse_levels(text: str, option: str, *, integer: bool, limit: float) -> list[float]:
    """``1,2,4,8`` into levels: positive, at most ``limit``, whole numbers when ``integer``,
    no repeats, at most :data:`MAX_LEVELS`."""
    items = [s.strip() for s in text.split(",")]
    if not text.strip() or any(not s for s in items):
        raise ConfigError(f"{option} {text!r}: expected numbers separated by commas")
    out: list[float] = []
    for s in items:
        try:
            v = float(s)
        except ValueError:
            raise ConfigError(f"{option} {text!r}: {s!r} is not a number") from None
        if not math.isfinite(v) or v <= 0 or v > limit:
            raise ConfigError(
                f"{option} {text!r}: {s} is out of range (above 0, at most {limit:g})"
            )
        if integer and v != int(v):
            raise ConfigError(f"{option} {text!r}: {s} is not a whole number")
        if v in out:
            raise ConfigError(f"{option} {text!r}: {s} is given twice")
        out.append(float(int(v)) if integer else v)
    if len(out) > MAX_LEVELS:
        raise ConfigError(f"{option} {text!r}: at most {MAX_LEVELS} levels")
    return out


@dataclass(frozen=True)
class TokenSpec:
    """A token count per request: fixed (``128``), uniform in a range (``64-256``) or
    normal, rounded and clipped to at least 1 (``normal:128,32``)."""

    text: str
    kind: str
    a: float
    b: float

    LIMIT = 1_000_000

    @classmethod
    def parse(cls, text: str, option: str) -> TokenSpec:
        s = text.strip()
        try:
            if s.startswith("normal:"):
                mean, _, sd = s[7:].partition(",")
                spec = cls(s, "normal", float(mean), float(sd))
                ok = spec.a >= 1 and spec.b >= 0
            elif "-" in s:
                lo, _, hi = s.partition("-")
                spec = cls(s, "uniform", int(lo), int(hi))
                ok = 1 <= spec.a <= spec.b
            else:
                spec = cls(s, "fixed", int(s), int(s))
                ok = spec.a >= 1
        except ValueError:
            ok = False
        if not ok or not all(math.isfinite(v) and v <= cls.LIMIT for v in (spec.a, spec.b)):
            raise ConfigError(
                f"{option} {text!r}: expected a count (128), a range (64-256) or "
                f"normal:MEAN,SD, each from 1 to {cls.LIMIT}"
            )
        return spec

    def draw(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return int(self.a)
        if self.kind == "uniform":
            return rng.randint(int(self.a), int(self.b))
        return max(1, min(self.LIMIT, round(rng.gauss(self.a, self.b))))

    def param(self) -> int | str:
        """The spec as a trial param: the count when fixed, else its text."""
        return int(self.a) if self.kind == "fixed" else self.text


@dataclass(frozen=True)
class Prompt:
    """One request's input: a prompt text or chat messages, and its output tokens if the
    file says."""

    text: str | None = None
    messages: list[dict[str, Any]] | None = None
    output_tokens: int | None = None


MAX_PROMPTS = 100_000


def read_prompts(path: str) -> list[Prompt]:
    """A JSON Lines file: each line an object with ``prompt`` (or ``text``) or ``messages``,
    and optionally ``output_tokens`` (or ``max_tokens``). Blank lines are skipped."""
    try:
        lines = Path(path).expanduser().read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--prompts {path}: cannot be read ({exc})") from None
    out: list[Prompt] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"--prompts {path} line {n}"
        try:
            doc = json.loads(line)
        except ValueError:
            raise ConfigError(f"{where}: not JSON") from None
        if not isinstance(doc, dict):
            raise ConfigError(f"{where}: expected a JSON object")
        text = doc.get("prompt", doc.get("text"))
        msgs = doc.get("messages")
        if not (isinstance(text, str) and text) and not (isinstance(msgs, list) and msgs):
            raise ConfigError(f"{where}: needs a non-empty prompt (or text) or messages")
        if msgs is not None and not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) for m in msgs
        ):
            raise ConfigError(f"{where}: each message needs a role")
        out_tok = doc.get("output_tokens", doc.get("max_tokens"))
        if out_tok is not None and (
            not isinstance(out_tok, int) or isinstance(out_tok, bool) or out_tok < 1
        ):
            raise ConfigError(f"{where}: output_tokens must be a whole number of at least 1")
        out.append(Prompt(text if isinstance(text, str) else None, msgs, out_tok))
        if len(out) > MAX_PROMPTS:
            raise ConfigError(f"--prompts {path}: more than {MAX_PROMPTS} prompts")
    if not out:
        raise ConfigError(f"--prompts {path}: no prompts in the file")
    return out


_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "was",
    "for",
    "on",
    "that",
    "with",
    "as",
    "by",
    "at",
    "from",
    "it",
    "an",
    "be",
    "this",
    "are",
    "or",
    "which",
    "model",
    "data",
    "time",
    "system",
    "number",
    "value",
    "first",
    "new",
    "used",
    "two",
    "one",
    "also",
    "more",
    "can",
    "has",
    "its",
    "between",
    "after",
    "other",
    "some",
    "these",
    "their",
    "over",
    "under",
    "when",
    "where",
    "while",
    "during",
    "each",
    "many",
    "state",
    "water",
    "light",
    "power",
    "field",
    "point",
    "level",
    "order",
    "line",
    "group",
    "area",
    "place",
    "result",
    "method",
]


def synthetic_prompt(rng: random.Random, tokens: int) -> str:
    """About ``tokens`` tokens of common English words (one token each for the usual
    tokenizers); the server's usage says how many it counted."""
    return " ".join(rng.choices(_WORDS, k=tokens))  # one call: 3.5x cheaper than a choice a word
