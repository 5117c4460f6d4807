"""A PyTorch + DeepSpeed + ONNX Runtime image locked against the real package index (pypi.org),
with --require-hashes, sdists included (marked `network`; tests/run runs it).

The plan is the resolver's; every expectation is read from it, and DeepSpeed's hash is compared with
the sha256 pypi.org's JSON API publishes for the release's sdist."""

import json
import re
import urllib.request

import pytest
from test_pylock import hashes_by_pin

from provision.errors import InputError
from provision.images.pylock import PackageIndex, parse_lock
from provision.images.render import render_image
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve


def sdist_sha256(name: str, version: str) -> set[str]:
    """The sha256 of the release's sdists, as pypi.org's simple index publishes them (PEP 691 JSON)."""
    request = urllib.request.Request(
        f"https://pypi.org/simple/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        files = json.load(answer)["files"]
    return {f["hashes"]["sha256"] for f in files if f["filename"] == f"{name}-{version}.tar.gz"}


@pytest.mark.network
def test_real_index_locks_pytorch_deepspeed_onnxruntime_with_every_hash(real_matrix, tmp_path):
    plan = None
    for release in real_matrix.framework("pytorch").releases:
        try:
            plan = resolve(
                real_matrix,
                PlanRequest(
                    os="ubuntu22.04",
                    gpu="h100-sxm",
                    framework=f"pytorch=={release.version}",
                    with_=("deepspeed", "onnxruntime"),
                ),
            )
            break
        except InputError:
            continue
    assert plan is not None
    r = render_image(plan, "pytorch", index=PackageIndex())
    lock = r.files["requirements.lock"]
    (tmp_path / "requirements.lock").write_text(lock)
    pins = parse_lock(lock, "lock")  # every line a hash-pinned requirement or a comment
    hashes = hashes_by_pin(lock)
    assert all(hashes.values()), [n for n, h in hashes.items() if not h]
    assert pins["torch"].split("+")[0] == plan.framework.version
    for pkg in plan.stack:
        assert pins[re.sub(r"[-_.]+", "-", pkg.pip).lower()] == pkg.install, pkg.id
    ds = next(p for p in plan.stack if p.id == "deepspeed")
    assert hashes["deepspeed"] == sdist_sha256("deepspeed", ds.install), "deepspeed pinned by its sdist's hash"
    assert r.files["sdists.lock"].startswith(f"deepspeed=={ds.install} --hash=sha256:")
    assert "deepspeed" not in r.files["wheels.lock"]
    assert {"setuptools", "wheel"} <= set(pins)
    assert len(pins) > 20, "transitive dependencies pinned too"
    if plan.framework.cudnn:
        assert pins[f"nvidia-cudnn-cu{plan.framework.cuda.split('.')[0]}"] == plan.framework.cudnn
    print(f"locked {plan.framework.requirement} {' '.join(p.requirement for p in plan.stack)}: {len(pins)} pins")
