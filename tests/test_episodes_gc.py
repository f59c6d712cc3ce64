"""Episodes and garbage collection, on both backends: an episode names the artifacts of the run
it came from (``refs["artifacts"]``) and outlives that run, so it keeps them alive — recorded in
``blob_refs`` under ``episode:<id>`` in the transaction that writes it, deleted in the one that
prunes it. Once the run is deleted by retention, a gc pass past the grace period keeps an
artifact a kept episode names; after ``torpor memory prune`` removes the episode, the next pass
collects it."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import torpor
from torpor import retention
from torpor.cli import app
from torpor.episodes import EpisodeStore
from torpor.errors import ConfigError


@torpor.workflow(name="epgc.report", version="1", task_type="report")
def reporting(run: torpor.Run, seed: int) -> int:
    run.artifact("report", f"the quarterly report, seed {seed}")
    return seed


def _episode_refs(store: Any) -> list[tuple[str, str]]:
    with store.driver.read() as cur:
        rows = store.driver.fetchall(
            cur, "SELECT run_id, kind FROM blob_refs WHERE run_id LIKE 'episode:%'", {}
        )
    return sorted((str(r[0]), str(r[1])) for r in rows)


def test_an_artifact_an_episode_names_outlives_its_run(store_url: str) -> None:
    with torpor.Runtime(store_url) as rt:
        assert rt.run(reporting, 1, run_id="r1", scope="acme").outcome == "succeeded"
        sha = rt.store.load("r1").artifacts["report"].sha256
        es = EpisodeStore(rt.store)
        (ended,) = es.search("", scope="acme", task_type="report")
        assert ended.refs["artifacts"] == [sha]
        assert _episode_refs(rt.store) == [(f"episode:{ended.episode_id}", "artifact")]
        # Writing the episode again (a second capture, a concurrent writer) changes nothing.
        assert es.write([ended]) == []
        assert es.capture("r1") == []
        assert len(_episode_refs(rt.store)) == 1
        bad = dataclasses.replace(ended, boundary="other", refs={"artifacts": ["report.txt"]})
        with pytest.raises(ConfigError, match=r"refs\['artifacts'\] holds 'report.txt'"):
            es.write([bad])
        assert es.count() == 1

        retention.set_policy(rt.store, "epgc.report", keep_last=0)
        dry = retention.collect(rt.store, rt.artifacts, dry_run=True, grace_s=0)
        assert dry.runs == ["r1"] and dry.artifacts == 0
        rep = retention.collect(rt.store, rt.artifacts, grace_s=0)
        assert rep.runs == ["r1"] and rep.artifacts == 0
        assert any(line.startswith("episodes:") for line in rep.others), rep.others
        assert rt.artifacts.exists(sha)
        # Another pass: still kept, for as long as the episode is.
        assert retention.collect(rt.store, rt.artifacts, grace_s=0).artifacts == 0
        assert rt.artifacts.get(sha) == b"the quarterly report, seed 1"

        out = CliRunner().invoke(
            app, ["--db", store_url, "memory", "prune", "--older-than", "2999-01-01"]
        )
        assert out.exit_code == 0, out.output
        assert es.count() == 0 and _episode_refs(rt.store) == []
        rep = retention.collect(rt.store, rt.artifacts, grace_s=0)
        assert rep.artifacts == 1 and not rt.artifacts.exists(sha)


def test_a_shared_artifact_stays_while_any_episode_names_it(store_url: str) -> None:
    """Two runs make the same artifact (one blob); pruning one run's episode keeps it for the
    other's; the gc pass deletes the references of an episode gone another way (no row)."""
    with torpor.Runtime(store_url) as rt:
        for rid in ("a", "b"):
            assert rt.run(reporting, 7, run_id=rid).outcome == "succeeded"
        sha = rt.store.load("a").artifacts["report"].sha256
        retention.set_policy(rt.store, "epgc.report", keep_last=0)
        assert sorted(retention.collect(rt.store, rt.artifacts, grace_s=0).runs) == ["a", "b"]
        es = EpisodeStore(rt.store)
        first, second = sorted(es.search("", scope=""), key=lambda e: e.run_id)
        with rt.store.driver.transaction() as cur:  # as if deleted by hand, refs left behind
            rt.store.driver.execute(
                cur, "DELETE FROM episodes WHERE episode_id = :e", {"e": first.episode_id}
            )
        rep = retention.collect(rt.store, rt.artifacts, grace_s=0)
        assert rep.artifacts == 0 and rt.artifacts.exists(sha)
        assert _episode_refs(rt.store) == [(f"episode:{second.episode_id}", "artifact")]
        assert "1 reference(s) of deleted episodes dropped" in " ".join(rep.others)
        assert es.prune(before_ms=rt.store.now_ms() + 1000) == 1
        assert retention.collect(rt.store, rt.artifacts, grace_s=0).artifacts == 1


@pytest.mark.proc
def test_retention_and_workers_load_episodes_only_when_a_pass_runs(tmp_path: Path) -> None:
    code = (
        "import sys, torpor, torpor.retention, torpor.worker\n"
        "print('torpor.episodes' in sys.modules)\n"
        f"s = torpor.open_store('sqlite:///{tmp_path}/t.db')\n"
        "torpor.retention.collect(s)\n"
        "print('torpor.episodes' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
