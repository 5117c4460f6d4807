#!/usr/bin/env python3
"""What `provision plan` and `provision matrix check` print, recorded once and compared later: the
proof that a change meant to move code (issue 24's resolver split) changes no output.

    python tests/golden/plan_outputs.py record  [--compat-dir DIR] [--out FILE] [--full]
    python tests/golden/plan_outputs.py compare [--compat-dir DIR] [--golden FILE]

The cases are drawn from the catalogue itself, deterministically (no randomness): every (OS, GPU)
pair as a table and as JSON, then a few hundred pinned requests (--driver branches and releases,
--cuda lines and releases, --cudnn, --framework pytorch==X / tensorflow==X / bare names and
aliases, --image-os, --host-only, --policy latest, --explain, bad input), refusals included; each
case records exit code, stdout and stderr. `provision plan` has no --platform flag (fleet files
and matrix check use PlanRequest.platform), so every (OS, platform, GPU) request is resolved
through the API and its plan document or refusal (message, eliminations, hint, summary, rules)
recorded. Last, `provision matrix check --format json` without its timing. Every command runs
in-process through provision.cli.main at COLUMNS=100. A record holds each case's sha256 (--full:
the text itself, for reading a difference); compare names each case that differs.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "plan-outputs.fixture.json"


def _run(args: list[str]) -> tuple[int, str, str]:
    from provision.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # click's own exits
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def _every(seq, step: int, offset: int = 0) -> list:
    """Every step-th item from offset (a deterministic spread over a list)."""
    return [x for i, x in enumerate(seq) if (i + offset) % step == 0]


def cases(matrix) -> list[list[str]]:
    """The `provision plan` argument lists, in a fixed order derived from the catalogue."""
    oses = [o.id for o in matrix.os_releases]
    gpus = [g.id for g in matrix.gpus] + [g.id for g in matrix.gpu_groups]
    out: list[list[str]] = []
    for os_id in oses:
        for gpu in gpus:
            out.append(["--os", os_id, "--gpu", gpu])
            out.append(["--os", os_id, "--gpu", gpu, "--format", "json"])
    # a spread of (OS, GPU) subjects for the pinned requests: each GPU once, OSes in turn
    subjects = [(oses[i % len(oses)], gpu) for i, gpu in enumerate(gpus)]
    few = subjects[:: max(1, len(subjects) // 6)]
    branches = [str(b.branch) for b in matrix.drivers]
    releases = [str(b.releases[0].version) for b in matrix.drivers if b.releases]
    releases += [str(b.releases[-1].version) for b in matrix.drivers if len(b.releases) > 1]
    lines = sorted({".".join(str(c.version).split(".")[:2]) for c in matrix.cuda})
    full = [str(c.version) for c in matrix.cuda]
    for i, (os_id, gpu) in enumerate(subjects):
        base = ["--os", os_id, "--gpu", gpu]
        for b in _every(branches, 3, i):
            out.append([*base, "--driver", b])
        for r in _every(releases, 5, i):
            out.append([*base, "--driver", r])
        for line in _every(lines, 3, i):
            out.append([*base, "--cuda", line])
        out.append([*base, "--cuda", full[i % len(full)]])
        out.append([*base, "--policy", "latest"])
        out.append([*base, "--host-only"])
        out.append([*base, "--host-only", "--format", "json"])
    for fw in matrix.frameworks:
        for j, rel in enumerate(fw.releases):
            os_id, gpu = subjects[j % len(subjects)]
            out.append(["--os", os_id, "--gpu", gpu, "--framework", f"{fw.id}=={rel.version}"])
            out.append(["--os", os_id, "--gpu", gpu, "--framework", f"{fw.id}=={rel.version}", "--format", "json"])
    names = ["pytorch", "torch", "tensorflow", "tf", "TensorFlow", "PyTorch==2.5.1", "jax", "torch==9.9", "torch==x"]
    for os_id, gpu in few:
        base = ["--os", os_id, "--gpu", gpu]
        for name in names:
            out.append([*base, "--framework", name])
        for cudnn in ("8", "9", "9.1", "9.1.0.70", "7", "abc"):
            out.append([*base, "--cudnn", cudnn])
            out.append([*base, "--cudnn", cudnn, "--explain"])
        for image_os in ("ubuntu24.04", "ubi9", "rocky9", "rockylinux8", "ubi10", "windows"):
            out.append([*base, "--image-os", image_os])
        out.append([*base, "--image-os", "ubi9", "--framework", "pytorch", "--format", "json"])
        out.append([*base, "--host-only", "--cuda", lines[-1]])
        out.append([*base, "--host-only", "--driver", branches[-1]])
        out.append([*base, "--driver", "abc"])
        out.append([*base, "--driver", "123"])
        out.append([*base, "--cuda", "99.9"])
        out.append([*base, "--cuda", "12"])
        out.append([*base, "--driver", branches[-1], "--framework", "pytorch", "--explain"])
        out.append([*base, "--driver", branches[-1], "--cuda", lines[-1]])
        out.append([*base, "--driver", branches[0], "--cuda", lines[0], "--framework", "tensorflow"])
        out.append([*base, "--cuda", lines[0], "--framework", "pytorch"])
        for fmt in ("yaml", "ansible", "markdown"):
            out.append([*base, "--framework", "pytorch", "--format", fmt])
    out.append(["--os", "nosuchos", "--gpu", gpus[0]])
    out.append(["--os", oses[0], "--gpu", "nosuchgpu"])
    out.append(["--os", oses[0], "--gpu", gpus[0], "--policy", "newest"])
    return [["plan", *c] for c in out]


def _refusal(exc) -> dict:
    return {
        "type": type(exc).__name__,
        "message": exc.message,
        "hint": exc.hint,
        "eliminations": [list(e) for e in getattr(exc, "eliminations", None) or []],
        "summary": list(getattr(exc, "summary", None) or []),
        "kinds": sorted(getattr(exc, "kinds", None) or []),
    }


def platform_outcomes(matrix) -> dict[str, str]:
    """Every (OS, platform, GPU) request through the API, as matrix check makes them."""
    from provision.errors import InputError
    from provision.plan.model import PlanRequest
    from provision.plan.resolve import resolve

    got = {}
    for os_rel in matrix.os_releases:
        for platform in matrix.platforms:
            for gpu in (*platform.gpus, None):
                for framework in (None, "pytorch"):
                    req = PlanRequest(os_rel.id, gpu, platform=platform.id, framework=framework)
                    try:
                        doc = {"plan": resolve(matrix, req).to_dict()}
                    except InputError as exc:
                        doc = {"refused": _refusal(exc)}
                    got[f"api {os_rel.id} {platform.id} {gpu} {framework}"] = json.dumps(doc, sort_keys=True)
    return got


def outcomes(compat: str) -> dict[str, str]:
    """case -> the text it printed (exit code, stdout, stderr). The caller sets COLUMNS=100 and
    PROVISION_COMPAT_DIR=compat in the environment (ENV)."""
    assert {k: os.environ.get(k) for k in ENV} == env(compat), "set the environment first"
    from provision.matrix.loader import load_matrix

    matrix = load_matrix(compat)
    got: dict[str, str] = {}
    for args in cases(matrix):
        code, out, err = _run(args)
        got[" ".join(args)] = f"exit {code}\n--- stdout\n{out}--- stderr\n{err}"
    got.update(platform_outcomes(matrix))
    code, out, err = _run(["matrix", "check", "--format", "json"])
    doc = json.loads(out) if out.strip().startswith("{") else out
    if isinstance(doc, dict):
        doc.pop("seconds", None)
    got["matrix check --format json"] = f"exit {code}\n{json.dumps(doc, sort_keys=True)}\n--- stderr\n{err}"
    return got


ENV = ("COLUMNS", "PROVISION_COMPAT_DIR")


def env(compat: str) -> dict[str, str]:
    return {"COLUMNS": "100", "PROVISION_COMPAT_DIR": compat}


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def compare(want: dict[str, str], got: dict[str, str]) -> tuple[list[str], list[str]]:
    """(recorded cases whose output differs or is gone, cases not recorded); a record holds the
    text or its digest."""
    differ = [k for k in want if k not in got or (want[k] != got[k] and want[k] != digest(got[k]))]
    return differ, [k for k in got if k not in want]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("record", "compare"))
    parser.add_argument("--compat-dir", default=None, help="the catalogue (default: the fixture catalogue)")
    parser.add_argument("--out", "--golden", dest="golden", default=str(GOLDEN))
    parser.add_argument("--full", action="store_true", help="record the texts, not their digests")
    args = parser.parse_args(argv)
    compat = args.compat_dir or str(_fixture_compat())
    os.environ.update(env(compat))
    got = outcomes(compat)
    if args.mode == "record":
        doc = {k: (v if args.full else digest(v)) for k, v in got.items()}
        Path(args.golden).write_text(json.dumps(doc, indent=0, sort_keys=False) + "\n")
        refused = sum(1 for v in got.values() if not v.startswith("exit 0") and not v.startswith('{"plan"'))
        print(f"recorded {len(doc)} cases ({refused} not exit 0 or refused) in {args.golden}")
        return 0
    want = json.loads(Path(args.golden).read_text())
    differ, extra = compare(want, got)
    for k in differ[:20]:
        print(f"differs: {k}")
        if k in got and len(want[k]) != 64:
            import difflib

            sys.stdout.writelines(list(difflib.unified_diff(want[k].splitlines(True), got[k].splitlines(True)))[:40])
    for k in extra[:20]:
        print(f"not recorded: {k}")
    print(f"{len(want)} recorded cases, {len(want) - len(differ)} identical, {len(differ)} differ, {len(extra)} new")
    return 1 if differ or extra else 0


def _fixture_compat() -> Path:
    """The fixture catalogue with the real schemas beside it (tests/support.make_compat), in a
    temporary folder."""
    import tempfile

    sys.path.insert(0, str(ROOT / "tests"))
    from support import make_compat

    return make_compat(Path(tempfile.mkdtemp(prefix="golden-")) / "compat")


if __name__ == "__main__":
    sys.exit(main())
