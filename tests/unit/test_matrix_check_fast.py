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
    """Builds share CUDA candidates by their CUDA line and base image flavour (_cuda_build_key):
    builds that differ in either get their own, including where the outcome differs."""
    from provision.plan import resolve as r

    matrix = real_matrix
    build = next(b for fw in matrix.frameworks for rel in fw.releases for b in rel.builds)
    lines = sorted({major_minor(c.version) for c in matrix.cuda})
    variants = [build._replace(libraries=lib, cuda=line) for lib in ("wheels", "system") for line in lines[-4:]]
    differ = 0
    for os_rel in matrix.os_releases:
        for gpu in matrix.gpus:
            memo: dict = {}
            outcomes = []
            for b in variants + variants:
                try:
                    memoised, direct = (r.context(matrix, PlanRequest(os_rel.id, gpu.id)) for _ in range(2))
                except InputError:
                    break
                got = list(r._memo_cudas(memoised, b, memo))
                assert got == list(r._cuda_candidates(direct, b)), (os_rel.id, gpu.id, b.cuda, b.libraries)
                assert (memoised.eliminated, memoised.rule_of, memoised.kinds) == (
                    direct.eliminated,
                    direct.rule_of,
                    direct.kinds,
                )
                outcomes.append((got, memoised.eliminated))
            differ += len({repr(o) for o in outcomes[: len(variants)]}) > len(lines[-4:])
    assert differ, "somewhere the base image flavour changes the candidates (else this test proves little)"
