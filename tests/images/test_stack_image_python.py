"""The image's Python holds to every Requires-Python of the plan (issue 24 item 3): the framework
build's and each stack package's (PlanStackPackage.requires_python, the build's CPython range for the
host's architecture). Plans come from the live catalogue; the lock is a committed one that agrees
with the plan (tests/images/stack_locks.py), so no index is asked."""

from typing import NamedTuple

import pytest
from packaging.specifiers import SpecifierSet
from stack_locks import agreeing_stack_lock

from provision.errors import InputError
from provision.images.render import _image_os, _pythons, render_image
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve


@pytest.fixture(scope="module")
def torch_and_ort(real_matrix):
    """PyTorch 2.14.1 takes Python 3.10 on Ubuntu 22.04, ONNX Runtime 1.31.1 needs 3.11 or newer."""
    return resolve(
        real_matrix,
        PlanRequest(os="ubuntu22.04", gpu="h100-sxm", framework="pytorch==2.14.1", with_=("onnxruntime==1.31.1",)),
    )


def test_the_stack_packages_range_picks_the_interpreter(torch_and_ort, tmp_path):
    plan = torch_and_ort
    ort = plan.stack[0]
    assert SpecifierSet(plan.framework.requires_python).contains("3.10"), "the framework alone takes 3.10"
    assert not SpecifierSet(ort.requires_python).contains("3.10"), ort.requires_python
    r = render_image(plan, "pytorch", lock_file=agreeing_stack_lock(plan, plan.stack, tmp_path))
    assert "RUN python3.11 -m venv /opt/venv" in r.dockerfile
    assert " python3.11-venv " in r.dockerfile
    assert "python3 -m venv" not in r.dockerfile


def test_an_inference_image_takes_its_frameworks_range(real_matrix, tmp_path):
    plan = resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="h100-sxm", framework="onnxruntime"))
    head = plan.stack[0]
    assert plan.framework is None
    assert not SpecifierSet(head.requires_python).contains("3.10")
    r = render_image(plan, "onnxruntime", lock_file=agreeing_stack_lock(plan, plan.stack, tmp_path))
    assert "RUN python3.11 -m venv /opt/venv" in r.dockerfile


def test_no_interpreter_fits_every_range_is_refused(torch_and_ort, tmp_path):
    """A plan whose stack package needs a Python the image OS does not offer (a forged or stale plan:
    the resolver refuses such a stack) is refused naming the package and its range, exit 2."""
    plan = torch_and_ort
    ort = plan.stack[0]
    forged = plan._replace(stack=(ort._replace(requires_python=">=3.12,<3.15"),))
    with pytest.raises(InputError) as info:
        render_image(forged, "pytorch", lock_file=agreeing_stack_lock(plan, plan.stack, tmp_path))
    assert info.value.exit_code == 2
    assert f"onnxruntime {ort.version}'s Requires-Python >=3.12,<3.15" in info.value.message
    assert "no Python on ubuntu22.04 images satisfies" in info.value.message
    assert "(offered: 3.10, 3.11)" in info.value.message
    assert info.value.hint


@pytest.mark.parametrize(
    ("spec", "python"),
    [
        (">=3.10,!=3.10.*", "3.11"),  # an exclusion counts (it was dropped as an unknown clause)
        ("~=3.11.0", "3.11"),
        (">=3.10.0", "3.10"),
    ],
)
def test_every_clause_of_a_range_counts(torch_and_ort, tmp_path, spec, python):
    plan = torch_and_ort
    forged = plan._replace(stack=(plan.stack[0]._replace(requires_python=spec),))
    r = render_image(forged, "pytorch", lock_file=agreeing_stack_lock(plan, plan.stack, tmp_path))
    assert f"RUN {'python3' if python == '3.10' else 'python' + python} -m venv /opt/venv" in r.dockerfile


def test_a_range_that_is_not_a_version_range_is_refused():
    """The plan check refuses such a range first (plan.check); the interpreter choice never reads
    one as "any Python" either."""
    facts = _image_os("ubuntu22.04")
    with pytest.raises(InputError, match=r"onnxruntime 1\.31\.1's Requires-Python '>=3\.1O' is not a version range"):
        _pythons(facts, None, "ubuntu22.04", (FakePackage("onnxruntime", "1.31.1", ">=3.1O"),))


class FakePackage(NamedTuple):
    id: str
    version: str
    requires_python: str
