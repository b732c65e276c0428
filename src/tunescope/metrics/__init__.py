"""The metric catalog (see :mod:`tunescope.metrics._catalog`)."""

from tunescope.metrics._catalog import CATALOG, GIB, Metric, Scope, Source, headline, metric

__all__ = ["CATALOG", "GIB", "Metric", "Scope", "Source", "headline", "metric"]
