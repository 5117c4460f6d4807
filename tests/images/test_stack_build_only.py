"""What only the sdists' builds need stays in the build stage (issue 24 item 3): setuptools and wheel
(PEP 517's fallback, pylock.LEGACY_BUILD_REQUIRES) or the catalogue's build_requires are locked by
hash with everything else, installed in the build stage (build.lock), and not in the image
(wheels.lock), unless the image's own requirements bring them in (torch requires setuptools on
Python 3.12). What brought each pin in is read from uv's `# via` annotations, as uv writes them
(`uv pip compile --generate-hashes`, annotation style split); a lock without them keeps every pin
in the image. Plans come from the live catalogue through the resolver."""

import hashlib
from pathlib import Path

import pytest
from stack_locks import agreeing_stack_lock

from provision.images.pylock import build_only, lock_target, parse_lock, split_lock, via_annotations
from provision.images.render import render_image
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve

TARGET = {"python": "3.11", "platform": "x86_64-manylinux_2_35"}


@pytest.fixture(scope="module")
def ds_plan(real_matrix):
    """PyTorch with DeepSpeed: an sdist with no [build-system], so PEP 517's setuptools and wheel."""
    return resolve(
        real_matrix, PlanRequest(os="ubuntu22.04", gpu="h100-sxm", framework="pytorch", with_=("deepspeed",))
    )


def pin(name: str, version: str, *via: str) -> str:
    digest = hashlib.sha256(f"{name}=={version}".encode()).hexdigest()
    text = f"{name}=={version} \\\n    --hash=sha256:{digest}\n"
    if len(via) == 1:
        return text + f"    # via {via[0]}\n"
    return text + "    # via\n" + "".join(f"    #   {v}\n" for v in via)


def lock_of(plan, *extra: str, torch_via=("-r requirements.in", "deepspeed"), setuptools_via=("-r requirements.in",)):
    """A lock for the plan's image in uv's shape (header, pins, annotations)."""
    ds = next(p for p in plan.stack if p.id == "deepspeed")
    fw = plan.framework
    return (
        "# requirements.lock for ...: every package pinned with its hashes.\n"
        "# sdists (hashes of the source archives, built in the image): deepspeed\n"
        + pin("deepspeed", ds.install, "-r requirements.in")
        + pin("packaging", "24.0", "deepspeed")
        + pin("setuptools", "75.0.0", *setuptools_via)
        + pin(fw.package, fw.version, *torch_via)
        + pin("wheel", "0.45.1", "-r requirements.in")
        + "".join(extra)
    )


def test_the_legacy_build_requirements_are_build_only(ds_plan):
    target = lock_target(ds_plan.framework, stack=ds_plan.stack, **TARGET)
    assert target.build == ("setuptools", "wheel")
    text = lock_of(ds_plan)
    assert via_annotations(text)["packaging"] == {"deepspeed"}
    assert via_annotations(text)["torch"] == {"-r", "deepspeed"}
    assert build_only(text, target) == ("setuptools", "wheel")
    wheels, sdists, build = split_lock(text, target.sdists, build_only(text, target))
    assert [ln.split("==")[0] for ln in wheels.splitlines()] == ["packaging", "torch"]
    assert sdists.startswith("deepspeed==")
    assert [ln.split("==")[0] for ln in build.splitlines()] == ["setuptools", "wheel"]
    assert set(parse_lock(text, "lock")) == {ln.split("==")[0] for ln in (wheels + sdists + build).splitlines()}


def test_a_build_requirement_the_image_needs_stays_in_it(ds_plan):
    """torch 2.4+ requires setuptools on Python 3.12 (torch.utils.cpp_extension imports it)."""
    target = lock_target(ds_plan.framework, stack=ds_plan.stack, **TARGET)
    text = lock_of(ds_plan, setuptools_via=("-r requirements.in", "torch"))
    assert build_only(text, target) == ("wheel",)


def test_what_a_build_requirement_brings_is_build_only_unless_the_image_needs_it_too(ds_plan):
    target = lock_target(ds_plan.framework, stack=ds_plan.stack, **TARGET)._replace(build=("setuptools-scm",))
    text = lock_of(
        ds_plan,
        pin("setuptools-scm", "8.1.0", "-r requirements.in"),
        pin("typing-extensions", "4.12.2", "setuptools-scm"),
        setuptools_via=("-r requirements.in", "setuptools-scm"),
    ).replace("    # via deepspeed\n", "    # via\n    #   deepspeed\n    #   setuptools-scm\n")
    assert via_annotations(text)["packaging"] == {"deepspeed", "setuptools-scm"}
    # setuptools and wheel are roots of the image's requirements.in here (target.build names only scm)
    assert build_only(text, target) == ("setuptools-scm", "typing-extensions")


def test_a_lock_without_annotations_keeps_every_pin_in_the_image(ds_plan, tmp_path):
    """A hand-written --lock-file says nothing of what needs what: nothing leaves the image."""
    target = lock_target(ds_plan.framework, stack=ds_plan.stack, **TARGET)
    committed = agreeing_stack_lock(ds_plan, ds_plan.stack, tmp_path)
    text = Path(committed).read_text()
    assert "# via" not in text
    assert build_only(text, target) == ()
    r = render_image(ds_plan, "pytorch", lock_file=committed)
    assert r.files["build.lock"] == ""
    assert "setuptools==" in r.files["wheels.lock"]


def test_a_committed_lock_with_annotations_keeps_its_build_requirements_out(ds_plan, tmp_path):
    """A --lock-file as provision render resolved it (annotated): the image's Dockerfile installs
    wheels.lock without setuptools and wheel, the build stage installs build.lock too."""
    pins = parse_lock(Path(agreeing_stack_lock(ds_plan, ds_plan.stack, tmp_path)).read_text(), "lock")
    path = tmp_path / "annotated.lock"
    path.write_text("".join(pin(name, version, "-r requirements.in") for name, version in sorted(pins.items())))
    r = render_image(ds_plan, "pytorch", lock_file=str(path))
    assert [ln.split("==")[0] for ln in r.files["build.lock"].splitlines()] == ["setuptools", "wheel"]
    assert "setuptools==" not in r.files["wheels.lock"]
    assert "wheel==" not in r.files["wheels.lock"]
    assert "torch==" in r.files["wheels.lock"]
    runtime = r.dockerfile[r.dockerfile.rindex("\nFROM ") :]
    assert "build.lock" not in runtime
    assert "COPY wheels.lock /tmp/requirements.lock" in runtime


def test_the_catalogues_build_requirements_are_build_only_too(real_matrix):
    """Transformer Engine's PyTorch sdist declares setuptools, pip and torch: torch is the image's."""
    plan = resolve(
        real_matrix, PlanRequest(os="ubuntu22.04", gpu="h100-sxm", framework="pytorch", with_=("transformer-engine",))
    )
    te = next(p for p in plan.stack if p.id == "transformer-engine")
    assert te.build_requires
    target = lock_target(plan.framework, stack=plan.stack, **TARGET)
    assert "torch" not in target.build, "the framework the image installs is never build-only"
    assert set(target.build) == {"setuptools", "pip"}
