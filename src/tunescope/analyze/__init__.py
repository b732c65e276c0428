"""Analysis over the store: per-trial summaries, findings (diagnoses with the numbers behind
them, a time span and advice), right-sizing and reports.

``findings_for_run(store, run)`` gives every trial's findings; ``to_dict`` turns them into
JSON values; :class:`FindingSettings` holds every threshold with its source (see
``docs/findings.md``). Importing this package does not import matplotlib: charts load it when
a Markdown or HTML report is rendered.
"""

from tunescope.analyze._charts import require_charts
from tunescope.analyze._frontier import Frontier, FrontierPoint, cost_frontier
from tunescope.analyze._gpu_catalog import (
    GPU_CATALOG,
    GpuType,
    MigProfile,
    describe_catalog,
    gpu_catalog,
    match_gpu,
    parse_prices,
)
from tunescope.analyze._objective import Objective, trial_objective
from tunescope.analyze._report import (
    REPORT_FORMATS,
    Report,
    TrialReport,
    build_report,
    render_report,
    report_dict,
)
from tunescope.analyze._retention import Compaction, compact_raw
from tunescope.analyze._rules import (
    RULES,
    SEVERITIES,
    Finding,
    RuleInfo,
    Severity,
    data_wait_share,
    findings_for_run,
    findings_for_trial,
    jsonable,
    to_dict,
)
from tunescope.analyze._serving import (
    Level,
    LevelStats,
    ServingRun,
    Slo,
    level_stats,
    parse_slo,
    serving_run,
    summary_stats,
)
from tunescope.analyze._settings import (
    EffectiveSettings,
    FindingSettings,
    SettingInfo,
    load_settings,
    setting_info,
)
from tunescope.analyze._sizing import Sizing, Workload, parse_workload, size_workload
from tunescope.analyze._summary import (
    MetricSummary,
    TrialSummary,
    summarize_metric,
    summarize_trial,
    trial_duration,
    trial_end,
)
from tunescope.analyze._text import elapsed, printable, value
from tunescope.analyze._usage import GROUPINGS, TrialUsage
from tunescope.analyze._usage_kept import UsageKept, keep_usage_ahead
from tunescope.analyze._usage_query import Usage, UsageRow, check_query, group_rows, usage_of

__all__ = [
    "GPU_CATALOG",
    "GROUPINGS",
    "REPORT_FORMATS",
    "RULES",
    "SEVERITIES",
    "Compaction",
    "EffectiveSettings",
    "Finding",
    "FindingSettings",
    "Frontier",
    "FrontierPoint",
    "GpuType",
    "Level",
    "LevelStats",
    "MetricSummary",
    "MigProfile",
    "Objective",
    "Report",
    "RuleInfo",
    "ServingRun",
    "SettingInfo",
    "Severity",
    "Sizing",
    "Slo",
    "TrialReport",
    "TrialSummary",
    "TrialUsage",
    "Usage",
    "UsageKept",
    "UsageRow",
    "Workload",
    "build_report",
    "check_query",
    "compact_raw",
    "cost_frontier",
    "data_wait_share",
    "describe_catalog",
    "elapsed",
    "findings_for_run",
    "findings_for_trial",
    "gpu_catalog",
    "group_rows",
    "jsonable",
    "keep_usage_ahead",
    "level_stats",
    "load_settings",
    "match_gpu",
    "parse_prices",
    "parse_slo",
    "parse_workload",
    "printable",
    "render_report",
    "report_dict",
    "require_charts",
    "serving_run",
    "setting_info",
    "size_workload",
    "summarize_metric",
    "summarize_trial",
    "summary_stats",
    "to_dict",
    "trial_duration",
    "trial_end",
    "trial_objective",
    "usage_of",
    "value",
]
