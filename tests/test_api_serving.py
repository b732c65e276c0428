"""``GET /api/runs/{run}/serving`` against the real app over a store holding a load run made
per SERVING_CONTRACT (the synthetic engine of tests/serving_helpers.py): the levels sorted by
level with the figures level_stats computes, validated against the OpenAPI model; a run that
is not a load run has no levels; an unknown run is a 404."""

from __future__ import annotations

from pathlib import Path

from api_helpers import app_over, request
from serving_helpers import write_load_run
from tunescope.analyze import serving_run
from tunescope.server import _schema as schema
from tunescope.store import open_store


def test_serving_route(tmp_path: Path) -> None:
    url = str(tmp_path / "s.db")
    with open_store(url) as st:
        ids = write_load_run(st, levels=(6, 1, 2))
        plain = st.ensure_run("plain")
        st.create_trial(plain.id, "t", {"lr": 0.1})
        expected = serving_run(st, "serve")
    assert expected is not None
    with app_over(url) as app:
        r = request(app, "/api/runs/serve/serving")
        assert r.status_code == 200
        body = schema.ServingOut.model_validate(r.json())
        assert [lv.trial for lv in body.levels] == ["c1", "c2", "c6"]
        assert [lv.trial_id for lv in body.levels] == [ids[1], ids[2], ids[6]]
        assert body.slo.ttft_s == 0.5 and body.slo.tpot_s == 0.05
        for got, want in zip(body.levels, expected.levels, strict=True):
            assert got.stats.model_dump() == want.stats.to_dict()
        c6 = body.levels[2].stats
        assert c6.ttft.p99 is not None and c6.ttft.p99 > 0.5
        assert c6.goodput is not None and c6.request_throughput is not None
        assert c6.goodput < c6.request_throughput
        by_id = request(app, f"/api/runs/{body.run.id}/serving").json()
        assert by_id == r.json()
        none = schema.ServingOut.model_validate(request(app, "/api/runs/plain/serving").json())
        assert none.levels == [] and none.run.name == "plain"
        missing = request(app, "/api/runs/nope/serving")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
        # request events are an event kind the events route knows
        ev = request(app, f"/api/trials/{ids[6]}/events", params={"kinds": "request"})
        assert ev.status_code == 200 and ev.json()["total"] == 24
