"""provision ci github: a valid workflow that builds exactly the plans given."""

import yaml


def test_workflow_covers_exactly_the_plans(cli, tmp_path):
    plans = tmp_path / "plans"
    plans.mkdir()
    for name, args in (
        ("a", ["--os", "rocky9", "--gpu", "a100-pcie", "--framework", "pytorch==2.5.1"]),
        ("b", ["--os", "ubuntu22.04", "--gpu", "h100-sxm", "--framework", "tensorflow==2.15.0"]),
        ("c", ["--os", "ubuntu22.04", "--gpu", "l4"]),
    ):
        assert cli("plan", *args, "--lock", str(plans / f"{name}.lock.json"), "--format", "json").code == 0
    out = tmp_path / ".github" / "workflows" / "images.yml"
    r = cli("ci", "github", "--plans", str(plans), "--out", str(out))
    assert r.code == 0, r
    doc = yaml.safe_load(out.read_text())
    on = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on` key as True
    assert "workflow_dispatch" in on
    job = doc["jobs"]["build"]
    include = job["strategy"]["matrix"]["include"]
    assert sorted(i["plan"] for i in include) == ["plans/a.lock.json", "plans/b.lock.json", "plans/c.lock.json"]
    assert {i["variant"] for i in include} == {"pytorch", "tensorflow", "base"}
    steps = {s["name"]: s for s in job["steps"]}
    assert steps["Install provision (pinned)"]["run"].endswith("'provision==0.1.0'")
    assert 'provision build --plan "${{ matrix.plan }}"' in steps["Build the image"]["run"]
    # one plan only
    r = cli("ci", "github", "--plan", str(plans / "a.lock.json"), "--out", str(tmp_path / "one.yml"), "--no-push")
    one = yaml.safe_load((tmp_path / "one.yml").read_text())
    assert len(one["jobs"]["build"]["strategy"]["matrix"]["include"]) == 1
    assert "--push" not in yaml.safe_dump(one)


def test_ci_refuses_non_plans(cli, tmp_path):
    bad = tmp_path / "x.lock.json"
    bad.write_text("{}")
    r = cli("ci", "github", "--plan", str(bad), "--out", str(tmp_path / "w.yml"))
    assert r.code == 2
    assert "is not a provision plan" in r.err
    r = cli("ci", "github", "--plans", str(tmp_path / "empty"), "--out", str(tmp_path / "w.yml"))
    assert r.code == 2
