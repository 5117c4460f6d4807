"""Plans with stacks (issue 24, items 2 and 4): --framework onnxruntime|tensorrt, --with NAME[==V],
one consistent set chosen by the search, refusals that name the pair and the fact, the plan
document (JSON, schema, read_plan) and the lock's stack rows held to the catalogue."""

from __future__ import annotations

import json

import pytest

from provision.errors import BadPin, InputError, NoCompatibleStack, UnknownId
from provision.plan.lockcheck import check_against_catalogue
from provision.plan.model import Plan, PlanRequest, read_plan
from provision.plan.resolve import resolve
from provision.versions import DottedVersion as Version


def _plan(matrix, gpu="l4", os_id="ubuntu22.04", framework=None, with_=(), **pins) -> Plan:
    return resolve(matrix, PlanRequest(os=os_id, gpu=gpu, framework=framework, with_=tuple(with_), **pins))


def _one(plan: Plan, ident: str):
    return next(s for s in plan.stack if s.id == ident)


def _cuda_major(plan: Plan) -> int:
    return Version(plan.cuda.version).release[0]


# -- Done when: the inference framework ------------------------------------------------------------
def test_l4_onnxruntime_is_the_newest_release_whose_cuda_the_driver_runs(real_matrix):
    plan = _plan(real_matrix, framework="onnxruntime")
    assert plan.framework is None
    ort = plan.stack[0]
    assert (ort.id, ort.role, ort.pip) == ("onnxruntime", "framework", "onnxruntime-gpu")
    major = _cuda_major(plan)
    releases = real_matrix.stack("onnxruntime").releases
    newest = next(r for r in releases if any(b.cuda_major == major for b in r.builds))
    assert ort.version == str(newest.version)
    assert ort.cuda_major == major
    # and not an older CUDA line: every newer release is for a CUDA major the plan's driver does not run here
    assert all(b.cuda_major != major for r in releases if r.version > newest.version for b in r.builds)
    assert "cudnn-runtime" in plan.base_image  # ONNX Runtime uses the image's CUDA and cuDNN
    assert Version(plan.cudnn.version).release[0] == ort.cudnn_major


def test_a_driver_that_runs_only_cuda_12_gets_a_cuda_12_onnxruntime(real_matrix):
    plan = _plan(real_matrix, framework="onnxruntime", driver="550")
    assert _cuda_major(plan) == 12
    ort = plan.stack[0]
    assert ort.cuda_major == 12
    assert Version(ort.cuda or "12.0") <= Version(".".join(plan.cuda.version.split(".")[:2]))


# -- Done when: cuDNN 8 vs 9 -----------------------------------------------------------------------
def test_torch_2_5_1_with_onnxruntime_1_18_1_is_refused_naming_cudnn_8_vs_9_and_the_pins_that_work(real_matrix):
    with pytest.raises(NoCompatibleStack) as caught:
        _plan(real_matrix, framework="pytorch==2.5.1", with_=["onnxruntime==1.18.1"])
    error = caught.value
    text = " ".join(error.summary)
    assert "onnxruntime 1.18.1 is built for cuDNN 8" in text
    assert "torch 2.5.1's" in text
    assert "bundles cuDNN 9." in text
    assert "stack-cudnn" in error.kinds
    assert "onnxruntime >= 1.19" in error.hint
    # the suggested pin resolves
    pin = error.hint.split("--with ", 1)[1].split(" ", 1)[0]
    assert _plan(real_matrix, framework="pytorch==2.5.1", with_=[pin]).stack[0].version == pin.split("==")[1]


def test_with_onnxruntime_alone_agrees_with_torch(real_matrix):
    plan = _plan(real_matrix, framework="pytorch==2.5.1", with_=["onnxruntime"])
    ort = _one(plan, "onnxruntime")
    assert ort.role == "with"
    assert ort.cuda_major == Version(plan.framework.cuda).release[0] == _cuda_major(plan)
    assert ort.cudnn_major == Version(plan.cudnn.version).release[0] == 9
    assert Version(ort.version) >= Version("1.19")
    assert Version(ort.cuda) <= Version(plan.framework.cuda)  # never built with a newer CUDA than torch's
    # the newest such release: every newer one is refused by a rule
    newer = [r for r in real_matrix.stack("onnxruntime").releases if r.version > Version(ort.version)]
    assert newer
    assert all(
        Version(b.cuda or "99") > Version(plan.framework.cuda) or b.cuda_major != 12 for r in newer for b in r.builds
    )


# -- Done when: SM floors ----------------------------------------------------------------------------
def test_v100_tensorrt_10_6_is_refused_naming_sm_7_0_and_suggesting_releases_that_support_it(real_matrix):
    with pytest.raises(NoCompatibleStack) as caught:
        _plan(real_matrix, gpu="v100", framework="tensorrt==10.6")
    error = caught.value
    text = " ".join(error.summary)
    assert "supports SM 7.5 and newer" in text
    assert "the GPU is SM 7.0" in text
    assert "tensorrt <= 10.4.0" in error.hint
    assert _plan(real_matrix, gpu="v100", framework="tensorrt==10.4").stack[0].sm_floor == "7.0"


def test_every_tensorrt_release_from_10_5_is_refused_on_v100(real_matrix):
    for release in real_matrix.stack("tensorrt").releases:
        if release.version >= Version("10.5"):
            with pytest.raises(NoCompatibleStack):
                _plan(real_matrix, gpu="v100", framework=f"tensorrt=={release.version}")


def test_fp8_the_gpu_lacks_is_a_reason_not_a_refusal(real_matrix):
    plan = _plan(real_matrix, gpu="a100-pcie", framework="pytorch", with_=["transformer-engine"])
    assert any(r.component == "transformer-engine" and r.text.startswith("FP8 unavailable") for r in plan.reasons)
    plan = _plan(real_matrix, gpu="h100-sxm", framework="pytorch", with_=["transformer-engine"])
    assert not any(r.text.startswith("FP8 unavailable") for r in plan.reasons)


# -- Done when: DeepSpeed's devel base, Transformer Engine's cuDNN floor ----------------------------
@pytest.mark.parametrize("torch", ["pytorch", "pytorch==2.5.1", "pytorch==2.3.1"])
def test_with_deepspeed_gives_a_devel_base_whose_cuda_is_the_torch_builds(real_matrix, torch):
    plan = _plan(real_matrix, gpu="h100-sxm", framework=torch, with_=["deepspeed"])
    ds = _one(plan, "deepspeed")
    assert ds.needs_nvcc
    assert plan.base_image == plan.images["devel"]
    assert ".".join(plan.cuda.version.split(".")[:2]) == plan.framework.cuda
    assert any(r.component == "image" and r.text.split(": ", 1)[1].startswith("devel flavour") for r in plan.reasons)


def test_without_deepspeed_the_base_is_not_devel(real_matrix):
    assert (
        _plan(real_matrix, gpu="h100-sxm", framework="pytorch").base_image
        != _plan(real_matrix, gpu="h100-sxm", framework="pytorch", with_=["deepspeed"]).base_image
    )


@pytest.mark.parametrize(
    ("with_", "who"),
    [
        (["deepspeed"], "DeepSpeed needs them at run time ("),
        (["transformer-engine"], "Transformer Engine needs them at run time ("),
        (["deepspeed", "transformer-engine"], "DeepSpeed and Transformer Engine need them at run time ("),
    ],
)
def test_the_devel_reason_s_verb_agrees_with_the_packages_that_need_nvcc(real_matrix, with_, who):
    plan = _plan(real_matrix, gpu="h100-sxm", framework="pytorch", with_=with_)
    why = next(r.text for r in plan.reasons if r.component == "image")
    assert "devel flavour (nvcc and the CUDA headers" in why
    assert f"): {who}" in why


def test_transformer_engine_is_never_paired_with_a_cudnn_below_its_floor(real_matrix):
    te = real_matrix.stack("transformer-engine")
    floored = [r for r in te.releases if any(b.cudnn_min is not None for b in r.builds)]
    assert floored, "the catalogue records Transformer Engine's cuDNN floor"
    for torch in ("pytorch==2.5.1", "pytorch"):
        plan = _plan(real_matrix, gpu="h100-sxm", framework=torch, with_=["transformer-engine"])
        part = _one(plan, "transformer-engine")
        if part.cudnn_min is not None:
            assert Version(plan.cudnn.version) >= Version(part.cudnn_min)
    # torch 2.5.1 bundles cuDNN 9.1: the floored release is refused, naming the floor
    pin = f"transformer-engine=={floored[0].version}"
    with pytest.raises(NoCompatibleStack) as caught:
        _plan(real_matrix, gpu="h100-sxm", framework="pytorch==2.5.1", with_=[pin])
    assert f"refuses cuDNN older than {floored[0].builds[0].cudnn_min}" in " ".join(caught.value.summary)


# -- requires: torch-tensorrt pins torch; megatron-core needs torch >= 2.6 -------------------------
def test_torch_tensorrt_pins_torch_and_the_search_takes_the_torch_it_needs(real_matrix):
    plan = _plan(real_matrix, gpu="l4", framework="pytorch", with_=["torch-tensorrt==2.5.0"])
    assert plan.framework.version.startswith("2.5.")
    with pytest.raises(NoCompatibleStack) as caught:
        _plan(real_matrix, gpu="l4", framework="pytorch==2.6.0", with_=["torch-tensorrt==2.5.0"])
    assert "requires torch" in " ".join(caught.value.summary)


def test_torch_tensorrt_and_tensorrt_agree(real_matrix):
    plan = _plan(real_matrix, gpu="h100-sxm", framework="pytorch==2.5.1", with_=["tensorrt", "torch-tensorrt"])
    trt, ttrt = _one(plan, "tensorrt"), _one(plan, "torch-tensorrt")
    build = real_matrix.stack("torch-tensorrt").release(Version(ttrt.version)).builds[0]
    from provision.plan.rules import spec_holds

    spec = build.requirement("tensorrt") or build.requirement(f"tensorrt-{trt.flavour}")
    assert spec is not None
    assert spec_holds(spec, trt.version)


def test_megatron_core_0_16_needs_torch_2_6(real_matrix):
    with pytest.raises(NoCompatibleStack) as caught:
        _plan(real_matrix, gpu="h100-sxm", framework="pytorch==2.5.1", with_=["megatron-core==0.16"])
    assert "requires torch>=2.6" in " ".join(caught.value.summary)


# -- Python and glibc of the image OS -----------------------------------------------------------------
def test_the_image_os_python_decides(real_matrix):
    """ONNX Runtime 1.27+ needs Python >= 3.11: rockylinux8 images offer 3.11 too; the chosen one
    records its range, and the plan names the Pythons it takes."""
    plan = _plan(real_matrix, gpu="l4", framework="onnxruntime==1.31.1")
    assert plan.stack[0].requires_python == ">=3.11,<3.15"
    assert any("Python 3.11" in r.text for r in plan.reasons if r.component == "onnxruntime")


# -- bad input --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("framework", "with_", "error", "words"),
    [
        (None, ["onnxruntime"], BadPin, "no --framework"),
        ("onnxruntime", ["deepspeed"], BadPin, "needs torch"),
        ("onnxruntime", ["torch-tensorrt"], BadPin, "needs torch"),
        ("pytorch", ["onnxruntime", "onnxruntime-gpu==1.20.0"], BadPin, "named twice"),
        ("onnxruntime", ["onnxruntime"], BadPin, "named twice"),
        ("pytorch", ["nosuch"], UnknownId, "unknown stack package"),
        ("pytorch", ["onnxruntime==9.9"], UnknownId, "not in the catalogue"),
        ("pytorch", ["onnxruntime==x"], BadPin, "not a ONNX Runtime (GPU) version"),
        ("deepspeed", [], BadPin, "added to a framework"),
        ("jax", [], UnknownId, "unknown framework"),
    ],
)
def test_bad_stack_input_is_refused(real_matrix, framework, with_, error, words):
    with pytest.raises(error) as caught:
        _plan(real_matrix, framework=framework, with_=with_)
    assert words in caught.value.message
    assert caught.value.hint


def test_with_and_host_only_is_refused(real_matrix):
    with pytest.raises(BadPin, match="--host-only plans no image, so --with"):
        resolve(
            real_matrix, PlanRequest(os="ubuntu22.04", gpu="l4", framework=None, host_only=True, with_=("deepspeed",))
        )


def test_cli_bad_with_is_one_line_and_exit_2(cli):
    result = cli("plan", "--os", "ubuntu22.04", "--gpu", "l4", "--framework", "pytorch", "--with", "nosuch")
    assert result.code == 2
    lines = result.err.strip().splitlines()
    assert lines[0].startswith("error: unknown stack package 'nosuch'")
    assert lines[1].startswith("hint: known: onnxruntime, tensorrt, torch-tensorrt, deepspeed")
    assert "Traceback" not in result.err


def test_a_package_that_goes_with_a_framework_named_as_the_framework_is_refused_naming_with(cli):
    result = cli("plan", "--os", "ubuntu22.04", "--gpu", "l4", "--framework", "deepspeed")
    assert result.code == 2
    assert "hint: plan it with --framework pytorch --with deepspeed" in result.err


# -- the plan document -------------------------------------------------------------------------------
def test_table_json_and_read_plan_round_trip(cli, tmp_path):
    args = ("plan", "--os", "ubuntu22.04", "--gpu", "h100-sxm", "--framework", "pytorch==2.5.1")
    args += ("--with", "deepspeed", "--with", "onnxruntime", "--with", "tensorrt")
    table = cli(*args)
    assert table.code == 0, table
    rows = [line for line in table.out.splitlines() if line.startswith("with ")]
    assert [r.split()[1].split("==")[0] for r in rows] == ["deepspeed", "onnxruntime-gpu", "tensorrt-cu12"]
    lock = tmp_path / "plan.json"
    result = cli(*args, "--format", "json", "--lock", str(lock))
    assert result.code == 0, result
    doc = json.loads(result.out)
    assert doc["request"]["with"] == ["deepspeed", "onnxruntime", "tensorrt"]
    assert [s["id"] for s in doc["stack"]] == ["deepspeed", "onnxruntime", "tensorrt"]
    for part in doc["stack"]:
        assert {"version", "flavour", "cuda_major", "cudnn_major", "source"} <= set(part)
    trt = doc["stack"][2]
    assert trt["library_index"] == "https://pypi.nvidia.com/"
    plan = read_plan(str(lock))
    assert plan.request.with_ == ("deepspeed", "onnxruntime", "tensorrt")
    assert plan.to_dict() == doc
    assert plan.digest() == doc["digest"]


def test_a_plan_without_a_stack_has_no_stack_keys(cli):
    result = cli("plan", "--os", "ubuntu22.04", "--gpu", "l4", "--framework", "pytorch==2.5.1", "--format", "json")
    doc = json.loads(result.out)
    assert "stack" not in doc
    assert "with" not in doc["request"]


def test_the_schema_refuses_a_stack_string_out_of_pattern(real_matrix):
    plan = _plan(real_matrix, framework="pytorch==2.5.1", with_=["tensorrt"])
    doc = plan.to_dict()
    for key, bad in (
        ("requirement", "tensorrt==10.3.0 --index-url https://evil.example/"),
        ("library_index", "http://evil.example/simple"),
        ("role", "main"),
        ("cuda_major", "12"),
    ):
        forged = json.loads(json.dumps(doc))
        forged["stack"][0][key] = bad
        with pytest.raises(InputError):
            Plan.from_dict(forged)
    forged = json.loads(json.dumps(doc))
    forged["request"]["with"] = ["tensorrt\n--extra-index-url x"]
    with pytest.raises(InputError):
        Plan.from_dict(forged)


def _forged(plan: Plan, **changes) -> Plan:
    return plan._replace(stack=(plan.stack[0]._replace(**changes), *plan.stack[1:]))


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"library_index": "https://evil.example/simple/"}, "stack.0.library_index"),
        ({"version": "10.4.0", "install": "10.4.0"}, "stack.0.requirement"),
        ({"version": "10.99.0", "install": "10.99.0"}, "stack.0.version"),
        ({"source": "made-up"}, "stack.0.source"),
    ],
)
def test_the_lock_check_holds_stack_rows_to_the_catalogue(real_matrix, changes, field):
    plan = _plan(real_matrix, framework="pytorch==2.5.1", with_=["tensorrt==10.3"])
    check_against_catalogue(plan, real_matrix)
    with pytest.raises(InputError) as caught:
        check_against_catalogue(_forged(plan, **changes), real_matrix)
    assert field.rsplit(".", 1)[0] in caught.value.message


def test_the_consistency_check_refuses_a_forged_cuda_major_and_a_missing_devel_base(real_matrix):
    plan = _plan(real_matrix, framework="pytorch==2.5.1", with_=["tensorrt"])
    doc = _forged(plan, cuda_major=13).to_dict()
    doc["digest"] = _forged(plan, cuda_major=13).digest()
    with pytest.raises(InputError, match="cuda_major"):
        Plan.from_dict(doc)
    ds = _plan(real_matrix, gpu="h100-sxm", framework="pytorch==2.5.1", with_=["deepspeed"])
    runtime = ds._replace(base_image=ds.images["base"])
    doc = runtime.to_dict()
    doc["digest"] = runtime.digest()
    with pytest.raises(InputError, match="needs_nvcc"):
        Plan.from_dict(doc)


def test_a_cudnn_devel_base_has_nvcc_for_the_lock_check_as_for_render(real_matrix):
    """nvcc comes with either devel flavour (matrix.model.DEVEL_FLAVOURS): the lock check and
    render's check_nvcc agree on a plan whose base is the cudnn-devel image."""
    from provision.images.render import check_nvcc

    ds = _plan(real_matrix, gpu="h100-sxm", framework="pytorch==2.5.1", with_=["deepspeed"])
    assert "cudnn-devel" in ds.images
    cudnn_devel = ds._replace(base_image=ds.images["cudnn-devel"])
    doc = cudnn_devel.to_dict()
    doc["digest"] = cudnn_devel.digest()
    assert Plan.from_dict(doc).base_image == ds.images["cudnn-devel"]
    check_nvcc(cudnn_devel)


def test_the_lock_check_runs_the_rules_on_a_catalogued_row_that_does_not_fit(real_matrix):
    """A lock whose TensorRT row is a real catalogued build, consistently written, that the GPU
    cannot run (10.6 on a V100: SM 7.5 and newer) is refused by the rules the resolver uses."""
    plan = _plan(real_matrix, gpu="v100", framework="tensorrt==10.4")
    check_against_catalogue(plan, real_matrix)
    pkg = real_matrix.stack("tensorrt")
    release = pkg.release(Version("10.6.0"))
    build = release.build(plan.stack[0].flavour)
    from provision.plan.assemble import package_part
    from provision.plan.rules import PackageDraft

    part, _ = package_part(
        real_matrix,
        PackageDraft(pkg, release, build, "framework"),
        ("x86_64", "7.0", False),
        None,
        Version(plan.cuda.version),
        None,
    )
    with pytest.raises(InputError, match=r"supports SM 7\.5 and newer"):
        check_against_catalogue(plan._replace(stack=(part,)), real_matrix)


# -- --with on `provision plan`'s fast path (provision/cli/plan_run.py) ----------------------------
CLICK_ONLY = (
    "import sys\n"
    "from provision.cli import main, plan_run\n"
    "plan_run.fast_plan_args = lambda args: None\n"
    "sys.exit(main(sys.argv[1:]))\n"
)
WITH_ARGS = [
    (["--framework", "pytorch==2.5.1", "--with", "onnxruntime", "--with", "deepspeed"], True),
    (["--framework", "pytorch==2.5.1", "--with", "onnxruntime==1.18.1"], True),
    (["--framework", "pytorch", "--with", "nosuch", "--format", "json"], True),
    (["--with", "deepspeed"], True),
    (["--framework", "pytorch", "--with", "-x"], False),
    (["--framework", "pytorch", "--with"], False),
]


@pytest.mark.parametrize(("extra", "fast"), WITH_ARGS, ids=lambda x: " ".join(x) if isinstance(x, list) else str(x))
def test_with_on_the_fast_path_is_click_byte_for_byte(extra, fast):
    import subprocess
    import sys

    from support import COMPAT

    from provision.cli.plan_run import fast_plan_args

    argv = ["plan", "--os", "ubuntu22.04", "--gpu", "l4", "--compat-dir", str(COMPAT), *extra]
    assert (fast_plan_args(argv) is not None) == fast
    if fast:
        assert fast_plan_args(argv)["with_"] == tuple(extra[i + 1] for i, a in enumerate(extra) if a == "--with")
    runs = [
        subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        for cmd in ([sys.executable, "-m", "provision", *argv], [sys.executable, "-c", CLICK_ONLY, *argv])
    ]
    fast_run, click_run = ((r.returncode, r.stdout, r.stderr) for r in runs)
    assert fast_run == click_run
    assert "Traceback" not in runs[0].stderr


def test_a_stack_plan_imports_no_click_or_yaml():
    import subprocess
    import sys

    code = (
        "import sys, json\n"
        "from provision.cli import main\n"
        "rc = main(['plan', '--os', 'ubuntu22.04', '--gpu', 'l4', '--framework', 'pytorch', '--with', 'deepspeed'])\n"
        "print(json.dumps([rc, sorted(sys.modules)]), file=sys.stderr)\n"
    )
    for _ in range(2):  # the first run fills the validated-data cache (and the image OS facts)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    rc, loaded = json.loads(proc.stderr.strip().splitlines()[-1])
    assert rc == 0
    assert "deepspeed==" in proc.stdout
    for heavy in ("click", "yaml", "jsonschema"):
        assert heavy not in loaded, f"a stack plan imported {heavy}"


def test_commands_that_plan_on_the_fly_take_with(tmp_path):
    """render/build/pin-base/verify plan on the fly through plan_source: --with reaches the request;
    with --plan it is refused (the lock already fixes the stack)."""
    import click

    from provision.cli.common import PLAN_KEYS, load_plan

    assert "with_" in PLAN_KEYS
    ctx = click.Context(click.Command("render"), obj={})
    args = dict.fromkeys(PLAN_KEYS)
    args.update(os_id="ubuntu22.04", gpu="h100-sxm", framework="pytorch==2.5.1", policy="lts", with_=("deepspeed",))
    plan = load_plan(ctx, **args)
    assert plan.request.with_ == ("deepspeed",)
    assert plan.base_image == plan.images["devel"]
    args.update(os_id=None, gpu=None, plan_file=str(tmp_path / "plan.json"))
    with pytest.raises(InputError, match="--with, not both"):
        load_plan(ctx, **args)


# -- pairs: the libraries two packages load (ONNX Runtime's TensorRT provider and TensorRT) --------
def _libnvinfer(real_matrix, part) -> set[str]:
    """The libnvinfer sonames a plan's stack row's catalogued build needs (its read shared objects)."""
    build = real_matrix.stack(part.id).release(Version(part.version)).build(part.flavour)
    return {n for _, names in build.sonames for n in names or () if n.startswith("libnvinfer.so.")}


def _newest_trt_linking(real_matrix, soname: str):
    trt = real_matrix.stack("tensorrt")
    return next(
        r for r in trt.releases if any(soname in (n for _, ns in b.sonames for n in ns or ()) for b in r.builds)
    )


@pytest.mark.parametrize(
    ("framework", "with_"),
    [("pytorch", ["onnxruntime", "tensorrt"]), ("pytorch", ["tensorrt", "onnxruntime"]), ("tensorrt", ["onnxruntime"])],
)
def test_onnxruntime_and_tensorrt_get_the_libnvinfer_the_provider_needs(real_matrix, framework, with_):
    """TensorRT 11 (libnvinfer.so.11) is the newest catalogued, yet beside ONNX Runtime, whose
    TensorRT provider needs libnvinfer.so.10, the plan takes the newest TensorRT linking .so.10."""
    trt = real_matrix.stack("tensorrt")
    assert any("libnvinfer.so.11" in n for b in trt.releases[0].builds for _, ns in b.sonames for n in ns or ())
    plan = _plan(real_matrix, gpu="h100-sxm", framework=framework, with_=with_)
    ort, rt = _one(plan, "onnxruntime"), _one(plan, "tensorrt")
    assert _libnvinfer(real_matrix, ort) == _libnvinfer(real_matrix, rt) == {"libnvinfer.so.10"}
    assert Version(rt.version) == _newest_trt_linking(real_matrix, "libnvinfer.so.10").version
    check_against_catalogue(plan, real_matrix)


@pytest.mark.parametrize(
    ("framework", "with_", "flag"),
    [
        ("pytorch", ["onnxruntime", "tensorrt==11"], "--with"),
        ("tensorrt==11", ["onnxruntime"], "--framework"),
    ],
)
def test_tensorrt_11_beside_onnxruntime_is_refused_naming_the_pair_the_sonames_and_the_releases_that_fit(
    real_matrix, framework, with_, flag
):
    with pytest.raises(NoCompatibleStack) as caught:
        _plan(real_matrix, gpu="h100-sxm", framework=framework, with_=with_)
    error = caught.value
    assert "stack-soname" in error.kinds
    line = next(s for s in error.summary if "libnvinfer" in s)
    assert "onnxruntime==1.31.1's tensorrt-provider needs libnvinfer.so.10" in line
    assert "tensorrt==11.4.0.106 (cu13)'s bindings needs libnvinfer.so.11" in line
    fit = _newest_trt_linking(real_matrix, "libnvinfer.so.10").version
    assert f"{flag} tensorrt=={fit} (the releases that fit: tensorrt <= {fit})" in error.hint


def test_without_the_soname_rule_the_search_would_pair_tensorrt_11_with_onnxruntime(real_matrix, monkeypatch):
    """The rule decides: with the pair rules less it, the same request takes TensorRT 11 (a fresh
    catalogue object, so the kept answers of the real one are not reused)."""
    from provision.plan import rules

    monkeypatch.setattr(rules, "PAIR_RULES", tuple(r for r in rules.PAIR_RULES if r.kind != "stack-soname"))
    plan = _plan(real_matrix._replace(), gpu="h100-sxm", framework="pytorch", with_=["onnxruntime", "tensorrt"])
    assert _libnvinfer(real_matrix, _one(plan, "tensorrt")) == {"libnvinfer.so.11"}


def test_the_lock_check_refuses_a_forged_pair_the_soname_rule_refuses(real_matrix):
    plan = _plan(real_matrix, gpu="h100-sxm", framework="pytorch", with_=["onnxruntime", "tensorrt"])
    i = [s.id for s in plan.stack].index("tensorrt")
    from provision.plan.assemble import package_part
    from provision.plan.rules import PackageDraft

    pkg = real_matrix.stack("tensorrt")
    release = pkg.releases[0]
    build = release.build(plan.stack[i].flavour)
    part, _ = package_part(
        real_matrix,
        PackageDraft(pkg, release, build, "with"),
        ("x86_64", "9.0", False),
        None,
        Version(plan.cuda.version),
        real_matrix.framework("pytorch"),
    )
    forged = plan._replace(stack=tuple(part if k == i else s for k, s in enumerate(plan.stack)))
    with pytest.raises(InputError, match=r"libnvinfer\.so\.10.*libnvinfer\.so\.11"):
        check_against_catalogue(forged, real_matrix)


# -- requires: a stack package another one declares a requirement on joins the plan ----------------
def test_with_torch_tensorrt_alone_brings_the_tensorrt_it_requires_into_the_plan(real_matrix):
    plan = _plan(real_matrix, gpu="l4", framework="pytorch", with_=["torch-tensorrt"])
    assert [(s.id, s.role, s.required_by) for s in plan.stack] == [
        ("torch-tensorrt", "with", None),
        ("tensorrt", "requires", "torch-tensorrt"),
    ]
    ttrt, trt = plan.stack
    build = real_matrix.stack("torch-tensorrt").release(Version(ttrt.version)).builds[0]
    from provision.plan.rules import spec_holds

    specs = [spec for name, spec in build.requires if name.startswith("tensorrt")]
    assert specs
    assert all(spec_holds(spec, trt.version) for spec in specs)
    # the newest release the requirement and every rule take: no newer release within the pin fits
    newer = [r for r in real_matrix.stack("tensorrt").releases if r.version > Version(trt.version)]
    assert not any(all(spec_holds(s, r.version) for s in specs) for r in newer)
    # and what the plan records of it: its NVIDIA library index and SM floor, and why it is there
    assert trt.library_index == "https://pypi.nvidia.com/"
    assert trt.sm_floor == "7.5"
    reason = next(r.text for r in plan.reasons if r.component == "tensorrt")
    assert reason.startswith(f"{trt.requirement} (required by torch-tensorrt=={ttrt.version}: tensorrt")
    check_against_catalogue(plan, real_matrix)


def test_the_required_package_is_a_table_row_and_a_json_row(cli):
    args = ("plan", "--os", "ubuntu22.04", "--gpu", "l4", "--framework", "pytorch", "--with", "torch-tensorrt")
    table = cli(*args)
    assert table.code == 0, table
    row = next(line for line in table.out.splitlines() if line.startswith("requires "))
    assert row.split()[1].startswith("tensorrt")
    assert "for torch-tensorrt" in table.out
    doc = json.loads(cli(*args, "--format", "json").out)
    assert doc["request"]["with"] == ["torch-tensorrt"]
    assert [(s["id"], s["role"], s.get("required_by")) for s in doc["stack"]] == [
        ("torch-tensorrt", "with", None),
        ("tensorrt", "requires", "torch-tensorrt"),
    ]
    assert Plan.from_dict(doc).to_dict() == doc


def test_a_required_tensorrt_is_held_to_every_rule_and_the_search_backtracks(real_matrix):
    """On a V100 (SM 7.0) every TensorRT from 10.5 is refused: torch-tensorrt is taken at a
    release whose TensorRT requirement a release for SM 7.0 meets, or the set is refused."""
    try:
        plan = _plan(real_matrix, gpu="v100", framework="pytorch", with_=["torch-tensorrt"])
    except NoCompatibleStack as error:
        assert "torch-tensorrt" in " ".join(error.summary)
        return
    trt = _one(plan, "tensorrt")
    assert Version(trt.version) < Version("10.5")
    assert trt.sm_floor == "7.0"


def test_beside_onnxruntime_torch_tensorrt_is_taken_at_a_release_whose_tensorrt_links_libnvinfer_10(real_matrix):
    plan = _plan(real_matrix, gpu="h100-sxm", framework="pytorch", with_=["onnxruntime", "torch-tensorrt"])
    trt = _one(plan, "tensorrt")
    assert trt.role == "requires"
    assert _libnvinfer(real_matrix, trt) == _libnvinfer(real_matrix, _one(plan, "onnxruntime")) == {"libnvinfer.so.10"}
    assert _libnvinfer(real_matrix, _one(plan, "torch-tensorrt")) == {"libnvinfer.so.10"}


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"role": "with"}, "required_by: 'torch-tensorrt' does not go with role 'with'"),
        ({"required_by": None}, "'required_by' is a required property"),
        ({"required_by": "deepspeed"}, "is not a stack package listed before"),
    ],
)
def test_the_consistency_check_holds_role_requires_to_required_by(real_matrix, change, words):
    plan = _plan(real_matrix, gpu="l4", framework="pytorch", with_=["torch-tensorrt"])
    forged = plan._replace(stack=(plan.stack[0], plan.stack[1]._replace(**change)))
    if change.get("role") == "with":  # as if the request named it (the count of --with rows agrees)
        forged = forged._replace(request=forged.request._replace(with_=("torch-tensorrt", "tensorrt")))
    doc = forged.to_dict()
    doc["digest"] = forged.digest()
    with pytest.raises(InputError, match=words):
        Plan.from_dict(doc)


def test_the_lock_check_refuses_a_required_by_the_catalogue_does_not_declare(real_matrix):
    plan = _plan(real_matrix, gpu="h100-sxm", framework="pytorch", with_=["deepspeed", "tensorrt"])
    forged = plan._replace(stack=(plan.stack[0], plan.stack[1]._replace(role="requires", required_by="deepspeed")))
    with pytest.raises(InputError, match="declares no requirement on tensorrt"):
        check_against_catalogue(forged, real_matrix)


def test_no_other_package_brings_one_in(real_matrix):
    """Only torch-tensorrt's requirement on tensorrt is an unconditional stack-to-stack requirement
    in the catalogue (megatron-core[te] is an extra the plan does not take; Transformer Engine's
    core extras name its own distributions)."""
    from provision.plan.rules import PackageDraft, requires_packages

    found = {
        (p.id, other.id)
        for p in real_matrix.stacks
        for r in p.releases
        for b in r.builds
        for other, _, _ in requires_packages(real_matrix, PackageDraft(p, r, b, "with"))
    }
    assert found == {("torch-tensorrt", "tensorrt")}
    plan = _plan(real_matrix, gpu="h100-sxm", framework="pytorch", with_=["megatron-core"])
    assert [s.id for s in plan.stack] == ["megatron-core"]


# -- the default image variant of a plan (provision/images/render.py plan_variant: the one source) ----
@pytest.mark.parametrize(
    ("framework", "with_", "want"),
    [
        ("onnxruntime", [], "onnxruntime"),
        ("tensorrt", [], "tensorrt"),
        ("onnxruntime", ["tensorrt"], "onnxruntime"),
        ("pytorch", ["onnxruntime"], "pytorch"),
        ("tensorflow", [], "tensorflow"),
        (None, [], "base"),
    ],
)
def test_default_variant_is_the_variant_of_the_plan_s_framework_inference_ones_included(
    real_matrix, framework, with_, want
):
    from provision.images.render import plan_variant, variants

    plan = _plan(real_matrix, gpu="h100-sxm", framework=framework, with_=with_)
    assert plan_variant(plan) == want
    spec = variants()[want]
    head = plan.framework.name if plan.framework else next((s.id for s in plan.stack if s.role == "framework"), None)
    assert spec.get("framework") == head


# -- the unknown-framework hint names the inference frameworks too --------------------------------
def test_an_unknown_framework_s_hint_lists_the_catalogue_s_frameworks_and_inference_frameworks(real_matrix, cli):
    from provision.plan.context import inference_frameworks

    want = [f.id for f in real_matrix.frameworks] + [p.id for p in inference_frameworks(real_matrix)]
    assert {"onnxruntime", "tensorrt"} <= set(want)
    with pytest.raises(UnknownId) as caught:
        _plan(real_matrix, framework="jax")
    assert caught.value.hint == f"known: {', '.join(want)}"
    result = cli("plan", "--os", "ubuntu22.04", "--gpu", "l4", "--framework", "jax")
    assert result.code == 2
    assert result.err.splitlines()[1] == f"hint: known: {', '.join(want)}"


# -- start-up: a plan builds only the stack packages it touches (provision/matrix/cache.py) ----------
@pytest.mark.parametrize(
    ("framework", "with_", "built"),
    [
        ("pytorch", (), []),
        ("pytorch", ("deepspeed", "onnxruntime"), ["deepspeed", "onnxruntime"]),
        ("onnxruntime", (), ["onnxruntime"]),
        ("pytorch", ("torch-tensorrt",), ["torch-tensorrt", "tensorrt"]),
    ],
)
def test_a_cached_catalogue_builds_only_the_stack_packages_a_plan_touches(
    tmp_path, monkeypatch, framework, with_, built
):
    from support import COMPAT

    from provision.matrix import cache
    from provision.matrix.loader import load_checked
    from provision.matrix.model import LazyStacks

    monkeypatch.setenv("PROVISION_CACHE_DIR", str(tmp_path / "cache"))
    cache.load_cached(COMPAT)  # a miss: checked, then stored
    made = []
    build_stack = cache.build_stack
    monkeypatch.setattr(cache, "build_stack", lambda item, i: made.append(item["id"]) or build_stack(item, i))
    matrix = cache.load_cached(COMPAT)
    assert isinstance(matrix.stacks, LazyStacks)
    plan = resolve(matrix, PlanRequest(os="ubuntu22.04", gpu="h100-sxm", framework=framework, with_=with_))
    assert made == built
    assert [s.id for s in plan.stack] == built
    # the plan is the one a catalogue built whole gives
    whole = load_checked(COMPAT)[0]
    assert plan == resolve(whole, PlanRequest(os="ubuntu22.04", gpu="h100-sxm", framework=framework, with_=with_))
    # listing them builds the rest, each once, in the catalogue's order
    assert matrix.stacks == whole.stacks
    assert sorted(made) == sorted(p.id for p in whole.stacks)


def _stack_lines(cache_dir):
    """The stacks cache file of a cache directory: its path, its first line and its package lines."""
    import json as _json

    path = next(p for p in cache_dir.iterdir() if p.name.startswith("stacks-"))
    first, *lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    return path, _json.loads(first), lines[:-1]


def test_a_stack_package_the_cache_cannot_build_is_checked_anew(tmp_path, monkeypatch):
    import json as _json

    from support import COMPAT

    from provision.matrix import cache
    from provision.matrix.loader import load_checked

    monkeypatch.setenv("PROVISION_CACHE_DIR", str(tmp_path / "cache"))
    cache.load_cached(COMPAT)
    stacks, head, lines = _stack_lines(tmp_path / "cache")
    package = _json.loads(lines[3])
    del package["releases"]  # valid JSON, a package that no longer builds
    stacks.write_bytes(
        b"\n".join([_json.dumps(head).encode(), *lines[:3], _json.dumps(package).encode(), *lines[4:], b""])
    )
    matrix = cache.load_cached(COMPAT)
    assert matrix.stack(package["id"]) == load_checked(COMPAT)[0].stack(package["id"])
    # a line that holds another package than the index names there
    stacks, head, lines = _stack_lines(tmp_path / "cache")
    lines[0], lines[1] = lines[1], lines[0]
    stacks.write_bytes(b"\n".join([_json.dumps(head).encode(), *lines, b""]))
    first = head["index"][0][0]
    assert cache.load_cached(COMPAT).stack(first) == load_checked(COMPAT)[0].stack(first)
    for broken in ("{broken", stacks.read_text().rstrip("\n"), stacks.read_text() + "{}\n"):  # cut short, a line more
        stacks.write_text(broken)
        assert len(cache.load_cached(COMPAT).stacks) == len(head["index"])
        assert cache.cached_raw(COMPAT)["stacks"] == load_checked(COMPAT)[1]["stacks"]


def test_a_stack_plan_parses_only_the_lines_of_the_packages_it_builds(tmp_path, monkeypatch):
    """The stacks cache file holds one package a line: a plan with two stack packages reads the
    index and their two lines; the other packages' lines are never parsed (garbage there is not
    noticed, and compat/ is not checked anew), and matrix check's cached_raw gives the document
    back as stacks.yaml holds it."""
    from support import COMPAT

    from provision.matrix import cache
    from provision.matrix.loader import load_checked

    monkeypatch.setenv("PROVISION_CACHE_DIR", str(tmp_path / "cache"))
    cache.load_cached(COMPAT)
    raw = load_checked(COMPAT)[1]
    assert cache.cached_raw(COMPAT)["stacks"] == raw["stacks"]
    stacks, head, lines = _stack_lines(tmp_path / "cache")
    assert [ident for ident, _, _ in head["index"]] == [p["id"] for p in raw["stacks"]["packages"]]
    wanted = {"deepspeed", "onnxruntime"}
    kept = [line if ident in wanted else b"not json" for (ident, _, _), line in zip(head["index"], lines, strict=True)]
    stacks.write_bytes(b"\n".join([stacks.read_bytes().split(b"\n")[0], *kept, b""]))

    def no_check(_compat):
        raise AssertionError("compat/ checked anew")

    monkeypatch.setattr(cache, "load_checked", no_check)
    matrix = cache.load_cached(COMPAT)
    plan = resolve(matrix, PlanRequest(os="ubuntu22.04", gpu="h100-sxm", framework="pytorch", with_=tuple(wanted)))
    assert sorted(s.id for s in plan.stack) == sorted(wanted)
    assert repr(matrix.stacks) == "LazyStacks(2 built)"


# -- inventory check's plan lines name the framework and the stack (provision/cli/fleet.py plan_line) --
def test_inventory_check_names_each_group_s_framework_and_stack_packages(cli, tmp_path, real_matrix, monkeypatch):
    import yaml
    from support import COMPAT

    monkeypatch.setenv("PROVISION_COMPAT_DIR", str(COMPAT))
    groups = {
        "train": {"os": "ubuntu22.04", "gpu": "h100-sxm", "framework": "pytorch", "with": ["deepspeed", "onnxruntime"]},
        "trt": {"os": "ubuntu22.04", "gpu": "h100-sxm", "framework": "pytorch", "with": ["torch-tensorrt"]},
        "serve": {"os": "ubuntu22.04", "gpu": "l4", "framework": "onnxruntime"},
        "bare": {"os": "ubuntu22.04", "gpu": "l4"},
    }
    hosts = {
        name: {"hosts": {f"n{i}": {"ansible_host": "127.0.0.1", "ansible_port": 2201 + i}}}
        for i, name in enumerate(groups)
    }
    (tmp_path / "inv.yml").write_text(yaml.safe_dump({"all": {"children": hosts}}))
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    result = cli("inventory", "check", "-i", str(tmp_path / "inv.yml"), "--fleet", str(tmp_path / "fleet.yaml"))
    assert result.code == 0, result
    lines = " ".join(result.out.split())  # echo_wrapped may wrap a long line
    for name, group in groups.items():
        plan = _plan(real_matrix, gpu=group["gpu"], framework=group.get("framework"), with_=group.get("with", ()))
        head = f"plan {name}: {group['gpu']} on ubuntu22.04, driver {plan.driver.version}, CUDA {plan.cuda.version}"
        if name == "train":
            fw, ds, ort = plan.framework, _one(plan, "deepspeed"), _one(plan, "onnxruntime")
            want = f"{head}, pytorch=={fw.version} with deepspeed=={ds.version} and onnxruntime=={ort.version} "
        elif name == "trt":
            fw, tt, trt = plan.framework, _one(plan, "torch-tensorrt"), _one(plan, "tensorrt")
            assert (tt.role, trt.role) == ("with", "requires")
            want = f"{head}, pytorch=={fw.version} with torch-tensorrt=={tt.version} and tensorrt=={trt.version} "
        elif name == "serve":
            want = f"{head}, onnxruntime=={_one(plan, 'onnxruntime').version} "
        else:
            assert plan.framework is None
            assert not plan.stack
            want = f"{head} "
        assert want in lines + " ", (want, result.out)


def test_a_plan_leaves_its_objects_to_the_os_at_exit_without_collecting_them(tmp_path):
    """provision plan freezes every object out of the cyclic collector at exit (run_plan registers
    gc.freeze with atexit, once however many plans a process runs), so the interpreter's shutdown
    does not collect the catalogue cycle by cycle; the output is whole and atexit functions still run."""
    import os
    import subprocess
    import sys

    from support import COMPAT

    script = (
        "import atexit, gc, os, sys\n"
        "atexit.register(lambda: os.write(2, f'frozen at exit: {gc.get_freeze_count()}\\n'.encode()))\n"
        "registered = []\n"
        "real = atexit.register\n"
        "atexit.register = lambda f, *a, **k: registered.append(f) or real(f, *a, **k)\n"
        "from provision.cli import main\n"
        "args = ['--compat-dir', sys.argv[1], 'plan', '--os', 'ubuntu22.04', '--gpu', 'h100-sxm', '--framework',\n"
        "        'pytorch', '--with', 'deepspeed', '--format', 'json']\n"
        "codes = [main(args), main(args)]\n"
        "os.write(2, f'codes {codes} registered {[f.__qualname__ for f in registered]}\\n'.encode())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PROVISION_NO_CACHE"}
    env["PROVISION_CACHE_DIR"] = str(tmp_path / "cache")
    done = subprocess.run(
        [sys.executable, "-c", script, str(COMPAT)], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    codes, frozen = done.stderr.splitlines()
    assert codes == "codes [0, 0] registered ['freeze']"
    assert int(frozen.removeprefix("frozen at exit: ")) > 10_000  # the catalogue and the plan modules
    plans = done.stdout.replace("}\n{", "}\n\n{").split("\n\n")
    assert len(plans) == 2
    assert json.loads(plans[0]) == json.loads(plans[1])
