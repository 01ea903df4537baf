"""The one report writer's shared parts: markdown tables, number formatting, spreads over
repetitions and verdicts against targets, computed from the raw data and never written by
hand. Every ``*_report.py`` builds its document from these, so a verdict and the numbers
quoted in the prose come from the same values.
"""

from __future__ import annotations

import operator
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}


def md_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """A markdown table; None cells print as '-'."""
    def cell(x: object) -> str:
        return "-" if x is None else str(x)

    return ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers),
            *("| " + " | ".join(cell(x) for x in r) + " |" for r in rows)]


def num(x: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def span(values: Iterable[float], fmt: str = "{:.2f}", sep: str = " to ") -> str:
    """'lo to hi' (or the one value) of ``values``; signs kept when fmt has '+'."""
    vals = sorted(values)
    if not vals:
        return "-"
    lo, hi = fmt.format(vals[0]), fmt.format(vals[-1])
    return lo if lo == hi else f"{lo}{sep}{hi}"


@dataclass(frozen=True)
class Spread:
    """Median and range of repetitions."""

    median: float
    lo: float
    hi: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        return cls(statistics.median(values), min(values), max(values), len(values))

    def text(self, fmt: str = "{:.0f}") -> str:
        sep = " to " if self.lo < 0 else "-"  # "-3 to -1", not "-3--1"
        return f"{fmt.format(self.median)} ({fmt.format(self.lo)}{sep}{fmt.format(self.hi)})"


@dataclass(frozen=True)
class Target:
    """A target of an issue: ``value op threshold``."""

    what: str
    op: str
    threshold: float

    def met(self, value: float | None) -> bool | None:
        return None if value is None else OPS[self.op](value, self.threshold)

    def __str__(self) -> str:
        return f"{self.what} {self.op} {self.threshold:g}"


def verdict(met: bool | Iterable[bool | None] | None) -> str:
    """'yes' / '**no**' / 'no data' for one check or all of several."""
    if met is None or isinstance(met, bool):
        return {True: "yes", False: "**no**", None: "no data"}[met]
    checks = [m for m in met if m is not None]
    return verdict(all(checks) if checks else None)


def count_met(checks: Iterable[bool | None]) -> tuple[int, int]:
    """(met, with data)."""
    c = [m for m in checks if m is not None]
    return sum(c), len(c)


def beats(a: Sequence[float], b: Sequence[float], factor: float = 1.0) -> str:
    """'yes' when every repetition of a beats factor x every repetition of b, 'no' when
    every one loses, else 'within noise' (the ranges overlap)."""
    if not a or not b:
        return "-"
    if min(a) > factor * max(b):
        return "yes"
    if max(a) < factor * min(b):
        return "no"
    return "within noise"


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def write(path: Path, lines: Sequence[str]) -> None:
    path.write_text("\n".join(lines).rstrip() + "\n")
