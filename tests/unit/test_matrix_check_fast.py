"""What makes `provision matrix check` fast changes nothing it reports: the catalogue-side tables
(provision.matrix.memo), which share work between requests, give every plan and every refusal
(message, eliminations in order, rules, summary) that a cold resolve() gives, in any order; and
the validated-data cache stands in for reading and schema-checking only data files that passed
byte for byte before."""

import json

import pytest

from provision.errors import InputError, NoCompatibleStack
from provision.matrix import memo
from provision.plan.check import check
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve
from provision.versions import major_minor


def outcome(matrix, request, *, cold: bool = False):
    """resolve()'s answer; cold: with the matrix's tables forgotten first (nothing shared)."""
    if cold:
        memo.forget(matrix)
    try:
        return resolve(matrix, request, suggest=False)
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
def test_the_shared_tables_give_what_a_cold_resolve_gives(catalogue, request):
    matrix = request.getfixturevalue(catalogue)
    cold = matrix._replace()  # the same catalogue as another object: tables of its own, forgotten each time
    assert cold == matrix
    assert cold is not matrix
    live = catalogue == "real_matrix"
    memo.forget(matrix)
    compared = 0
    for req in requests(matrix, frameworks_per_pair=6 if live else None):
        assert outcome(matrix, req) == outcome(cold, req, cold=True), req
        compared += 1
    assert compared > 100
    assert memo.table(matrix), "the tables were used"
    # in another order (refusals first, then plans) against the tables the first pass filled
    for req in reversed(list(requests(matrix, frameworks_per_pair=3))):
        assert outcome(matrix, req) == outcome(cold, req, cold=True), req


def test_check_counts_the_same_with_cold_tables(fixture_matrix, monkeypatch):
    import provision.plan.resolve as resolver

    memo.forget(fixture_matrix)
    shared = check(fixture_matrix)
    plain = resolver.resolve

    def cold(matrix, req, **kw):
        memo.forget(matrix)
        return plain(matrix, req, **kw)

    monkeypatch.setattr(resolver, "resolve", cold)
    alone = check(fixture_matrix)
    assert shared.groups == alone.groups
    assert shared.refusals == alone.refusals
    assert shared.unresolved_pairs == alone.unresolved_pairs


def test_tables_belong_to_one_catalogue_object():
    """A table is the matrix object's own: an equal copy starts empty, a forgotten one is made
    anew, and only the last KEEP catalogues keep theirs (each holds its matrix, so an identity is
    never reused while its table lives)."""
    calls = []

    @memo.per_matrix
    def double(matrix, x):
        calls.append((id(matrix), x))
        return (matrix, 2 * x)

    from types import SimpleNamespace

    a, b = SimpleNamespace(name="catalogue"), SimpleNamespace(name="catalogue")  # equal, distinct objects
    assert a == b
    assert a is not b
    assert double(a, 1) == (a, 2)
    assert double(a, 1)[0] is a
    assert double(b, 1)[0] is b, "an equal catalogue gets its own answer"
    assert len(calls) == 2
    memo.forget(a)
    double(a, 1)
    assert len(calls) == 3, "forgotten: worked out anew"
    many = [SimpleNamespace(name=f"c{i}") for i in range(memo.KEEP + 2)]
    for c in many:
        double(c, 1)
    assert id(a) not in memo._TABLES
    assert all(id(c) in memo._TABLES for c in many[-memo.KEEP + 1 :])
    count = len(calls)
    double(many[-1], 1)
    assert len(calls) == count, "the catalogue asked last keeps its table"
    memo.forget()
    assert not memo._TABLES


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


def test_the_cuda_tables_tell_builds_apart_by_what_they_read(real_matrix):
    """Each CUDA release's images are kept per compute capability, architecture, image OS, host and
    base image flavour (search.cuda_release, search.cuda_walk), the releases a request reaches per
    CUDA pin and build line (search.cuda_lines): the tables shared by every OS and GPU, as matrix
    check shares them, give each build the candidates and eliminations a cold search gives,
    including where the outcome differs."""
    from provision.plan import context as c
    from provision.plan import search as s

    matrix = real_matrix
    cold_matrix = matrix._replace()
    build = next(b for fw in matrix.frameworks for rel in fw.releases for b in rel.builds)
    lines = sorted({major_minor(c.version) for c in matrix.cuda})
    variants = [build._replace(libraries=lib, cuda=line) for lib in ("wheels", "system") for line in lines[-4:]]
    variants += [None, build._replace(cuda="9.9")]  # no framework; a line the catalogue lacks
    memo.forget(matrix)
    differ = 0
    for os_rel in matrix.os_releases:
        for gpu in matrix.gpus:
            outcomes = []
            for b in variants + variants:
                for pin in (None, lines[-1], str(matrix.cuda[0].version)):
                    req = PlanRequest(os_rel.id, gpu.id, cuda=pin)
                    memo.forget(cold_matrix)
                    try:
                        shared, cold = c.context(matrix, req), c.context(cold_matrix, req)
                    except InputError:
                        continue
                    got = list(s.cuda_candidates(shared, b))
                    assert got == list(s.cuda_candidates(cold, b)), (os_rel.id, gpu.id, pin, b)
                    assert (shared.eliminated, shared.kinds) == (cold.eliminated, cold.kinds)
                    if pin is None:
                        outcomes.append((got, shared.eliminated))
            differ += len({repr(o) for o in outcomes[:8]}) > len(lines[-4:])
    assert differ, "somewhere the base image flavour changes the candidates (else this test proves little)"
