"""The image's smoke test: imports what the plan installs and checks what the plan promises.

Rendered images carry it as /opt/provision/smoke.py beside smoke.json (what the plan promises,
written by `provision render`); run it as `python /opt/provision/smoke.py`. Checks:

- every planned package imports, and its installed version is the lock's;
- ONNX Runtime: get_available_providers() includes the providers the plan promises (CUDA, and
  TensorRT where TensorRT is planned);
- PyTorch: torch.cuda.is_available(), and torch.backends.cudnn.version()'s major is the plan's;
- TensorFlow: a GPU is listed by tf.config.list_physical_devices("GPU");
- DeepSpeed: nvcc's CUDA is torch's (op_builder's assert_no_cuda_mismatch: needs nvcc and torch
  only, so it runs with or without a GPU) and the promised ops are compatible (ds_report's
  is_compatible(), with a GPU).

Without a GPU (no GPU device node, or CUDA not available) it runs what it can (imports, versions,
the providers listed, DeepSpeed's nvcc against torch.version.cuda), prints each check it skipped and why, and exits 0 when those pass. With a GPU,
any failed promise exits 1. Exit 2: smoke.json is missing or not a promise document.

Standard library only, and Python 3.6 syntax: it runs in every image the templates render.
"""

import importlib
import json
import os
import re
import sys
import traceback

SCHEMA = 1
DEVICE = os.environ.get("PROVISION_SMOKE_DEVICE", "/dev/nvidia0")


class Report:
    def __init__(self):
        self.failed = []
        self.skipped = []

    def ok(self, what):
        print("ok: " + what)

    def fail(self, what):
        self.failed.append(what)
        print("FAIL: " + what)

    def skip(self, what, why):
        self.skipped.append(what)
        print("skipped: " + what + " (" + why + ")")


def installed_version(distribution):
    try:
        from importlib import metadata
    except ImportError:  # Python < 3.8
        import pkg_resources

        return pkg_resources.get_distribution(distribution).version
    return metadata.version(distribution)


def normal(version):
    return re.sub(r"[-_.]+", ".", str(version).strip().lower())


def load(path):
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
    except (OSError, ValueError) as exc:
        print("error: cannot read the promises " + path + ": " + str(exc))
        sys.exit(2)
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("packages"), list):
        print("error: " + path + " is not a provision smoke promise document (schema " + str(SCHEMA) + ")")
        sys.exit(2)
    return doc


def check_packages(doc, report):
    modules = {}
    for package in doc["packages"]:
        name = package["module"]
        try:
            modules[package["id"]] = importlib.import_module(name)
        except Exception as exc:  # an import may fail with anything (a missing CUDA library: OSError)
            report.fail("import " + name + ": " + type(exc).__name__ + ": " + str(exc).splitlines()[0][:200])
            continue
        report.ok("import " + name)
        try:
            found = installed_version(package["distribution"])
        except Exception as exc:
            report.fail(package["distribution"] + " has no installed metadata: " + type(exc).__name__)
            continue
        if normal(found) == normal(package["version"]):
            report.ok(package["distribution"] + " " + found)
        else:
            report.fail(package["distribution"] + " " + found + " is installed, the plan " + package["version"])
    return modules


def check_onnxruntime(ort, promise, report):
    providers = list(ort.get_available_providers())
    for provider in promise["providers"]:
        if provider in providers:
            report.ok("onnxruntime provider " + provider)
        else:
            report.fail("onnxruntime lists no " + provider + " (it lists " + ", ".join(providers) + ")")


def check_torch(torch, promise, gpu, report):
    if not torch.cuda.is_available():
        if gpu:
            report.fail("torch.cuda.is_available() is False on a host with " + DEVICE)
        else:
            report.skip("torch.cuda.is_available()", "no GPU: " + DEVICE + " is absent")
            report.skip("torch.backends.cudnn.version()", "no GPU")
        return False
    report.ok("torch.cuda.is_available()")
    version = torch.backends.cudnn.version()
    major = None if version is None else int(version) // (10000 if int(version) >= 10000 else 1000)
    if major == promise["cudnn_major"]:
        report.ok("cuDNN " + str(version) + " (major " + str(major) + ")")
    else:
        report.fail(
            "torch.backends.cudnn.version() is " + str(version) + ", the plan cuDNN " + str(promise["cudnn_major"])
        )
    return True


def check_tensorflow(tf, gpu, report):
    if not gpu:
        report.skip("tf.config.list_physical_devices('GPU')", "no GPU: " + DEVICE + " is absent")
        return
    if tf.config.list_physical_devices("GPU"):
        report.ok("TensorFlow lists a GPU")
    else:
        report.fail("tf.config.list_physical_devices('GPU') is empty on a host with " + DEVICE)


def check_deepspeed(promise, cuda, report):
    # nvcc against torch.version.cuda needs neither a GPU nor CUDA at run time, only the image's nvcc
    # and torch: it runs everywhere ("Installed CUDA version X does not match the version torch was
    # compiled with"); the ops' compatibility is asked of a device, and waits for one.
    try:
        from deepspeed.ops.op_builder.builder import assert_no_cuda_mismatch

        assert_no_cuda_mismatch("provision-smoke")
        report.ok("deepspeed: nvcc's CUDA matches torch.version.cuda")
    except Exception as exc:
        report.fail("deepspeed's CUDA check: " + type(exc).__name__ + ": " + str(exc).strip().splitlines()[0][:300])
        return
    if not cuda:
        for op in promise["ops"]:
            report.skip("deepspeed op " + op + " compatible", "no GPU")
        return
    from deepspeed.ops.op_builder.all_ops import ALL_OPS

    for op in promise["ops"]:
        builder = ALL_OPS.get(op)
        if builder is None:
            report.fail("deepspeed has no op " + op)
        elif builder.is_compatible(False):
            report.ok("deepspeed op " + op + " compatible")
        else:
            report.fail("deepspeed op " + op + " is not compatible (see ds_report)")


def main(argv):
    path = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "smoke.json")
    doc = load(path)
    report = Report()
    gpu = os.path.exists(DEVICE)
    if not gpu:
        print("no GPU: " + DEVICE + " is absent; the checks that need one are skipped")
    try:
        modules = check_packages(doc, report)
        cuda = gpu
        if doc.get("torch") and "pytorch" in modules:
            cuda = check_torch(modules["pytorch"], doc["torch"], gpu, report)
        if doc.get("tensorflow") and "tensorflow" in modules:
            check_tensorflow(modules["tensorflow"], gpu, report)
        if doc.get("onnxruntime") and "onnxruntime" in modules:
            check_onnxruntime(modules["onnxruntime"], doc["onnxruntime"], report)
        if doc.get("deepspeed") and "deepspeed" in modules:
            check_deepspeed(doc["deepspeed"], cuda, report)
    except Exception:
        traceback.print_exc()
        report.fail("the smoke test itself raised")
    print(
        "smoke: "
        + str(len(report.failed))
        + " failed, "
        + str(len(report.skipped))
        + " skipped"
        + (": " + "; ".join(report.skipped) if report.skipped else "")
    )
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
