"""Analysis over the store: per-trial summaries (findings arrive with their own issue)."""

from tunescope.analyze._summary import (
    MetricSummary,
    TrialSummary,
    summarize_metric,
    summarize_trial,
)

__all__ = ["MetricSummary", "TrialSummary", "summarize_metric", "summarize_trial"]
