"""Finding thresholds from the project: ``[tool.tunescope.findings]`` in pyproject.toml,
``[findings]`` in tunescope.toml, ``$TUNESCOPE_<SETTING>``, in that rising order, found from
the current directory upwards; what ``tunescope report``, its JSON and the server use; and bad
input refused in one line (exit 2 for the CLI, before the server listens)."""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from api_helpers import request
from cli_helpers import cli, one_line_error
from tunescope.analyze import FindingSettings, findings_for_trial, load_settings
from tunescope.errors import ConfigError
from tunescope.server import create_app
from tunescope.server._app import release_store
from tunescope.store import Event, open_store

T0 = 1_700_000_000.0
ENV = "TUNESCOPE_INPUT_WAIT_HIGH_PCT"


@pytest.fixture
def recorded(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A SQLite file with run ``near``: one trial whose loader waits 10 ms of every 100 ms
    step, 10% of its step time: moderately input-bound by default (5% <= 10% < 20%)."""
    url = str(tmp_path / "store" / "ts.db")
    (tmp_path / "store").mkdir()
    with open_store(url) as st:
        run = st.ensure_run("near", start=T0)
        tr = st.create_trial(run.id, "t", {"lr": 1e-4}, start=T0, interval=1.0)
        st.add_events(
            [Event(tr.id, "data_wait", T0 + 2 + k * 0.1, None, k, 0.01, 0.1) for k in range(100)]
        )
        st.update_trial(tr.id, state="completed", end=T0 + 60)
        assert [f.severity for f in findings_for_trial(st, tr.id) if f.rule == "input_bound"] == [
            "moderate"
        ]
        yield url, tr.id


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project folder (the current directory), no TUNESCOPE_<SETTING> set."""
    folder = tmp_path / "proj"
    folder.mkdir()
    monkeypatch.chdir(folder)
    for f in dataclasses.fields(FindingSettings):
        monkeypatch.delenv(f"TUNESCOPE_{f.name.upper()}", raising=False)
    return folder


def _pyproject(folder: Path, body: str) -> Path:
    p = folder / "pyproject.toml"
    p.write_text(f'[project]\nname = "x"\n\n{body}\n', encoding="utf-8")
    return p


def _report(url: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return cli("report", "near", "--format", "json", "--store", url, cwd=cwd, env=env)


def _severity(p: subprocess.CompletedProcess[str]) -> tuple[list[str], dict[str, object]]:
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    (t,) = doc["trials"]
    sev = [f["severity"] for f in t["findings"] if f["rule"] == "input_bound"]
    return sev, doc["settings"]["input_wait_high_pct"]


def test_a_pyproject_threshold_flips_a_real_finding(
    recorded: tuple[str, int], project: Path
) -> None:
    url, _ = recorded
    sev, setting = _severity(_report(url, project))
    assert sev == ["moderate"]
    assert setting == {"value": 20.0, "unit": "%", "default": 20.0, "source": "default"}

    pyproject = _pyproject(project, "[tool.tunescope.findings]\ninput_wait_high_pct = 8")
    sub = project / "src" / "pkg"  # found from a folder below, like ruff and pytest do
    sub.mkdir(parents=True)
    sev, setting = _severity(_report(url, sub))
    assert sev == ["high"]
    assert setting == {
        "value": 8,
        "unit": "%",
        "default": 20.0,
        "source": f"{pyproject.resolve()} [tool.tunescope.findings]",
    }
    text = cli("report", "near", "--store", url, cwd=sub)
    assert (
        f"setting: input_wait_high_pct = 8 (from {pyproject.resolve()} [tool.tunescope.findings])\n"
    ) in text.stdout
    assert "[HIGH] Input-bound: 10% of step time waiting for data" in text.stdout


def test_tunescope_toml_overrides_pyproject_and_the_environment_both(
    recorded: tuple[str, int], project: Path
) -> None:
    url, _ = recorded
    _pyproject(
        project,
        "[tool.tunescope.findings]\ninput_wait_high_pct = 8\ninput_wait_moderate_pct = 4",
    )
    own = project / "tunescope.toml"
    own.write_text("[findings]\ninput_wait_high_pct = 30\n", encoding="utf-8")
    sev, setting = _severity(_report(url, project))
    assert sev == ["moderate"]
    assert setting["source"] == f"{own.resolve()} [findings]"  # type: ignore[index]
    eff = load_settings()
    assert eff.settings.input_wait_high_pct == 30
    assert eff.settings.input_wait_moderate_pct == 4  # the pyproject's key tunescope.toml lacks
    assert eff.source("input_wait_moderate_pct").endswith(
        "pyproject.toml [tool.tunescope.findings]"
    )

    sev, setting = _severity(_report(url, project, **{ENV: "9.5"}))
    assert sev == ["high"]
    assert setting == {"value": 9.5, "unit": "%", "default": 20.0, "source": f"${ENV}"}


def test_only_the_nearest_project_folder_is_read(tmp_path: Path, project: Path) -> None:
    (tmp_path / "tunescope.toml").write_text("[findings]\nmin_samples = 50\n", encoding="utf-8")
    assert load_settings().settings.min_samples == 50  # the folder above, when none nearer
    _pyproject(project, "[tool.tunescope.findings]\ngrowth_min_mib = 128")
    eff = load_settings()
    assert eff.settings.growth_min_mib == 128
    assert eff.settings.min_samples == FindingSettings().min_samples  # the one above: not read
    _pyproject(project, "[tool.ruff]\nline-length = 100")  # no [tool.tunescope]: look above
    assert load_settings().settings.min_samples == 50


def test_the_server_uses_the_projects_thresholds(
    recorded: tuple[str, int], project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, trial_id = recorded
    _pyproject(project, "[tool.tunescope.findings]\ninput_wait_high_pct = 8")
    app = create_app(url)
    try:
        r: httpx.Response = request(app, f"/api/trials/{trial_id}/findings")
        assert r.status_code == 200
        assert [f["severity"] for f in r.json() if f["rule"] == "input_bound"] == ["high"]
    finally:
        release_store(app.state.store)
    monkeypatch.setenv(ENV, "101")
    with pytest.raises(ConfigError, match=rf"^\${ENV}: input_wait_high_pct is a percentage"):
        create_app(url)


@pytest.mark.parametrize(
    ("file", "body", "needle"),
    [
        (
            "pyproject.toml",
            "[tool.tunescope.findings]\ninput_wait_hgh_pct = 8",
            "pyproject.toml [tool.tunescope.findings]: unknown setting 'input_wait_hgh_pct'",
        ),
        (
            "pyproject.toml",
            '[tool.tunescope.findings]\ninput_wait_high_pct = "8"',
            "pyproject.toml [tool.tunescope.findings]: input_wait_high_pct must be a number",
        ),
        (
            "pyproject.toml",
            "[tool.tunescope]\nthresholds = 1",
            "pyproject.toml: unknown key tool.tunescope.thresholds",
        ),
        (
            "tunescope.toml",
            "[findings]\ngpu_mem_near_oom_pct = 120",
            "tunescope.toml [findings]: gpu_mem_near_oom_pct is a percentage: 0 to 100, not 120",
        ),
        (
            "tunescope.toml",
            "[findings]\ngrowth_segments = 1",
            "tunescope.toml [findings]: growth_segments must be at least 2, not 1",
        ),
        (
            "tunescope.toml",
            "[findings]\nmin_samples = true",
            "tunescope.toml [findings]: min_samples must be a number >= 0, not True",
        ),
        ("tunescope.toml", "[findings\nmin_samples = 1", "tunescope.toml is not valid TOML"),
        (
            "tunescope.toml",
            "[findings]\ninput_wait_moderate_pct = 25",
            "input_wait_moderate_pct = 25 (",
        ),
    ],
)
def test_bad_settings_in_a_file_are_one_line_and_exit_2(
    recorded: tuple[str, int], project: Path, file: str, body: str, needle: str
) -> None:
    url, _ = recorded
    path = project / file
    path.write_text(body + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert str(path.resolve()) in str(err.value)
    if file == "pyproject.toml" and "unknown setting" not in needle:
        return  # one CLI run per file kind is enough to show the exit code
    p = _report(url, project)
    one_line_error(p, needle)


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("abc", f"${ENV}: input_wait_high_pct must be a number >= 0, not 'abc'"),
        ("-1", f"${ENV}: input_wait_high_pct must be a number >= 0, not -1.0"),
        ("nan", f"${ENV}: input_wait_high_pct must be a number >= 0, not nan"),
        ("3", f"input_wait_high_pct = 3 (${ENV})"),  # below the moderate threshold (5)
    ],
)
def test_bad_settings_in_the_environment(project: Path, value: str, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(environ={ENV: value})
    assert needle in str(err.value)


def test_the_server_refuses_bad_settings_before_it_listens(
    recorded: tuple[str, int], project: Path
) -> None:
    url, _ = recorded
    (project / "tunescope.toml").write_text("[findings]\nbusy_util_pct = -5\n", encoding="utf-8")
    with socket.socket() as taken:  # were the settings not checked first: "cannot listen"
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        p = cli("ui", "--store", url, "--port", port, cwd=project)
    one_line_error(p, "busy_util_pct must be a number >= 0, not -5")
