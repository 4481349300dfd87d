"""Robust statistics: the median and the median absolute deviation, which one outlier cannot move."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from statistics import median
from typing import TypeVar

MAD_SCALE = 1.4826  # MAD x this estimates the standard deviation of normally spread values
_K = TypeVar("_K", bound=Hashable)


def mad(values: Sequence[float], centre: float | None = None) -> float:
    """The median absolute deviation from ``centre`` (default: the median)."""
    middle = median(values) if centre is None else centre
    return float(median(abs(value - middle) for value in values))


def robust_z(value: float, values: Sequence[float]) -> float:
    """How many robust deviations ``value`` lies from the median of ``values`` (signed).

    The deviation has a floor of 1 % of the median, so a fleet of identical readings (MAD 0) does not make
    every tiny difference infinite. To judge many values against one population, take its
    :class:`RobustScale` once and call :meth:`RobustScale.z` for each (the same figure, without sorting the
    population again for every value).
    """
    return RobustScale.of(values).z(value)


@dataclass(frozen=True)
class RobustScale:
    """A population's median and robust deviation (scaled MAD with its floor), computed once."""

    middle: float
    spread: float

    @classmethod
    def of(cls, values: Sequence[float]) -> RobustScale:
        middle = float(median(values))
        return cls(middle, max(MAD_SCALE * mad(values, middle), abs(middle) * 0.01, 1e-9))

    def z(self, value: float) -> float:
        """How many robust deviations ``value`` lies from the median (signed)."""
        return (value - self.middle) / self.spread


def mode_share(values: Sequence[_K]) -> tuple[_K, int]:
    """The most common value and how many times it occurs (ties: the first seen)."""
    value, count = Counter(values).most_common(1)[0]
    return value, count
