"""What a framework wheel declares, read as it is: a cuDNN range stays a range, and an aarch64
wheel's SM set is its own (issue 23's data audit, through the resolver)."""

from __future__ import annotations

from provision.plan.model import PlanRequest
from provision.plan.resolve import cudnn_supports, resolve
from provision.versions import DottedVersion as V


def range_build(matrix):
    """The newest TensorFlow release whose [and-cuda] wheel declares a cuDNN range."""
    tf = matrix.framework("tensorflow")
    for release in tf.releases:
        for build in release.builds:
            if build.cudnn_spec is not None:
                return release, build
    raise AssertionError("no catalogued TensorFlow build with a cuDNN range")


def test_a_cudnn_range_takes_a_cudnn_inside_it_that_the_gpu_runs(real_matrix):
    release, build = range_build(real_matrix)
    plans = {
        gpu: resolve(real_matrix, PlanRequest("ubuntu22.04", gpu, framework=f"tensorflow=={release.version}"))
        for gpu in ("v100-pcie-32gb", "h100-sxm")
    }
    for gpu, plan in plans.items():
        chosen = V(plan.cudnn.version)
        assert build.cudnn_spec.contains(chosen), (gpu, chosen)
        cc = real_matrix.gpu(gpu).compute_capability
        ok, why, _ = cudnn_supports(real_matrix, chosen, V(plan.cuda.version), cc, "framework-range")
        assert ok, (gpu, why)
        assert any(r.component == "cudnn" and "range" in r.text for r in plan.reasons)
    # cuDNN 9.17 dropped sm_70: the V100 plan stays below it, the H100 plan need not
    assert V(plans["v100-pcie-32gb"].cudnn.version) < V("9.17")
    assert V(plans["h100-sxm"].cudnn.version) >= V(plans["v100-pcie-32gb"].cudnn.version)
    # the lower bound alone is no longer what the plan pins
    assert plans["h100-sxm"].cudnn.version != build.cudnn


def test_an_aarch64_plan_reads_the_aarch64_wheels_sm_set(real_matrix):
    torch = real_matrix.framework("pytorch")
    for release in torch.releases:
        build = next((b for b in release.builds if b.arch_sms and "aarch64" in b.arches), None)
        if build is None:
            continue
        sass, ptx, _ = build.sms_for("aarch64")
        plan = resolve(real_matrix, PlanRequest("ubuntu22.04", "gh200", framework=f"pytorch=={release.version}"))
        if plan.framework.variant == build.variant:
            assert plan.framework.compute_capabilities == (tuple(sass) if sass else None)
            assert plan.framework.ptx == ptx
            return
    raise AssertionError("no catalogued aarch64 build with its own SM set resolved on GH200")
