"""The safety guards hold whatever an inventory says (issue 22): the check play of provision.gpu.site
refuses a host whose switches are not booleans, whose deadlines and limits are 0, negative or out of
bounds, or whose batch size is 0, before any host changes; the roles refuse their own numbers again.
playbooks/vars/safety.yml lists every switch and bound in one place (provision apply reads it)."""

import re

import pytest
import yaml
from paths import ROLES, SITE
from playrun import SAFETY_VARS, local_hosts, run_play, site_plays
from roleeval import assert_result

SAFETY = yaml.safe_load(SAFETY_VARS.read_text())
SWITCHES = SAFETY["provision_safety_switches"]
BOUNDS = SAFETY["provision_safety_bounds"]
GUARD = "Check the run's guards (booleans, deadlines and limits, batch size, host name)."


def check_play_guards():
    check = site_plays()[0]
    assert check["vars_files"][-1] == "vars/safety.yml"
    tasks = [t for t in check["tasks"] if t["name"] == GUARD]
    return [{"name": "check", "hosts": "all", "gather_facts": False, "vars_files": [str(SAFETY_VARS)], "tasks": tasks}]


# Each host carries one hostile value (as an inventory would); `fine` carries none and INI-style
# strings that are real booleans.
HOSTS = {
    "fine": {"preflight_check_gpu_processes": "True", "provision_health_gate": "yes", "mig_allow_reset": "0"},
    "ini-maybe": {"provision_health_gate": "maybe"},
    "gate-y": {"provision_health_gate": "y"},  # AnsibleModule reads y as true, the bool filter as false
    "hold-n": {"nvidia_driver_hold": "n"},  # any boolean, not only the switches
    "task-timeout-0": {"provision_task_timeout": 0},
    "task-timeout-neg": {"provision_task_timeout": -5},
    "drain-timeout-0": {"provision_drain_timeout": "0"},  # INI gives strings
    "lock-ttl-0": {"provision_lock_ttl": 0},
    "reboot-timeout-0": {"nvidia_driver_reboot_timeout": 0},
    "free-mb-0": {"preflight_min_free_mb": 0},
    "fail-percent-101": {"provision_max_fail_percentage": 101},
    "timeout-text": {"provision_task_timeout": "1800s"},
    "timeout-float": {"provision_task_timeout": 1800.5},
    "serial-0": {"provision_serial": 0},
    "serial-0pct": {"provision_serial": "0%"},
    "serial-list": {"provision_serial": [1, 0]},
    "serial-fine": {"provision_serial": ["1", "50%", 10]},
}
REFUSED = {
    "ini-maybe": "provision_health_gate=maybe is not a boolean",
    "gate-y": "provision_health_gate=y is not a boolean (true/false, yes/no, on/off, 1/0) (a changed host",
    "hold-n": "nvidia_driver_hold=n is not a boolean (true/false, yes/no, on/off, 1/0)",
    "task-timeout-0": "provision_task_timeout=0 is refused: it must be an integer from 30 to 86400 seconds",
    "task-timeout-neg": "provision_task_timeout=-5 is refused",
    "drain-timeout-0": "provision_drain_timeout=0 is refused: it must be an integer from 10 to 86400",
    "lock-ttl-0": "provision_lock_ttl=0 is refused: it must be an integer from 600 to 604800 seconds",
    "reboot-timeout-0": "nvidia_driver_reboot_timeout=0 is refused",
    "free-mb-0": "preflight_min_free_mb=0 is refused: it must be an integer from 1 to 16777216 MiB",
    "fail-percent-101": "provision_max_fail_percentage=101 is refused",
    "timeout-text": "provision_task_timeout=1800s is refused",
    "timeout-float": "provision_task_timeout=1800.5 is refused",
    "serial-0": "provision_serial=0 is refused",
    "serial-0pct": "provision_serial=0% is refused",
    "serial-list": "provision_serial=[1, 0] is refused",
}


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    return run_play(tmp_path_factory.mktemp("guards"), check_play_guards(), local_hosts(HOSTS))


def failure(run, host):
    failed = [r for r in run.results if r["host"] == host and r["status"] == "failed"]
    return failed[0] if failed else None


@pytest.mark.parametrize("host", sorted(REFUSED))
def test_the_check_play_refuses_a_guard_switched_off_or_a_zero_deadline(guarded, host):
    got = failure(guarded, host)
    assert got, f"{host} passed the guards"
    assert got["task"] == GUARD
    assert REFUSED[host] in got["result"]["msg"]


def test_every_problem_of_a_host_is_named_at_once(tmp_path):
    hosts = {"many": {"provision_task_timeout": 0, "provision_lock_ttl": 0, "provision_health_gate": "maybe"}}
    run = run_play(tmp_path, check_play_guards(), local_hosts(hosts))
    problems = failure(run, "many")["result"]["msg"].split("; ")
    assert [p.split("=")[0] for p in problems] == [
        "provision_health_gate",
        "provision_task_timeout",
        "provision_lock_ttl",
    ]


@pytest.mark.parametrize("host", ["fine", "serial-fine"])
def test_safe_values_pass(guarded, host):
    assert failure(guarded, host) is None
    assert guarded.of(host, GUARD)["status"] == "skipped", "a host that passes skips the check"


def test_the_guards_run_first_and_under_every_tag_selection():
    check = site_plays()[0]
    names = [t["name"] for t in check["tasks"]]
    assert names.index(GUARD) < names.index("Compare the host with the state recorded by the last run.")
    assert check["tasks"][names.index(GUARD)]["tags"] == ["always"]


# ---------------------------------------------------------------------------------- one list


def test_every_switch_is_read_as_a_boolean_where_it_is_used():
    texts = {p: p.read_text() for p in [SITE, *ROLES.glob("*/*/*.yml")]}
    for name, spec in SWITCHES.items():
        assert isinstance(spec["safe"], bool), name
        assert spec["guard"], name
        uses = [p for p, t in texts.items() if re.search(rf"\b{name}\b(?!:)", t) and "argument_specs" not in p.name]
        assert uses, f"{name} is listed but nothing reads it"
        if spec["role"] != "site":
            options = yaml.safe_load((ROLES / spec["role"] / "meta" / "argument_specs.yml").read_text())
            assert options["argument_specs"]["main"]["options"][name]["type"] == "bool", name


def test_every_bound_matches_the_default_and_the_role_that_enforces_it():
    site = SITE.read_text()
    for name, spec in BOUNDS.items():
        assert spec["min"] <= spec["default"] <= spec["max"], name
        assert spec["min"] >= 0, name
        if spec["role"] == "site":
            # the playbook's default (`| default(N)`) is the one listed
            defaults = set(re.findall(rf"{name} \| default\((\d+)\)", site))
            assert defaults <= {str(spec["default"])}, (name, defaults)
        else:
            role_defaults = yaml.safe_load((ROLES / spec["role"] / "defaults" / "main.yml").read_text())
            assert role_defaults[name] == spec["default"], name


def test_the_controller_bounds_agree_with_the_list():
    from provision.fleet.apply import MAX_TASK_TIMEOUT, MIN_TASK_TIMEOUT

    assert (BOUNDS["provision_task_timeout"]["min"], BOUNDS["provision_task_timeout"]["max"]) == (
        MIN_TASK_TIMEOUT,
        MAX_TASK_TIMEOUT,
    )


def test_the_serial_pattern_refuses_zero_and_accepts_batches():
    pattern = SAFETY["provision_serial_pattern"]
    for bad in ("0", "0%", "00", "101%", "-1", "1%%", "20 %", "5\n"):
        assert not re.match(pattern, bad), bad
    for good in ("1", "7", "1%", "20%", "100%", "250"):
        assert re.match(pattern, good), good


# ---------------------------------------------------------------------------------- the roles' own checks


def role_assert_holds(role: str, task_name: str, **values) -> bool:
    return assert_result(role, task_name, **values)[0]


ROLE_CHECKS = {
    "nvidia_driver_reboot_timeout": ("nvidia_driver", "Check the reboot deadline."),
    "preflight_min_free_mb": ("preflight", "Check the role's limits."),
}


@pytest.mark.parametrize("name", sorted(ROLE_CHECKS))
def test_each_role_refuses_its_numbers_out_of_the_listed_bounds(name):
    role, task = ROLE_CHECKS[name]
    low, high = BOUNDS[name]["min"], BOUNDS[name]["max"]
    for value in (low, high, str(low), BOUNDS[name]["default"]):
        assert role_assert_holds(role, task, **{name: value}), (name, value)
    for value in (0, -1, low - 1, high + 1, "0", "ten", "60.5", ""):
        assert not role_assert_holds(role, task, **{name: value}), (name, value)


def test_every_role_bound_is_checked_by_its_role():
    assert {n for n, s in BOUNDS.items() if s["role"] != "site"} == set(ROLE_CHECKS)
