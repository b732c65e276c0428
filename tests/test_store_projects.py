"""Projects and tokens on every SQL backend: run names per project, ownership, token checks.
(An HTTP store is bound to its token's project: tests/test_store_http.py checks that.)"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tunescope.errors import ConfigError, Conflict, NotFound
from tunescope.store import Batch, Store, TrialSpec, new_key, open_store
from tunescope.store.sql._sql import SQLStore
from tunescope.store.sql._tokens import digest

T0 = 1_700_000_000.0


@pytest.fixture
def sql(store_url: str) -> Iterator[SQLStore]:
    st = open_store(store_url)
    assert isinstance(st, SQLStore)
    try:
        yield st
    finally:
        st.close()


def test_two_projects_keep_runs_of_the_same_name_apart(sql: SQLStore) -> None:
    a = sql.ensure_run("sweep", T0, project="vision", os_user="ana", host="n1")
    b = sql.ensure_run("sweep", T0 + 1, project="nlp", os_user="bo", host="n2")
    assert a.id != b.id and (a.project, b.project) == ("vision", "nlp")
    assert (a.os_user, a.host) == ("ana", "n1")
    assert sql.ensure_run("sweep", project="vision").id == a.id  # found, not made again
    assert [r.id for r in sql.list_runs(project="nlp")] == [b.id]
    assert sql.list_runs() == []  # the store's own project, default, has none
    assert sql.get_run("sweep", project="nlp").id == b.id
    with pytest.raises(NotFound):
        sql.get_run("sweep")  # not in default
    assert sql.get_run(a.id).project == "vision"  # by id: any project, saying which
    assert sql.list_projects() == ["default", "nlp", "vision"]
    ta = sql.create_trial(a.id, "t")
    sid = sql.series(ta.id, "cpu.util").id
    assert sql.owner(trial=ta.id) == "vision" and sql.owner(series=sid) == "vision"
    with pytest.raises(NotFound):
        sql.owner(trial=999_999)


def test_a_batch_makes_its_run_in_its_project(sql: SQLStore) -> None:
    spec = TrialSpec(key=new_key(), run="r", project="p1", os_user="ana", host="h", start=T0)
    tid = sql.write(Batch(spec.key, spec=spec))
    run = sql.get_run(sql.get_trial(tid).run_id)
    assert (run.name, run.project, run.os_user, run.host) == ("r", "p1", "ana", "h")


def test_a_store_opened_for_a_project_uses_it(store_url: str) -> None:
    with open_store(store_url, project="team") as st:
        run = st.ensure_run("x")
        assert run.project == "team" and [r.name for r in st.list_runs()] == ["x"]
    with open_store(store_url) as st:
        assert st.list_runs() == [] and st.list_runs(project="team")[0].id == run.id


def test_tokens_are_kept_as_digests_and_checked(sql: SQLStore) -> None:
    info, secret = sql.create_token("vision", "write", name="ci")
    assert secret.startswith("ts_") and len(secret) >= 40
    assert (info.project, info.scope, info.name, info.revoked) == ("vision", "write", "ci", None)
    # only the digest is stored
    found = sql.check_token(secret)
    assert found is not None and found.id == info.id and found.used is not None
    assert sql.check_token(secret[:-1] + ("A" if secret[-1] != "A" else "B")) is None
    assert sql.check_token("not a token") is None
    with pytest.raises(Conflict):
        sql.create_token("vision", "read", name="ci")
    other, _ = sql.create_token("vision", "read")
    assert other.name == "token-2"
    with pytest.raises(ConfigError):
        sql.create_token("vision", "admin")
    assert [t.name for t in sql.list_tokens("vision")] == ["ci", "token-2"]
    revoked = sql.revoke_token("ci", project="vision")
    assert revoked.revoked is not None and sql.check_token(secret) is None
    assert sql.revoke_token(info.id).revoked == revoked.revoked  # a second time: unchanged
    _late, late_secret = sql.create_token("vision", "read", expires=time.time() - 1)
    assert sql.check_token(late_secret) is None  # expired
    with pytest.raises(NotFound):
        sql.revoke_token(123456)


def test_no_secret_is_in_the_database(store_url: str) -> None:
    with open_store(store_url) as st:
        assert isinstance(st, SQLStore)
        _info, secret = st.create_token("p", "read")
        rows = [r.digest for r in [_Row(d) for d in _digests(st)]]
    assert digest(secret) in rows and secret not in rows


class _Row:
    def __init__(self, d: str) -> None:
        self.digest = d


def _digests(st: Store) -> list[str]:
    assert isinstance(st, SQLStore)
    with st._tx() as cur:
        return [str(r[0]) for r in st._q(cur, "SELECT digest FROM tokens").fetchall()]
