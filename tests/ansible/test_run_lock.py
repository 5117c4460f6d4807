"""provision.gpu.run_lock: one apply at a time on a host, even when two runs race for the lock
(issue 22: two runs could both hold it, through an empty lock file or an expired lock's take-over)."""

import json
import os
import time

import modrun

RUN_A, RUN_B = "20261201T100000Z-aaaaaa", "20261201T100000Z-bbbbbb"


def take(path, run_id, **extra):
    return {"state": "acquired", "run_id": run_id, "controller": "ops-1", "path": str(path), **extra}


def give_back(path, run_id):
    return {"state": "released", "run_id": run_id, "path": str(path)}


def expired_lock(path, run_id="dead-run"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"run_id": run_id, "controller": "ops-9", "since": "2020-01-01T00:00:00+00:00",
                                "expires": "2020-01-01T04:00:00+00:00"}))  # fmt: skip


def holders(results):
    return [r.out["holder"]["run_id"] for r in results if not r.failed]


def test_two_runs_racing_for_an_expired_lock_one_takes_it(tmp_path):
    """Both read the expired lock before either replaces it (each read held open 0.5 s): before the
    fix both unlinked and re-created it and both went on to change the host."""
    lock = tmp_path / "provision" / "apply.lock"
    expired_lock(lock)
    results = modrun.race("run_lock", [take(lock, RUN_A), take(lock, RUN_B)], slow=("_read", 0.5))
    won = holders(results)
    assert len(won) == 1, [r.out for r in results]
    (lost,) = [r for r in results if r.failed]
    assert f"another provision apply holds this host: run {won[0]}" in lost.out["msg"]
    assert json.loads(lock.read_text())["run_id"] == won[0], "the lock names the run that got it"
    (winner,) = [r for r in results if not r.failed]
    assert winner.out["took_over"] == "dead-run"


def test_two_runs_racing_for_a_free_lock_one_takes_it(tmp_path):
    lock = tmp_path / "provision" / "apply.lock"
    for round_ in range(6):
        runs = [f"run-{round_}-{i}" for i in range(3)]
        results = modrun.race("run_lock", [take(lock, r) for r in runs])
        won = holders(results)
        assert len(won) == 1, (round_, [r.out for r in results])
        assert json.loads(lock.read_text())["run_id"] == won[0]
        assert modrun.run("run_lock", give_back(lock, won[0])).out["changed"] is True
        assert not lock.exists()


def test_a_lock_file_still_being_written_is_not_taken(tmp_path):
    """An empty lock file, as another taker leaves it between creating and writing it: held by an
    unknown run (until its mtime plus the ttl), never read as free or expired."""
    lock = tmp_path / "provision" / "apply.lock"
    lock.parent.mkdir()
    lock.write_text("")
    result = modrun.run("run_lock", take(lock, RUN_A))
    assert result.failed
    assert (
        "another provision apply holds this host: run an unknown run (the lock file is unreadable)" in result.out["msg"]
    )
    assert lock.read_text() == ""
    old = time.time() - 14400 - 60
    os.utime(lock, (old, old))  # left by a run that died mid-write, longer ago than the ttl
    result = modrun.run("run_lock", take(lock, RUN_A))
    assert not result.failed, result.out
    assert result.out["took_over"] == "unknown"
    assert json.loads(lock.read_text())["run_id"] == RUN_A


def test_a_symlinked_lock_is_not_followed_nor_its_target_written(tmp_path):
    lock = tmp_path / "provision" / "apply.lock"
    lock.parent.mkdir()
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    lock.symlink_to(target)
    result = modrun.run("run_lock", take(lock, RUN_A))
    assert result.failed
    assert "unknown run" in result.out["msg"]
    assert "keep me" not in json.dumps(result.out), "the target's content is never echoed"
    assert target.read_text() == "keep me\n"


def test_the_holder_retakes_its_own_lock_and_only_it_gives_it_back(tmp_path):
    lock = tmp_path / "provision" / "apply.lock"
    first = modrun.run("run_lock", take(lock, RUN_A))
    assert not first.failed
    assert first.out["changed"] is True
    again = modrun.run("run_lock", take(lock, RUN_A))
    assert not again.failed
    assert again.out["changed"] is False
    other = modrun.run("run_lock", take(lock, RUN_B))
    assert other.failed
    assert f"run {RUN_A} from ops-1" in other.out["msg"]
    assert modrun.run("run_lock", give_back(lock, RUN_B)).out["changed"] is False
    assert json.loads(lock.read_text())["run_id"] == RUN_A
    assert modrun.run("run_lock", give_back(lock, RUN_A)).out["changed"] is True
    assert not lock.exists()
    assert [p.name for p in lock.parent.iterdir()] == [], "no temporary file is left behind"


def test_a_ttl_under_a_minute_is_refused(tmp_path):
    """provision_lock_ttl=0 made every lock expired at once: any second run took the host over."""
    lock = tmp_path / "provision" / "apply.lock"
    for ttl in (0, -1, 59):
        result = modrun.run("run_lock", take(lock, RUN_A, ttl=ttl))
        assert result.failed
        assert f"ttl must be at least 60 seconds, not {ttl}" in result.out["msg"]
    assert not lock.exists()
