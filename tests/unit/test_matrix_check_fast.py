"""What makes `provision matrix check` fast changes nothing it reports: resolve(..., memo=), which
shares work between requests, gives every plan and every refusal (message, eliminations in order,
rules, summary) that resolve() gives without it, in any order; and the validated-data cache stands
in for reading and schema-checking only data files that passed byte for byte before."""

import json

import pytest

from provision.errors import InputError, NoCompatibleStack
from provision.plan.check import check
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve
from provision.versions import major_minor


def outcome(matrix, request, memo):
    try:
        return resolve(matrix, request, suggest=False, memo=memo)
    except NoCompatibleStack as exc:
        return ("refused", exc.message, exc.hint, exc.details, exc.eliminations, sorted(exc.kinds), exc.summary)
    except InputError as exc:
        return (type(exc).__name__, exc.message, exc.hint, exc.details)


def requests(matrix, frameworks_per_pair: int | None):
    lines = sorted({major_minor(c.version) for c in matrix.cuda})
    releases = [f"{fw.id}=={r.version}" for fw in matrix.frameworks for r in fw.releases]
    for o in matrix.os_releases:
        for g in [g.id for g in matrix.gpus] + [g.id for g in matrix.gpu_groups]:
            yield PlanRequest(o.id, g)
            yield PlanRequest(o.id, g, policy="latest")
            yield PlanRequest(o.id, g, driver=str(matrix.drivers[-1].branch))
            yield PlanRequest(o.id, g, cudnn="9")
            for line in lines:
                yield PlanRequest(o.id, g, cuda=line)
            yield PlanRequest(o.id, g, cuda=lines[-1], policy="latest")
            yield PlanRequest(o.id, g, cuda=str(matrix.cuda[-1].version), driver=str(matrix.drivers[0].branch))
            yield PlanRequest(o.id, g, framework="pytorch")
            for fw in releases[:frameworks_per_pair]:
                yield PlanRequest(o.id, g, framework=fw)
                yield PlanRequest(o.id, g, framework=fw, cuda=lines[-1])


@pytest.mark.parametrize("catalogue", ["fixture_matrix", "real_matrix"])
def test_a_shared_memo_gives_what_resolve_gives_alone(catalogue, request):
    matrix = request.getfixturevalue(catalogue)
    live = catalogue == "real_matrix"
    memo: dict = {}
    compared = 0
    for req in requests(matrix, frameworks_per_pair=6 if live else None):
        assert outcome(matrix, req, memo) == outcome(matrix, req, None), req
        compared += 1
    assert compared > 100
    assert memo, "the memo was used"
    # in another order (refusals first, then plans) against the memo the first pass filled
    for req in reversed(list(requests(matrix, frameworks_per_pair=3))):
        assert outcome(matrix, req, memo) == outcome(matrix, req, None), req


def test_check_counts_the_same_with_the_memo(fixture_matrix, monkeypatch):
    import provision.plan.resolve as resolver

    with_memo = check(fixture_matrix)
    plain = resolver.resolve
    monkeypatch.setattr(resolver, "resolve", lambda matrix, req, **kw: plain(matrix, req, suggest=kw["suggest"]))
    without = check(fixture_matrix)
    assert with_memo.groups == without.groups
    assert with_memo.refusals == without.refusals
    assert with_memo.unresolved_pairs == without.unresolved_pairs


def test_check_reads_the_cache_only_for_the_bytes_that_passed(cli, tmp_path, monkeypatch):
    from support import make_compat

    from provision.matrix import loader

    monkeypatch.setenv("PROVISION_CACHE_DIR", str(tmp_path / "cache"))
    compat = make_compat(tmp_path / "compat")
    first = cli("matrix", "check", "--format", "json", "--compat-dir", str(compat))
    assert first.code == 0, first
    assert len(list((tmp_path / "cache").glob("matrix-*.json"))) == 1, "a passing check stores the documents"

    reads = []
    read_raw = loader.read_raw
    monkeypatch.setattr(loader, "read_raw", lambda d: reads.append(d) or read_raw(d))
    again = cli("matrix", "check", "--format", "json", "--compat-dir", str(compat))
    assert again.code == 0, again
    assert reads == [], "unchanged data comes from the cache"
    strip = lambda out: {k: v for k, v in json.loads(out).items() if k != "seconds"}  # noqa: E731
    assert strip(again.out) == strip(first.out)

    monkeypatch.setenv("PROVISION_NO_CACHE", "1")
    assert strip(cli("matrix", "check", "--format", "json", "--compat-dir", str(compat)).out) == strip(first.out)
    assert len(reads) == 1, "PROVISION_NO_CACHE=1 reads and checks the files"
    monkeypatch.delenv("PROVISION_NO_CACHE")

    cuda = (compat / "cuda.yaml").read_text()
    (compat / "cuda.yaml").write_text(cuda.replace('min_driver: "580.95.05"', "min_driver: 580.95", 1))
    broken = cli("matrix", "check", "--compat-dir", str(compat))
    assert broken.code == 3, broken
    assert "cuda.yaml: releases[0](13.0.2).min_driver" in broken.err
    assert len(reads) == 2


def test_the_cuda_memo_tells_builds_apart_by_what_it_reads(real_matrix):
    """Each CUDA release's images are kept per compute capability, architecture, image OS, host and
    base image flavour (_cuda_release), the releases a request reaches per CUDA pin and build line
    (_cuda_lines): one memo shared by every OS and GPU, as matrix check shares it, gives each build
    the candidates and eliminations it gives without one, including where the outcome differs."""
    from provision.plan import resolve as r

    matrix = real_matrix
    build = next(b for fw in matrix.frameworks for rel in fw.releases for b in rel.builds)
    lines = sorted({major_minor(c.version) for c in matrix.cuda})
    variants = [build._replace(libraries=lib, cuda=line) for lib in ("wheels", "system") for line in lines[-4:]]
    variants += [None, build._replace(cuda="9.9")]  # no framework; a line the catalogue lacks
    memo: dict = {}
    differ = 0
    for os_rel in matrix.os_releases:
        for gpu in matrix.gpus:
            outcomes = []
            for b in variants + variants:
                for pin in (None, lines[-1], str(matrix.cuda[0].version)):
                    req = PlanRequest(os_rel.id, gpu.id, cuda=pin)
                    try:
                        memoised, direct = r.context(matrix, req, memo), r.context(matrix, req)
                    except InputError:
                        continue
                    got = list(r._cuda_candidates(memoised, b))
                    assert got == list(r._cuda_candidates(direct, b)), (os_rel.id, gpu.id, pin, b)
                    assert (memoised.eliminated, memoised.rule_of, memoised.kinds) == (
                        direct.eliminated,
                        direct.rule_of,
                        direct.kinds,
                    )
                    if pin is None:
                        outcomes.append((got, memoised.eliminated))
            differ += len({repr(o) for o in outcomes[:8]}) > len(lines[-4:])
    assert differ, "somewhere the base image flavour changes the candidates (else this test proves little)"
    assert any(k[0] == "cuda-release" for k in memo)
    assert any(k[0] == "cuda-lines" for k in memo)


def test_the_parts_a_memo_keeps_are_the_parts_built_alone(real_matrix):
    """Plans built with a shared memo hold the same parts as plans built without one, though the
    parts come from requests for other OSes, GPUs, pins and policies; and a refusal's reasons too."""
    matrix = real_matrix
    lines = sorted({major_minor(c.version) for c in matrix.cuda})
    fws = [f"{fw.id}=={r.version}" for fw in matrix.frameworks for r in fw.releases[:2]]
    branches = [str(b.branch) for b in matrix.drivers[:3]] + [str(matrix.drivers[0].releases[-1].version)]
    memo: dict = {}
    seen = {"plans": 0, "refusals": 0}
    for o in matrix.os_releases:
        for g in [g.id for g in matrix.gpus][::3]:
            for req in (
                PlanRequest(o.id, g, driver=branches[0], policy="latest"),
                *(PlanRequest(o.id, g, driver=b, cuda=lines[-2]) for b in branches),
                *(PlanRequest(o.id, g, framework=fw, cudnn="9") for fw in fws),
                PlanRequest(o.aliases[0] if o.aliases else o.id, g, cuda=lines[-3], policy="latest"),
            ):
                got = outcome(matrix, req, memo)
                assert got == outcome(matrix, req, None), req
                seen["refusals" if got[0] == "refused" else "plans"] += 1
    assert seen["plans"] > 50, seen
    assert seen["refusals"] > 10, seen
    assert {k[0] for k in memo} >= {"host-part", "driver-part", "image-part", "framework-part", "not-tried"}
