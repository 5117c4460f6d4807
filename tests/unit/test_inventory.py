"""Inventories, fleet files and the checks before a run (no host is touched)."""

import json

import pytest
import yaml

from provision.errors import InputError
from provision.fleet.inventory import (
    check_group_name,
    check_inventory,
    load_fleet,
    load_inventory,
    read_inventory,
    ungrouped_hosts,
)

# a fixture catalogue id: the commands below read tests/fixtures/compat, not today's compat/
GPU = "a100-pcie-80gb"

pytestmark = pytest.mark.usefixtures("on_fixture_catalogue")


def write_inventory(tmp_path, doc, name="inv.yml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return str(path)


GOOD = {
    "all": {
        "children": {
            "a100": {
                "hosts": {
                    "n1": {"ansible_host": "127.0.0.1", "ansible_port": 2201},
                    "n2": {"ansible_host": "127.0.0.1", "ansible_port": 2202},
                }
            },
            "h100": {"hosts": {"n3": {"ansible_host": "127.0.0.1", "ansible_port": 2203}}},
        }
    }
}


def test_load_yaml_and_ini(tmp_path):
    inv = load_inventory(write_inventory(tmp_path, GOOD))
    assert set(inv.hosts) == {"n1", "n2", "n3"}
    assert inv.groups["a100"] == {"n1", "n2"}
    assert inv.groups["all"] >= {"n1", "n2", "n3"}
    ini = tmp_path / "hosts.ini"
    ini.write_text("[gpu]\nnode1 ansible_host=127.0.0.1 ansible_port=2222\n")
    assert load_inventory(str(ini)).hosts["node1"]["ansible_port"] == 2222


@pytest.mark.parametrize(
    ("content", "text"),
    [
        (None, "does not exist"),
        ("all: [not, a, mapping", "cannot be parsed"),
        ("all:\n  hosts: {}\n", "has no hosts"),
    ],
)
def test_broken_inventories(tmp_path, content, text):
    path = tmp_path / "broken.yml"
    if content is not None:
        path.write_text(content)
    with pytest.raises(InputError, match=text) as info:
        load_inventory(str(path))
    assert info.value.exit_code == 2
    assert info.value.hint


def test_fleet_coverage(tmp_path):
    inv = load_inventory(write_inventory(tmp_path, GOOD))
    assert check_inventory(inv, ["a100", "h100"]) == []
    problems = check_inventory(inv, ["a100"])
    assert [p.host for p in problems] == ["n3"]
    assert "no planned group" in problems[0].text
    doubled = check_inventory(inv, ["a100", "h100", "all"])
    assert all("more than one planned group" in p.text for p in doubled)
    assert len(doubled) == 3
    missing = check_inventory(inv, ["a100", "h100", "b200"])
    assert any("plans group 'b200'" in p.text for p in missing)


@pytest.mark.parametrize("group", ["provision_to_change", "provision_converged"])
def test_an_inventory_group_named_as_apply_sorts_hosts_is_refused(tmp_path, group):
    doc = json.loads(json.dumps(GOOD))
    doc["all"]["children"][group] = {"hosts": {"n1": None}}  # would put n1 in the rollout unchecked
    problems = check_inventory(load_inventory(write_inventory(tmp_path, doc)), ["a100", "h100"])
    assert [(p.host, p.text) for p in problems] == [
        (None, f"the inventory has a group {group!r}: provision apply sorts hosts into it; rename the group")
    ]


@pytest.mark.parametrize("group", ["provision_to_change", "provision_converged"])
def test_a_fleet_group_named_as_apply_sorts_hosts_is_refused(group):
    with pytest.raises(InputError, match=f"fleet group '{group}' is a name provision apply sorts hosts into"):
        check_group_name(group)


def test_connection_variables(tmp_path):
    doc = {
        "all": {
            "hosts": {
                "p": {"ansible_host": "127.0.0.1", "ansible_port": 70000},
                "q": {"ansible_host": "127.0.0.1", "ansible_port": 2202, "ansible_connection": "telnet"},
                "r": {"ansible_host": "127.0.0.1", "ansible_port": 2202},
                "s": {"ansible_host": "bad host", "ansible_ssh_private_key_file": str(tmp_path / "nokey")},
            }
        }
    }
    path = write_inventory(tmp_path, doc)
    problems = {(p.host, p.text.split(" ")[0]) for p in check_inventory(read_inventory(path), None)}
    assert ("p", "ansible_port") in problems
    assert ("q", "ansible_connection") in problems
    assert ("r", "same") in problems
    assert ("s", "ansible_host") in problems
    assert ("s", "ansible_ssh_private_key_file") in problems
    with pytest.raises(InputError, match=r"^p: ansible_port 70000 is not a TCP port \(1-65535\) \(and 2 more\)$"):
        load_inventory(path)  # what apply, verify and doctor read: refused, one line


@pytest.mark.parametrize(
    ("doc", "text"),
    [
        ("not: [a fleet", "not valid YAML"),
        ({"groups": {}}, "has no groups"),
        ({"groups": {"a100": "rocky9"}}, "must map to a plan request"),
        ({"groups": {"a100": {"os": "rocky9"}}}, "needs os and gpu"),
        ({"groups": {"a100": {"os": "rocky9", "gpu": GPU, "colour": "red"}}}, "unknown keys ['colour']"),
        ({"groups": {"a100": {"lock": "x.json", "os": "rocky9"}}}, "mixes lock with request fields"),
    ],
)
def test_bad_fleet_files(tmp_path, doc, text):
    path = tmp_path / "fleet.yaml"
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    with pytest.raises(InputError, match=__import__("re").escape(text)):
        load_fleet(str(path))


def test_fleet_lock_paths_are_relative_to_the_file(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump({"groups": {"a": {"lock": "a.lock.json"}, "b": {"os": "rocky9", "gpu": "b200"}}}))
    groups = load_fleet(str(path))
    assert groups[0].lock == str(tmp_path / "a.lock.json")
    assert groups[1].request == {"os": "rocky9", "gpu": "b200"}


# -- the CLI refuses bad input before any host is touched (exit 2) -----------------------------
def test_inventory_check_cli(cli, tmp_path):
    inv = write_inventory(tmp_path, GOOD)
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        yaml.safe_dump({"groups": {"a100": {"os": "rocky9", "gpu": GPU}, "h100": {"os": "rocky9", "gpu": "h100-sxm"}}})
    )
    r = cli("inventory", "check", "-i", inv, "--fleet", str(fleet))
    assert r.code == 0, r
    assert "ok:" in r.out, r
    fleet.write_text(yaml.safe_dump({"groups": {"a100": {"os": "rocky9", "gpu": GPU}}}))
    r = cli("inventory", "check", "-i", inv, "--fleet", str(fleet))
    assert r.code == 2
    assert "error: n3: is in no planned group" in r.err
    assert "hint:" in r.err


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--plan", "PLAN", "--fleet", "FLEET"], "exactly one of --plan and --fleet"),
        ([], "exactly one of --plan and --fleet"),
        (["--plan", "NOTAPLAN"], "is not a provision plan"),
        (["--fleet", "UNPLANNED"], "is in no planned group"),
        (["--fleet", "BADGPU"], "fleet group 'a100': unknown GPU 'a100pcie'"),
        (["--fleet", "FLEET", "--serial", "zero"], "--serial 'zero' is not a host count"),
        (["--fleet", "FLEET", "--max-fail-percentage", "120"], "between 0 and 100"),
        (
            ["--fleet", "FLEET", "-e", "provision_driver_version=1"],
            "-e provision_driver_version is the plan's or apply's",
        ),
    ],
)
def test_apply_refuses_bad_input_before_touching_hosts(cli, tmp_path, args, text):
    inv = write_inventory(tmp_path, GOOD)
    plan = tmp_path / "plan.json"
    assert cli("plan", "--os", "rocky9", "--gpu", GPU, "--lock", str(plan), "--format", "json").code == 0
    (tmp_path / "notaplan.json").write_text(json.dumps({"hello": "world"}))
    fleets = {
        "FLEET": {"groups": {"a100": {"os": "rocky9", "gpu": GPU}, "h100": {"os": "rocky9", "gpu": "h100-sxm"}}},
        "UNPLANNED": {"groups": {"a100": {"os": "rocky9", "gpu": GPU}}},
        "BADGPU": {
            "groups": {"a100": {"os": "rocky9", "gpu": "a100pcie"}, "h100": {"os": "rocky9", "gpu": "h100-sxm"}}
        },
    }
    for name, doc in fleets.items():
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(doc))
    subst = {
        "PLAN": str(plan),
        "NOTAPLAN": str(tmp_path / "notaplan.json"),
        **{k: str(tmp_path / f"{k}.yaml") for k in fleets},
    }
    run_dir = tmp_path / "run"
    r = cli("apply", "-i", inv, *[subst.get(a, a) for a in args], "--run-dir", str(run_dir))
    assert r.code == 2, r
    assert text in r.err
    assert "hint:" in r.err
    assert "Traceback" not in r.err
    assert not (run_dir / "artifacts").exists(), "nothing ran"


# -- inventory check runs exactly apply's validation -----------------------------------------
UNGROUPED = {
    "all": {
        "hosts": {
            "n1": {"ansible_host": "127.0.0.1", "ansible_port": 2201},
            "n2": {"ansible_host": "127.0.0.1", "ansible_port": 2202},
        }
    }
}


def test_inventory_check_refuses_an_ungrouped_inventory_without_a_fleet(cli, tmp_path):
    r = cli("inventory", "check", "-i", write_inventory(tmp_path, UNGROUPED))
    assert r.code == 2, r
    assert "ok" not in r.out
    assert "error: every host (2) is ungrouped" in r.err
    assert "hint:" in r.err
    assert "--fleet FILE" in r.err
    assert "--plan FILE" in r.err


def test_inventory_check_without_a_fleet_says_what_it_did_not_check(cli, tmp_path):
    r = cli("inventory", "check", "-i", write_inventory(tmp_path, GOOD))
    assert r.code == 0, r
    assert "ok:" not in r.out
    assert "the plans were not checked" in r.out


def test_ungrouped_hosts(tmp_path):
    doc = {"all": {"hosts": {"lone": {"ansible_port": 2209}}, "children": GOOD["all"]["children"]}}
    inv = load_inventory(write_inventory(tmp_path, doc))
    assert ungrouped_hosts(inv) == ["lone"]
    assert ungrouped_hosts(load_inventory(write_inventory(tmp_path, UNGROUPED))) == ["n1", "n2"]


BOTH = {"a100": {"os": "rocky9", "gpu": GPU}, "h100": {"os": "rocky9", "gpu": "h100-sxm"}}


@pytest.mark.parametrize(
    ("fleet", "text"),
    [
        ({**BOTH, "a100": {"os": "rocky9", "gpu": "a100pcie"}}, "fleet group 'a100': unknown GPU 'a100pcie'"),
        ({**BOTH, "a100": {"lock": "missing.lock.json"}}, "fleet group 'a100': cannot read plan"),
        ({**BOTH, "a100": {"lock": "notaplan.json"}}, "fleet group 'a100': 'NOTAPLAN' is not a provision plan"),
        ({**BOTH, "a100": {"os": "rocky9", "gpu": GPU, "cuda": "99.1"}}, "CUDA 99.1 is not in the catalogue"),
        ({**BOTH, "a 100": dict(BOTH["a100"])}, "fleet group 'a 100' is not a usable group name"),
        ({"a100": BOTH["a100"]}, "n3: is in no planned group"),
        ({**BOTH, "b200": {"os": "rocky9", "gpu": "b200"}}, "plans group 'b200', which the inventory does not have"),
    ],
    ids=["unknown-gpu", "missing-lock", "not-a-plan", "bad-pin", "group-name", "unplanned", "missing-group"],
)
def test_inventory_check_refuses_what_apply_refuses(cli, tmp_path, fleet, text):
    """Each fleet apply refuses before touching a host, inventory check refuses too, with the same cause."""
    inv = write_inventory(tmp_path, GOOD)
    notaplan = tmp_path / "notaplan.json"
    notaplan.write_text(json.dumps({"hello": "world"}))
    text = text.replace("NOTAPLAN", str(notaplan))
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump({"groups": fleet}))
    check = cli("inventory", "check", "-i", inv, "--fleet", str(path))
    assert check.code == 2, check
    assert text in check.err, check
    assert "hint:" in check.err
    assert "Traceback" not in check.err
    assert "ok:" not in check.out
    run_dir = tmp_path / "run"
    apply = cli("apply", "-i", inv, "--fleet", str(path), "--run-dir", str(run_dir))
    assert apply.code == check.code, apply
    assert text in apply.err, apply
    assert not run_dir.exists()


def test_inventory_check_with_one_plan(cli, tmp_path):
    inv = write_inventory(tmp_path, UNGROUPED)
    plan = tmp_path / "plan.json"
    assert cli("plan", "--os", "rocky9", "--gpu", GPU, "--lock", str(plan), "--format", "json").code == 0
    r = cli("inventory", "check", "-i", inv, "--plan", str(plan))
    assert r.code == 0, r
    assert "ok: every check provision apply runs before it starts passed" in r.out
    assert f"plan all: {GPU} on rocky9" in r.out
    doc = json.loads(plan.read_text())
    doc["driver"]["version"] = "1.2.3"
    plan.write_text(json.dumps(doc))
    r = cli("inventory", "check", "-i", inv, "--plan", str(plan))
    assert r.code == 2, r
    assert "error:" in r.err
    assert "hint:" in r.err
    r = cli("inventory", "check", "-i", inv, "--plan", str(plan), "--fleet", str(plan))
    assert r.code == 2
    assert "exactly one of --plan and --fleet" in r.err
