"""A series whose stored data is damaged is noted in the chart's legend, in a real Chromium
against the real server over a SQLite file whose chunk bytes were really damaged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from browser_helpers import ensure_built, serve
from store_helpers import damage_chunk
from tunescope.store import CHUNK_SAMPLES, open_store

pytest_plugins = ["browser_fixtures"]
pytestmark = [pytest.mark.browser, pytest.mark.slow]

T0 = 1_700_000_000.0


def test_a_damaged_series_is_noted_in_the_legend(browser: Any, tmp_path: Path) -> None:
    db = str(tmp_path / "damaged.db")
    n = 4 * CHUNK_SAMPLES
    with open_store(db) as st:
        run = st.ensure_run("hurt", start=T0)
        tid = st.create_trial(run.id, "only", start=T0).id
        ids = [st.series(tid, "gpu.util", dev).id for dev in ("0", "1")]
        st.append_samples((sid, T0 + k, 50.0 + k % 9) for k in range(n) for sid in ids)
        st.update_trial(tid, state="completed", end=T0 + n)
    damage_chunk(db, ids[0], 1)
    ensure_built()
    srv = serve(db, tmp_path / "server.log")
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=srv.base)
    try:
        pg = context.new_page()
        errors: list[str] = []
        pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.goto(f"/#/runs/{run.id}/resources?metric=gpu.util&trial={tid}")
        pg.locator('[data-chart="main"][data-drawn]').wait_for()
        labels = pg.locator('[data-chart="main"] .legend-label')
        assert labels.all_inner_texts() == ["GPU 0 (damaged)", "GPU 1"]
        items = pg.locator('[data-chart="main"] .legend-item')
        assert items.nth(0).get_attribute("title") == (
            "1 damaged chunk of stored samples could not be read: shown as one coarser bucket "
            "each, or missing at the window's edges"
        )
        assert items.nth(1).get_attribute("title") == ""
        assert not errors, errors
    finally:
        context.close()
        srv.stop()
