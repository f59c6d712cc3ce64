"""A scope's memory as a whole (issue 31), on both backends: ``torpor memory ls / export /
import / forget``, a search that names no scope refused once scopes are in use, and
supersession recording when an episode stopped being true (``valid_until_ms``).

The forget test reads every table of the store and the artifact folder afterwards: nothing of
the forgotten scope is left (its run deleted by run retention first — runs are not memory),
and the other scope's memory is untouched."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import torpor
from torpor import retention
from torpor.cli import app
from torpor.episodes import Episode, EpisodeStore
from torpor.store import episode_scopes


@torpor.workflow(name="epscope.report", version="1", task_type="report")
def reporting(run: torpor.Run, who: str) -> str:
    run.artifact("report", f"the report of {who}, kept by its episode")
    return who


def _cli(url: str, *args: str, code: int = 0) -> Any:
    out = CliRunner().invoke(app, ["--db", url, "memory", *args])
    assert out.exit_code == code, (out.output, out.exception)
    return out


def _tables(store: Any) -> list[str]:
    d = store.driver
    with d.read() as cur:
        if d.dialect == "sqlite":
            sql = "SELECT name FROM sqlite_master WHERE type = 'table' AND 0 = :z"
        else:
            sql = (
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema() AND 0 = :z"
            )
        return sorted(str(r[0]) for r in d.fetchall(cur, sql, {"z": 0}))


def _dump(store: Any) -> dict[str, str]:
    """Every table's rows as text (bytes as hex), by table."""
    d, out = store.driver, {}
    for t in _tables(store):
        with d.read() as cur:
            rows = d.fetchall(cur, f'SELECT * FROM "{t}" WHERE 0 = :z', {"z": 0})
        out[t] = " ".join(
            (v.hex() if isinstance(v, bytes | memoryview) else str(v))
            for r in rows
            for v in (bytes(x) if isinstance(x, memoryview) else x for x in r)
        )
    return out


def test_forget_leaves_nothing_of_the_scope(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with torpor.Runtime(store_url) as rt:
        for who in ("acme", "globex"):
            assert rt.run(reporting, who, run_id=f"{who}-r1", scope=who).outcome == "succeeded"
        sha = {w: rt.store.load(f"{w}-r1").artifacts["report"].sha256 for w in ("acme", "globex")}
        es = EpisodeStore(rt.store)
        (acme_ep,) = es.search("", scope="acme", task_type="report")
        # Another part of memory filed by scope, registered (torpor.store.episode_scopes): its
        # rows are forgotten with the episodes.
        monkeypatch.setattr(episode_scopes, "SCOPED_TABLES", [])
        episode_scopes.register_scoped_table("team_notes", "scope")
        with rt.store.driver.transaction() as cur:
            rt.store.driver.execute(
                cur, "CREATE TABLE team_notes (scope TEXT NOT NULL, fact TEXT NOT NULL)", {}
            )
            for who in ("acme", "acme", "globex"):
                rt.store.driver.execute(
                    cur,
                    "INSERT INTO team_notes VALUES (:s, :f)",
                    {"s": who, "f": f"decided for {who}"},
                )
        (globex_ep,) = es.search("", scope="globex", task_type="report")
        # Vectors for search by meaning (issue 32) are kept by episode id: forgotten too.
        vec = b"\x00\x00\x80\x3f"  # one float32, 1.0
        rt.store.write_episode_vectors(
            "m", [(acme_ep.episode_id, vec), (globex_ep.episode_id, vec)], now_ms=1
        )
        assert rt.store.delete_run("acme-r1")  # run retention: the run is not memory
        listed = json.loads(_cli(store_url, "ls", "--json").output)
        assert listed == [{"scope": "acme", "episodes": 1}, {"scope": "globex", "episodes": 1}]
        out = _cli(store_url, "forget", "--scope", "acme", "--yes").output
        removed = "removed 1 episodes, 1 artifact refs, 1 episode vectors, 2 team notes"
        assert removed in " ".join(out.split())
        retention.collect(rt.store, rt.artifacts, grace_s=0)
        dump = _dump(rt.store)
        for table, text in dump.items():
            for trace in ("acme", acme_ep.episode_id, sha["acme"]):
                assert trace not in text, f"{table} still holds {trace!r}"
        assert "globex" in dump["episodes"] and "globex" in dump["team_notes"]
        assert globex_ep.episode_id in dump["episode_vectors"]
        assert not rt.artifacts.exists(sha["acme"]) and rt.artifacts.exists(sha["globex"])
        root = Path(rt.artifacts.root)
        held = [p.name for p in root.rglob("*") if p.is_file()]
        assert not any(sha["acme"] in n for n in held) and any(sha["globex"] in n for n in held)
        assert es.scopes() == {"globex": 1}
        assert "removed 0 episodes" in _cli(store_url, "forget", "--scope", "acme", "--yes").output


def test_ls_export_import_and_the_scope_refusal(store_url: str, tmp_path: Path) -> None:
    def ep(n: int, scope: str, text: str, claims: dict[str, str]) -> Episode:
        return Episode(
            f"x{n}:ended@{n}", f"x{n}", f"ended@{n}", scope, "ag", "deploy", "ended", "failed",
            f"run {n}: {text}", f"- {text}", n, 1_000_000 + n, claims=claims,
        )  # fmt: skip

    with torpor.Runtime(store_url) as rt:
        es = EpisodeStore(rt.store)
        assert not es.scopes_in_use()
        es.write([ep(0, "", "mirror sync in the empty scope", {})])
        assert not es.scopes_in_use()
        assert _cli(store_url, "search", "mirror").output.count("x0:ended@0") == 1
        first = ep(1, "acme", "the brisk mirror failed", {"mirror": "failed"})
        second = ep(2, "acme", "the brisk mirror works now", {"mirror": "succeeded"})
        assert es.bulk_import([first, second, ep(3, "globex", "mirror", {})], batch=2) == 3
        old = es.get(first.episode_id)
        assert (old.superseded_by, old.valid_until_ms) == (second.episode_id, 1_000_002)
        assert es.scopes_in_use()
        refused = _cli(store_url, "search", "mirror", code=1)
        assert "--scope SCOPE" in str(refused.exception) and "--all-scopes" in str(
            refused.exception
        )
        hits = json.loads(_cli(store_url, "search", "mirror", "--all-scopes", "--json").output)
        assert {h["scope"] for h in hits} == {"", "acme", "globex"}
        assert [h["episode_id"] for h in hits if h["scope"] == "acme"] == [second.episode_id]
        table = _cli(store_url, "ls", "--scope", "acme").output
        assert "x1:ended@1" in table and "x2:ended@2" in table and "by x2:ended@2" in table
        dump = tmp_path / "acme.jsonl"
        assert (
            "exported 2 episode(s)"
            in _cli(store_url, "export", "--scope", "acme", "-o", str(dump)).output
        )
        lines = [json.loads(x) for x in dump.read_text().splitlines()]
        assert [x["episode_id"] for x in lines] == [first.episode_id, second.episode_id]
        assert lines[0]["valid_until_ms"] == 1_000_002
        assert es.forget("acme") == {
            "episodes": 2, "artifact_refs": 0, "episode_vectors": 0, "ledger_conflicts": 0
        }  # fmt: skip
        assert "imported 2 new episode(s)" in _cli(store_url, "import", str(dump)).output
        assert "imported 0 new episode(s)" in _cli(store_url, "import", str(dump)).output
        back = list(es.iter_scope("acme", page=1))
        assert [(e.episode_id, e.superseded_by) for e in back] == [
            (first.episode_id, second.episode_id),
            (second.episode_id, None),
        ]
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"episode_id": "x"}\n')
        refused = _cli(store_url, "import", str(bad), code=1)
        assert f"{bad}:1: not an episode" in str(refused.exception)
