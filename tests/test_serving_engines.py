"""Engine metrics in one vocabulary: each engine's parser against an exposition written by
hand from the engine's documented names (tests/fixtures/serving/*.prom, labelled FIXTURE in
their first lines: no engine but llama.cpp runs here; the live llama.cpp server is checked in
tests/test_serving_load.py), and the catalog's rows against the parsers' source names."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunescope.metrics import CATALOG, metric
from tunescope.serving import ENGINES, SERVE_KEYS, Scrape, detect, parse_exposition, parse_slots

FIXTURES = Path(__file__).parent / "fixtures" / "serving"
NEXT = "# --- next scrape ---"


def pages(engine: str) -> tuple[str, str]:
    text = (FIXTURES / f"{engine}.prom").read_text()
    assert text.startswith("# FIXTURE")
    first, second = text.split(NEXT)
    return first, second


# (first scrape's values, second scrape's values) per engine, worked out by hand
EXPECTED: dict[str, tuple[dict[str, float], dict[str, float]]] = {
    "vllm": (
        {
            "serve.running": 5,
            "serve.waiting": 4,
            "serve.kv_use": 60,  # mean of 50% and 70%
            "serve.preemptions": 3,
            "serve.prompt_tokens": 1024,
            "serve.gen_tokens": 512,
        },
        {
            "serve.running": 1,
            "serve.waiting": 0,
            "serve.kv_use": 25,
            "serve.preemptions": 2,
            "serve.prompt_tokens": 1100,
            "serve.gen_tokens": 600,
            "serve.ttft_mean": 0.5,  # (3 - 1) s / (14 - 10) requests
            "serve.itl_mean": 0.02,  # (7 - 5) s / (600 - 500) tokens
        },
    ),
    "sglang": (
        {
            "serve.running": 6,
            "serve.waiting": 3,
            "serve.kv_use": 90,
            "serve.prompt_tokens": 4096,
            "serve.gen_tokens": 2048,
        },
        {
            "serve.running": 6,
            "serve.waiting": 5,
            "serve.kv_use": 95,
            "serve.prompt_tokens": 5096,
            "serve.gen_tokens": 2548,
            # no request finished: no TTFT mean (never zero)
            "serve.itl_mean": 0.01,
        },
    ),
    "tgi": (
        {
            "serve.running": 4,
            "serve.waiting": 2,
            "serve.prompt_tokens": 2560,
            "serve.gen_tokens": 1280,
        },
        {
            "serve.running": 4,
            "serve.waiting": 0,
            "serve.prompt_tokens": 3072,
            "serve.gen_tokens": 1536,
            "serve.itl_mean": 0.03,  # (0.52 - 0.4) / (24 - 20)
        },
    ),
    "triton": (
        {"serve.running": 8, "serve.waiting": 4, "serve.kv_use": 25},
        {"serve.running": 2, "serve.waiting": 0, "serve.kv_use": 75},
    ),
    "nim": (
        {
            "serve.running": 7,
            "serve.waiting": 1,
            "serve.kv_use": 42,
            "serve.prompt_tokens": 900,
            "serve.gen_tokens": 300,
        },
        {
            "serve.running": 7,
            "serve.waiting": 2,
            "serve.kv_use": 50,
            "serve.prompt_tokens": 1000,
            "serve.gen_tokens": 400,
            "serve.ttft_mean": 0.3,
            "serve.itl_mean": 0.01,
        },
    ),
    "llamacpp": (
        {
            "serve.running": 2,
            "serve.waiting": 3,
            "serve.requests_deferred": 3,
            "serve.kv_use": 12.5,
            "serve.prompt_tokens": 120,
            "serve.gen_tokens": 64,
        },
        {
            "serve.running": 2,
            "serve.waiting": 0,
            "serve.requests_deferred": 0,
            "serve.kv_use": 25,
            "serve.prompt_tokens": 130,
            "serve.gen_tokens": 96,
        },
    ),
}


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_each_engine_in_one_vocabulary(engine: str) -> None:
    first, second = pages(engine)
    exp1, exp2 = parse_exposition(first), parse_exposition(second)
    assert detect(exp1) == engine
    scrape = Scrape(engine)
    got1, got2 = scrape.values(exp1), scrape.values(exp2)
    want1, want2 = EXPECTED[engine]
    assert got1 == pytest.approx(want1)
    assert got2 == pytest.approx(want2)
    assert set(got1) | set(got2) <= set(SERVE_KEYS)


def test_the_exposition_parser_reads_labels_and_skips_what_is_not_a_sample() -> None:
    text = "\n".join(
        [
            "# HELP x a metric",
            'x{a="1",b="q\\"uote"} 2.5',
            "x 3 1700000000000",
            "y NaN",
            "z +Inf",
            "not a sample line",
            "w 1e3",
        ]
    )
    exp = parse_exposition(text)
    assert exp["x"] == [((("a", "1"), ("b", 'q"uote')), 2.5), ((), 3.0)]
    assert "y" not in exp and "z" not in exp
    assert exp["w"] == [((), 1000.0)]
    assert detect(exp) is None


def test_llamacpp_slots() -> None:
    assert parse_slots([{"id": 0, "is_processing": True}, {"id": 1, "is_processing": False}]) == (
        2,
        1,
    )
    assert parse_slots({"error": "slots disabled"}) is None


def test_the_catalog_names_every_engines_source() -> None:
    engine_rows = {m.key for m in CATALOG if m.source == "engine"}
    assert engine_rows == set(SERVE_KEYS)
    for key in SERVE_KEYS:
        m = metric(key)
        assert m.scope == "trial"
        for engine, table in ENGINES.items():
            if key in table:
                assert f"{engine}: {table[key].source()}" in m.equivalent, (key, engine)
