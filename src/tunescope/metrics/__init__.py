"""The metric catalog (see :mod:`tunescope.metrics._catalog`)."""

from tunescope.metrics._catalog import CATALOG, GIB, Metric, headline, metric

__all__ = ["CATALOG", "GIB", "Metric", "headline", "metric"]
