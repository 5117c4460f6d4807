"""frameworks.yaml `cudnn_spec` (a cuDNN range a wheel declares) and `arch_sms` (an architecture's own
SM set): loaded into FrameworkBuild, and held to the invariants a schema cannot state."""

from __future__ import annotations

import pytest
from support import edited_compat

from provision.errors import CompatDataError
from provision.matrix.loader import load_matrix
from provision.versions import DottedVersion as Version

RANGE = 'cudnn_spec: "<10.0,>=9.3.0.75"'
ARCH = "aarch64: {compute_capabilities: null, ptx: null, arch_source: null}"


@pytest.mark.parametrize(
    ("old", "new", "what"),
    [
        (RANGE, 'cudnn_spec: "<9.3,>=9.0"', "does not admit cudnn 9.3.0.75"),
        (RANGE, 'cudnn_spec: ">=9.3.0.75,<"', "cudnn_spec"),
        (RANGE, "cudnn_spec: 9.3", "cudnn_spec: 9.3 is not valid"),
        (ARCH, "x86_32: {compute_capabilities: null, ptx: null, arch_source: null}", "arch_sms"),
        (ARCH, 'aarch64: {compute_capabilities: ["9.0"], ptx: null}', "arch_source"),
    ],
)
def test_bad_fields_are_refused(tmp_path, old, new, what):
    with pytest.raises(CompatDataError) as info:
        load_matrix(edited_compat(tmp_path, "frameworks.yaml", old, new))
    assert what in str(info.value)


def test_an_arch_sms_entry_must_be_one_of_the_build_arches(real_matrix):
    from support import COMPAT

    from provision.matrix.invariants import check_invariants
    from provision.matrix.loader import read_raw

    torch = real_matrix.framework("pytorch")
    rel = torch.release(Version("2.14.1"))
    builds = tuple(b._replace(arches=("x86_64",)) if b.arch_sms else b for b in rel.builds)
    releases = tuple(r._replace(builds=builds) if r is rel else r for r in torch.releases)
    frameworks = tuple(f._replace(releases=releases) if f is torch else f for f in real_matrix.frameworks)
    problems = [str(p) for p in check_invariants(real_matrix._replace(frameworks=frameworks), read_raw(COMPAT))]
    assert any("arch_sms.aarch64: aarch64 is not in the build's arches" in p for p in problems), problems
    assert check_invariants(real_matrix, read_raw(COMPAT)) == []


def test_an_aarch64_set_is_read_for_aarch64_only(tmp_path):
    compat = edited_compat(
        tmp_path,
        "frameworks.yaml",
        ARCH,
        'aarch64: {compute_capabilities: ["9.0"], ptx: "9.0", arch_source: pytorch-release-matrix}',
    )
    build = next(b for b in load_matrix(compat).framework("pytorch").release(Version("2.14.1")).builds if b.default)
    assert build.sms_for("aarch64") == (("9.0",), "9.0", "pytorch-release-matrix")
    assert build.sms_for("x86_64") == (build.compute_capabilities, build.ptx, build.arch_source)
    assert "10.0" in build.compute_capabilities
