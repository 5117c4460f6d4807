"""Booleans are read with Ansible's `bool` filter everywhere (issue 22): an INI inventory gives
"no", "False" or "0" as strings, which Jinja takes for true. Every boolean the roles and the
playbook read is listed in playbooks/vars/safety.yml (provision_boolean_variables, the list the
verify side and the controller read too); every expression that reads one goes through `| bool`;
and walking each role with the INI strings selects exactly the tasks the real booleans select."""

import re

import pytest
import yaml
from ansible.errors import AnsibleError
from paths import COLLECTION, ROLES
from playrun import SAFETY_VARS
from walker import Walk

from provision.fleet.extravars import to_extravars
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve

BOOLEANS = yaml.safe_load(SAFETY_VARS.read_text())["provision_boolean_variables"]
ROLE_NAMES = sorted(p.name for p in ROLES.iterdir() if (p / "tasks" / "main.yml").is_file())
FALSE_STRINGS = ["no", "False", "0"]
TRUE_STRINGS = ["yes", "True", "1"]
EXPRESSION_KEYS = {"when", "changed_when", "failed_when", "that", "until"}
JINJA = re.compile(r"\{\{(.*?)\}\}|\{%(.*?)%\}", re.S)


def spec_booleans(role: str) -> set[str]:
    specs = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]
    return {k for k, v in specs["options"].items() if v.get("type") == "bool"}


def playbook_files():
    return sorted((COLLECTION / "playbooks").rglob("*.yml"))


def expressions(node, key=None):
    """Every Jinja expression in a YAML document: conditionals whole, other strings' {{ }} / {% %}."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from expressions(v, k)
    elif isinstance(node, list):
        for v in node:
            yield from expressions(v, key)
    elif isinstance(node, str):
        if key in EXPRESSION_KEYS:
            yield node
        yield from (a or b for a, b in JINJA.findall(node))


def unquoted(expression: str) -> str:
    """The expression without its string literals (a name in quotes is not a read of the variable)."""
    return re.sub(r"'[^']*'|\"[^\"]*\"", "''", expression)


def test_the_list_is_every_boolean_the_roles_and_the_playbook_read():
    declared = set().union(*(spec_booleans(r) for r in ROLE_NAMES))
    read_as_bool = set()
    for path in playbook_files():
        for expr in expressions(yaml.safe_load(path.read_text())):
            read_as_bool |= set(re.findall(r"\b(\w+)\s*(?:\|\s*default\([^()]*\)\s*)?\|\s*bool\b", unquoted(expr)))
    assert set(BOOLEANS) == declared | read_as_bool
    assert sorted(BOOLEANS) == BOOLEANS


def bool_reads_without_the_filter():
    found = []
    files = [*playbook_files(), *ROLES.glob("*/*/*.yml")]
    for path in files:
        if path.parent.name == "meta":
            continue
        for expr in expressions(yaml.safe_load(path.read_text())):
            text = unquoted(expr)
            for name in BOOLEANS:
                for m in re.finditer(rf"(?<![\w.]){name}\b", text):
                    rest = text[m.end() :]
                    if not re.match(r"\s*(?:\|\s*default\([^()]*\)\s*)?\|\s*bool\b", rest):
                        found.append(f"{path.relative_to(ROLES.parent)}: {name} in {expr.strip()[:120]!r}")
    for template in ROLES.glob("*/templates/*.j2"):
        for expr in JINJA.findall(template.read_text()):
            text = unquoted("".join(expr))
            for name in BOOLEANS:
                if re.search(rf"(?<![\w.]){name}\b(?!\s*(?:\|\s*default\([^()]*\)\s*)?\|\s*bool\b)", text):
                    found.append(f"{template.name}: {name}")
    return found


def test_every_read_of_a_boolean_goes_through_the_bool_filter():
    """Before: mig_allow_reset's default passed provision_allow_disruption on unfiltered."""
    assert bool_reads_without_the_filter() == []


@pytest.fixture(scope="module", params=["ubuntu22.04", "rocky9"])
def plan_vars(request, fixture_matrix):
    return request.param, to_extravars(resolve(fixture_matrix, PlanRequest(os=request.param, gpu="b200")))


MIG = {
    "provision_mig_enabled": True,
    "provision_mig_layout": [{"profile": "1g.23gb", "profile_id": 19, "placement": 0}],
    "provision_mig_config_name": "b200-1g",
}


def walked(role, os_id, extravars, name, value):
    """The selected tasks, with the rendered arguments of those that mention the variable."""
    overrides = {**(MIG if role == "mig" else {}), name: value}
    walk = Walk(role, os_id, extravars, overrides).run()
    out = []
    for task in walk.selected:
        args = None
        if name in str(task.get("args")):
            try:
                args = walk.args(task["name"])
            except AnsibleError:
                args = "depends on a registered result"
        out.append((task["file"], task["name"], repr(args)))
    return out


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_ini_strings_select_what_the_booleans_select(role, plan_vars):
    os_id, extravars = plan_vars
    for name in sorted(spec_booleans(role)):
        no, yes = (walked(role, os_id, extravars, name, value) for value in (False, True))
        for text in FALSE_STRINGS:
            assert walked(role, os_id, extravars, name, text) == no, (role, name, text)
        for text in TRUE_STRINGS:
            assert walked(role, os_id, extravars, name, text) == yes, (role, name, text)
