"""Response models: the shapes of docs/api.md, one model per JSON shape.

Each model is the one description of its shape. The OpenAPI document (and from it the page's
TypeScript types) is generated from it, and the routes build their answers with it: its
constructors (:meth:`Shape.make`, :meth:`Shape.of`, :meth:`Shape.of_each` and the ``of_*``
classmethods) turn the store's and the analysis' records into the model's keys, in the model's
order, and refuse a key the model lacks or a required one left out. They build the JSON value
itself (dicts and lists, which a route returns as a ``JSONResponse``), not model instances: a
pydantic object costs about 3 us to construct even without validation, ten times a dict, and a
day-long trial's scalars and events are tens of thousands of rows (nor would FastAPI's
validation of a ``response_model`` answer be cheaper). The route tests validate every answer
against these models and check that it has their keys, in their order.

Times are UNIX epoch seconds, values are in the metric's base unit, ``None`` (JSON ``null``)
means missing.
"""

from tunescope.server._schema._analysis import (
    DistOut,
    FrontierOut,
    FrontierTrialOut,
    LevelStatsOut,
    RunRefOut,
    ServingLevelOut,
    ServingOut,
    SloOut,
    UsageDayOut,
    UsageOut,
    UsageRowOut,
    WastedTrialOut,
)
from tunescope.server._schema._runs import (
    CheckpointOut,
    ErrorBody,
    ErrorOut,
    EventBinOut,
    EventOut,
    EventsOut,
    FindingCountsOut,
    FindingOut,
    HealthOut,
    LoginIn,
    LogoutOut,
    MetricOut,
    MetricSeriesOut,
    ProjectOut,
    RunDetailOut,
    RunFindingsOut,
    RunOut,
    RunState,
    ScalarOut,
    ScalarsOut,
    SeriesOut,
    SessionOut,
    TrialDetailOut,
    TrialMetricOut,
    TrialOut,
    WindowOut,
)
from tunescope.server._schema._shape import Json, Shape

__all__ = [
    "CheckpointOut",
    "DistOut",
    "ErrorBody",
    "ErrorOut",
    "EventBinOut",
    "EventOut",
    "EventsOut",
    "FindingCountsOut",
    "FindingOut",
    "FrontierOut",
    "FrontierTrialOut",
    "HealthOut",
    "Json",
    "LevelStatsOut",
    "LoginIn",
    "LogoutOut",
    "MetricOut",
    "MetricSeriesOut",
    "ProjectOut",
    "RunDetailOut",
    "RunFindingsOut",
    "RunOut",
    "RunRefOut",
    "RunState",
    "ScalarOut",
    "ScalarsOut",
    "SeriesOut",
    "ServingLevelOut",
    "ServingOut",
    "SessionOut",
    "Shape",
    "SloOut",
    "TrialDetailOut",
    "TrialMetricOut",
    "TrialOut",
    "UsageDayOut",
    "UsageOut",
    "UsageRowOut",
    "WastedTrialOut",
    "WindowOut",
]
