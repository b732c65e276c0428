"""The sampler's logger. Each kind of failure is said once (:class:`tunescope._once.Once`,
the one log-once helper): a failure that repeats on every sample costs one line on stderr."""

from __future__ import annotations

__all__ = ["LOGGER_NAME"]

LOGGER_NAME = "tunescope.collect"
