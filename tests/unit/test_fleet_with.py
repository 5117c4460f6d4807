"""Fleet files take `with:` (issue 24): a group's stack packages, as `provision plan --with` takes
them, held to the boundary when the file is read (a YAML list of at most 16 strings, each NAME or
NAME==VERSION: lower-case names, dotted versions, no spaces, no other operator, each package once;
an unquoted number refused with a hint to quote it), the names checked against compat/stacks.yaml
before any plan is resolved, and passed into PlanRequest(with_=...). Every command that reads a
fleet file (inventory check, apply, check, verify) refuses a bad entry alike, in one line, exit 2.
The real catalogue."""

import json

import pytest
import yaml
from support import COMPAT

from provision.errors import InputError
from provision.fleet.apply import load_plans
from provision.fleet.inventory import MAX_WITH, load_fleet

INVENTORY = {
    "all": {
        "children": {
            "train": {"hosts": {"n1": {"ansible_host": "127.0.0.1", "ansible_port": 2201}}},
            "serve": {"hosts": {"n2": {"ansible_host": "127.0.0.1", "ansible_port": 2202}}},
        }
    }
}
TRAIN = {"os": "ubuntu22.04", "gpu": "h100-sxm", "framework": "pytorch", "with": ["deepspeed", "onnxruntime"]}
SERVE = {"os": "ubuntu22.04", "gpu": "l4"}
FLEET = {"train": TRAIN, "serve": SERVE}


@pytest.fixture(autouse=True)
def _real_catalogue(monkeypatch):
    monkeypatch.setenv("PROVISION_COMPAT_DIR", str(COMPAT))


def write(tmp_path, groups, name="fleet.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return str(path)


def write_text(tmp_path, text, name="fleet.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def inventory(tmp_path):
    path = tmp_path / "inv.yml"
    path.write_text(yaml.safe_dump(INVENTORY))
    return str(path)


# -- load_fleet: the key ---------------------------------------------------------------------
def test_with_is_read_into_the_plan_request_in_the_order_given(tmp_path):
    listed = ["onnxruntime==1.20.1", "deepspeed", "torch-tensorrt==2.5.0"]
    train, serve = load_fleet(write(tmp_path, {**FLEET, "train": {**TRAIN, "with": listed}}))
    assert train.request == {
        "os": "ubuntu22.04",
        "gpu": "h100-sxm",
        "framework": "pytorch",
        "with_": ("onnxruntime==1.20.1", "deepspeed", "torch-tensorrt==2.5.0"),
    }
    assert "with_" not in serve.request  # no with: the request's default, ()


def test_the_groups_plans_carry_their_with(tmp_path, real_matrix):
    plans, groups = load_plans(None, write(tmp_path, FLEET), lambda: real_matrix)
    assert groups == ["train", "serve"]
    assert plans["train"].request.with_ == ("deepspeed", "onnxruntime")
    assert plans["serve"].request.with_ == ()


def test_a_deepspeed_group_gets_the_stack_on_a_devel_base_of_torchs_cuda(tmp_path, real_matrix):
    groups = {"train": {**TRAIN, "with": ["deepspeed"]}}
    plan = load_plans(None, write(tmp_path, groups), lambda: real_matrix)[0]["train"]
    assert [(p.id, p.role) for p in plan.stack] == [("deepspeed", "with")]
    assert plan.stack[0].needs_nvcc
    assert plan.base_image == plan.images["devel"]  # nvcc for DeepSpeed's just-in-time ops
    assert plan.framework.cuda == plan.cuda.version.rsplit(".", 1)[0]  # the devel image's CUDA is torch's
    assert plan.base_image.startswith(f"nvidia/cuda:{plan.cuda.version}-devel-")


def test_an_inference_group_plans_onnxruntime_as_its_framework(tmp_path, real_matrix):
    groups = {"serve": {"os": "ubuntu22.04", "gpu": "l4", "framework": "onnxruntime"}}
    plan = load_plans(None, write(tmp_path, groups), lambda: real_matrix)[0]["serve"]
    assert plan.framework is None  # no PyTorch
    assert [(p.id, p.role) for p in plan.stack] == [("onnxruntime", "framework")]


@pytest.mark.parametrize(
    ("group", "flags"),
    [
        (TRAIN, ["--framework", "pytorch", "--with", "deepspeed", "--with", "onnxruntime"]),
        (
            {"os": "ubuntu22.04", "gpu": "h100-sxm", "framework": "pytorch==2.5.1", "with": ["onnxruntime"]},
            ["--framework", "pytorch==2.5.1", "--with", "onnxruntime"],
        ),
        ({"os": "ubuntu22.04", "gpu": "l4", "framework": "onnxruntime"}, ["--framework", "onnxruntime"]),
    ],
    ids=["deepspeed-onnxruntime", "torch-2.5.1-onnxruntime", "inference"],
)
def test_a_group_gets_the_plan_provision_plan_gives(cli, tmp_path, real_matrix, group, flags):
    """The fleet's group and `provision plan` with the same flags: the same plan, digest included."""
    plan = load_plans(None, write(tmp_path, {"g": group}), lambda: real_matrix)[0]["g"]
    assert plan.stack
    r = cli("plan", "--os", group["os"], "--gpu", group["gpu"], *flags, "--format", "json")
    assert r.code == 0, r
    assert json.loads(r.out) == json.loads(json.dumps(plan.to_dict()))


# Hostile or malformed `with:` values, as a user (or an attacker editing the file) could write
# them: each refused when the file is read, naming the group and what is wrong.
HOSTILE = [
    (["deepspeed; rm -rf /"], "with entry 1 'deepspeed; rm -rf /' is not NAME or NAME==VERSION"),
    (["{{ lookup('pipe','id') }}"], "with entry 1 \"{{ lookup('pipe','id') }}\" is not NAME or NAME==VERSION"),
    (["deepspeed"] * 10_000, f"with lists 10000 entries, more than the {MAX_WITH} a stack can hold"),
    ({"deepspeed": "0.16.0"}, "with must be a list of stack packages, not {'deepspeed': '0.16.0'}"),
    ([{"deepspeed": "0.16.0"}], "with entry 1 is a mapping ({'deepspeed': '0.16.0'}), not NAME or NAME==VERSION"),
    ("deepspeed", "with must be a list of stack packages, not 'deepspeed'"),
    ([], "with must be a list of stack packages, not []"),
    (None, "with must be a list of stack packages, not None"),
    (["DeepSpeed"], "with entry 1 'DeepSpeed' is not NAME or NAME==VERSION"),
    (["deepspeed == 0.16.0"], "with entry 1 'deepspeed == 0.16.0' is not NAME or NAME==VERSION"),
    (["deepspeed>=0.16"], "with entry 1 'deepspeed>=0.16' is not NAME or NAME==VERSION"),
    (["deepspeed==0.16.*"], "with entry 1 'deepspeed==0.16.*' is not NAME or NAME==VERSION"),
    (["deepspeed==0.16.0,<1"], "with entry 1 'deepspeed==0.16.0,<1' is not NAME or NAME==VERSION"),
    (["deepspeed===0.16.0"], "with entry 1 'deepspeed===0.16.0' is not NAME or NAME==VERSION"),
    (["deepspeed[all]"], "with entry 1 'deepspeed[all]' is not NAME or NAME==VERSION"),
    (["deepspeed @ https://127.0.0.1/x.tar.gz"], "is not NAME or NAME==VERSION"),
    (["--index-url=https://127.0.0.1/simple"], "is not NAME or NAME==VERSION"),
    (["deepspeed\nonnxruntime"], "with entry 1 'deepspeed\\nonnxruntime' is not NAME or NAME==VERSION"),
    (["deepspeed\x00"], "with entry 1 'deepspeed\\x00' is not NAME or NAME==VERSION"),
    (["deepspeed\n"], "with entry 1 'deepspeed\\n' is not NAME or NAME==VERSION"),
    (["../../etc/passwd"], "is not NAME or NAME==VERSION"),
    (["a" * 200], "is not NAME or NAME==VERSION"),
    ([f"deepspeed=={'1.' * 40}1"], "is not NAME or NAME==VERSION"),
    ([True], "with entry 1 True is not NAME or NAME==VERSION"),
    ([None], "with entry 1 None is not NAME or NAME==VERSION"),
    ([["deepspeed"]], "with entry 1 ['deepspeed'] is not NAME or NAME==VERSION"),
    (["deepspeed", "deepspeed==0.16.0"], "with entry 2 names 'deepspeed' again (entry 1)"),
    (["onnxruntime==1.20.1", "onnxruntime==1.20.1"], "with entry 2 names 'onnxruntime' again (entry 1)"),
]


HOSTILE_IDS = [
    "shell", "jinja", "10k-list", "mapping", "mapping-entry", "string", "empty", "null", "upper-case", "spaces",
    "operator", "wildcard", "two-clauses", "arbitrary-equality", "extras", "url", "option", "newline", "nul",
    "trailing-newline", "path", "long-name", "long-version", "bool", "null-entry", "nested-list", "twice",
    "twice-pinned",
]  # fmt: skip


@pytest.mark.parametrize(("listed", "text"), HOSTILE, ids=HOSTILE_IDS)
def test_a_bad_with_is_refused_when_the_file_is_read(tmp_path, listed, text):
    with pytest.raises(InputError) as caught:
        load_fleet(write(tmp_path, {**FLEET, "train": {**TRAIN, "with": listed}}))
    message = caught.value.message
    assert message.startswith(f"fleet file {str(tmp_path / 'fleet.yaml')!r}: group 'train': ")
    assert text in message
    assert "\n" not in message
    assert len(message) < 400  # a 10,000-entry list is not echoed back
    assert caught.value.hint
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(
    ("listed", "shown"),
    [("[1.20]", "the float 1.2"), ("[deepspeed, 0.16]", "the float 0.16"), ("[12]", "the int 12")],
)
def test_an_unquoted_number_is_refused_with_the_hint_to_quote_it(tmp_path, listed, shown):
    path = write_text(tmp_path, f"groups:\n  train: {{os: ubuntu22.04, gpu: h100-sxm, with: {listed}}}\n")
    with pytest.raises(InputError) as caught:
        load_fleet(path)
    assert f"is read by YAML as {shown}, not NAME or NAME==VERSION" in caught.value.message
    assert caught.value.hint.startswith('quote it, and name the package: with: ["NAME==VERSION"]')


def test_an_unquoted_version_in_a_mapping_entry_is_refused_with_the_string_to_write(tmp_path):
    path = write_text(tmp_path, "groups:\n  train:\n    os: ubuntu22.04\n    gpu: h100-sxm\n    with:\n"
                      "      - deepspeed: 0.10\n")  # fmt: skip
    with pytest.raises(InputError) as caught:
        load_fleet(path)
    assert "with entry 1 is a mapping ({'deepspeed': 0.1}), not NAME or NAME==VERSION" in caught.value.message
    assert caught.value.hint == 'write each entry as one quoted string: with: ["deepspeed==VERSION"]'


def test_with_cannot_go_with_a_lock(tmp_path):
    with pytest.raises(InputError) as caught:
        load_fleet(write(tmp_path, {"g": {"lock": "a.lock.json", "with": ["deepspeed"]}}))
    assert "mixes lock with request fields (with)" in caught.value.message


@pytest.mark.parametrize(
    ("group", "text", "hint"),
    [
        (
            {"os": "ubuntu22.04", "gpu": "l4", "with": ["onnxruntime"]},
            "with adds stack packages to a framework, and the group names no framework",
            "add framework: pytorch",
        ),
        (
            {"os": "ubuntu22.04", "gpu": "l4", "framework": None, "with": ["onnxruntime"]},
            "with adds stack packages to a framework, and the group names no framework",
            "add framework: pytorch",
        ),
        (
            {**TRAIN, "host_only": True},
            "host_only plans no image, so with cannot apply",
            "drop with:, or drop host_only:",
        ),
    ],
    ids=["no-framework", "framework-null", "host-only"],
)
def test_with_needs_an_image_with_a_framework(tmp_path, group, text, hint):
    with pytest.raises(InputError) as caught:
        load_fleet(write(tmp_path, {"g": group}))
    assert caught.value.message.endswith(f"group 'g': {text}")
    assert caught.value.hint.startswith(hint)


def test_with_as_many_entries_as_allowed_is_read(tmp_path):
    listed = [f"p{n}" for n in range(MAX_WITH)]
    (group,) = load_fleet(write(tmp_path, {"g": {**TRAIN, "with": listed}}))
    assert group.request["with_"] == tuple(listed)
    with pytest.raises(InputError, match=f"with lists {MAX_WITH + 1} entries"):
        load_fleet(write(tmp_path, {"g": {**TRAIN, "with": [*listed, "q"]}}))


# -- the catalogue's names -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("listed", "text"),
    [
        (["deepspeeed"], "fleet group 'train': with names 'deepspeeed', which is not a stack package of the catalogue"),
        (["pytorch"], "fleet group 'train': with names 'pytorch', which is not a stack package of the catalogue"),
        (["onnxruntime", "onnxruntime-gpu==1.20.1"], "fleet group 'train': with names onnxruntime twice"),
    ],
    ids=["typo", "a-framework", "id-and-pip-name"],
)
def test_with_names_catalogued_stack_packages_once(tmp_path, real_matrix, listed, text):
    with pytest.raises(InputError) as caught:
        load_plans(None, write(tmp_path, {**FLEET, "train": {**TRAIN, "with": listed}}), lambda: real_matrix)
    assert text in caught.value.message
    ids = [p.id for p in real_matrix.stacks]
    assert {"onnxruntime", "tensorrt", "torch-tensorrt", "deepspeed", "megatron-core", "transformer-engine"} <= set(ids)
    if "twice" not in text:
        assert caught.value.hint == f"stack packages: {', '.join(ids)} (list: provision matrix stacks)"


# -- the commands ----------------------------------------------------------------------------
def test_inventory_check_and_check_read_with(cli, tmp_path):
    fleet = write(tmp_path, FLEET)
    r = cli("inventory", "check", "-i", inventory(tmp_path), "--fleet", fleet)
    assert r.code == 0, r
    assert "pass  plans: 2 group plan(s) resolve" in r.out
    image = tmp_path / "img.lock.json"
    assert cli("plan", "--os", "ubuntu22.04", "--gpu", "h100-sxm", "--lock", str(image), "--format", "json").code == 0
    r = cli("check", "--fleet", fleet, "--images", str(image))
    assert r.code == 0, r


REFUSED = [
    (["deepspeed; rm -rf /"], "with entry 1 'deepspeed; rm -rf /' is not NAME or NAME==VERSION", "NAME==VERSION"),
    (["{{ lookup('pipe','id') }}"], "is not NAME or NAME==VERSION", "NAME==VERSION"),
    (["deepspeed"] * 10_000, "with lists 10000 entries", "list each stack package once"),
    ({"deepspeed": "0.16.0"}, "with must be a list of stack packages", "NAME==VERSION"),
    (["deepspeeed"], "fleet group 'train': with names 'deepspeeed', which is not a stack package", "deepspeed"),
]


@pytest.mark.parametrize(("listed", "error", "hint"), REFUSED, ids=["shell", "jinja", "10k", "mapping", "unknown"])
def test_every_command_that_reads_the_fleet_refuses_a_bad_with_alike(cli, tmp_path, listed, error, hint):
    fleet, inv = write(tmp_path, {**FLEET, "train": {**TRAIN, "with": listed}}), inventory(tmp_path)
    image = tmp_path / "img.lock.json"
    assert cli("plan", "--os", "ubuntu22.04", "--gpu", "h100-sxm", "--lock", str(image), "--format", "json").code == 0
    run_dir = tmp_path / "run"
    for args in (
        ("inventory", "check", "-i", inv, "--fleet", fleet),
        ("apply", "-i", inv, "--fleet", fleet, "--run-dir", str(run_dir)),
        ("check", "--fleet", fleet, "--images", str(image)),
        ("verify", "-i", inv, "--fleet", fleet),
    ):
        r = cli(*args)
        assert r.code == 2, (args, r)
        lines = r.err.splitlines()
        assert any(line.startswith("error: ") and error in line for line in lines), (args, r)
        assert any(line.startswith("hint: ") and hint in line for line in lines), (args, r)
        assert "Traceback" not in r.err
        assert "ok:" not in r.out
        assert "rm -rf" not in r.out
    assert not run_dir.exists(), "apply ran nothing"


def test_the_fleet_check_of_with_names_builds_no_stack_package(tmp_path, monkeypatch):
    """Checking a group's `with:` names reads the catalogue's index of names only: the packages a
    plan does not use are never built (7796b22's start-up), and a name not in it is still refused."""
    from support import COMPAT

    from provision.fleet.apply import _check_stack_names
    from provision.matrix import cache
    from provision.matrix.model import LazyStacks

    monkeypatch.setenv("PROVISION_CACHE_DIR", str(tmp_path / "cache"))
    cache.load_cached(COMPAT)  # stored
    matrix = cache.load_cached(COMPAT)
    assert isinstance(matrix.stacks, LazyStacks)
    _check_stack_names(matrix, "train", ("deepspeed", "onnxruntime-gpu==1.20.1"))
    assert matrix.stacks._built == {}, "no package built to check names"
    with pytest.raises(InputError, match="which is not a stack package of the catalogue"):
        _check_stack_names(matrix, "train", ("jax",))
    assert matrix.stacks._built == {}
