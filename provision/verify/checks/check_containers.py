"""Containers: the NVIDIA Container Toolkit at the planned version, the nvidia runtime in the
engine's configuration, and a GPU container that runs."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from provision.verify.checks import assert_packages, check, fail
from provision.verify.facts import CTK_VERSION, MAX_LINES
from provision.verify.settings import engine, flag


@check("container-toolkit", "the NVIDIA Container Toolkit is at the planned version and held")
def check_container_toolkit(facts, plan, target, evidence):
    assert_packages(
        facts,
        list(plan.container_toolkit.packages),
        flag(target.hostvars, "container_runtime_hold"),
        evidence,
    )
    res = facts.run(CTK_VERSION)
    match = re.search(r"version (\d{1,6}\.\d{1,6}\.\d{1,6})", res.out)
    evidence(f"nvidia-ctk --version: {match.group(1) if match else res.text[:80] or res.rc}")
    if not match or match.group(1) != plan.container_toolkit.version:
        fail(
            f"nvidia-ctk reports {match.group(1) if match else 'no version'}; the plan pins "
            f"{plan.container_toolkit.version}"
        )


@check("docker-runtime", "Docker's daemon.json registers the nvidia runtime")
def check_docker_runtime(facts, target, evidence):
    if engine(target.hostvars) != "docker":
        pytest.skip(f"container_runtime_engine is {engine(target.hostvars)} for this host")
    path = target.hostvars.get("container_runtime_daemon_json", "/etc/docker/daemon.json")
    text = facts.read(path)
    if text is None:
        fail(f"{path} is absent: Docker does not know the nvidia runtime")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        fail(f"{path} is not valid JSON ({exc}): dockerd will not start")
    runtime = (doc.get("runtimes") or {}).get("nvidia") if isinstance(doc, dict) else None
    evidence(f"{path}: runtimes.nvidia = {json.dumps(runtime)}; default-runtime = {doc.get('default-runtime')!r}")
    if not isinstance(runtime, dict) or "nvidia-container-runtime" not in str(runtime.get("path", "")):
        fail(f"{path} has no nvidia runtime (runtimes.nvidia.path = nvidia-container-runtime)")
    if flag(target.hostvars, "container_runtime_default_runtime") and doc.get("default-runtime") != "nvidia":
        fail(f"{path}: default-runtime is {doc.get('default-runtime')!r}; this host is set to default to nvidia")


@check("gpu-container", "a GPU container runs nvidia-smi (when the plan's base image is present)")
def check_gpu_container(facts, plan, target, evidence):
    if engine(target.hostvars) != "docker":
        pytest.skip("Docker is not this host's container engine")
    image = plan.base_image
    inspect = facts.run(f"docker image inspect --format '{{{{.Id}}}}' {shlex.quote(image)}")
    if inspect.rc != 0:
        pytest.skip(f"{image} is not on the host (docker pull it, or provision build, to include this check)")
    evidence(f"{image}: {inspect.out.strip()[:19]}")
    res = facts.run(f"docker run --rm --gpus all {shlex.quote(image)} nvidia-smi -L")
    lines = [line for line in res.out.splitlines()[:MAX_LINES] if line.startswith("GPU ")]
    evidence(f"docker run --gpus all {image} nvidia-smi -L: exit {res.rc}, {len(lines)} GPU(s)")
    if res.rc != 0:
        fail(f"the GPU container fails: {(res.err or res.out).strip().splitlines()[-1:] or res.rc}")
    if not lines:
        fail("the GPU container sees no GPU")
