"""`provision inventory scan`: each parser on what real hosts print (tests/fixtures/scan, its
SOURCES.md), the document held to the scan schema, and the hosts that fight back: a command that
forges the batch's marker, floods its output, prints control characters or hangs past the
deadline; a host that refuses the connection or never answers it."""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from pathlib import Path

import jsonschema
import pytest
import yaml
from support import ROOT

from provision.fleet import scan as scanning
from provision.fleet.scan import (
    COMMANDS,
    OUTPUT_LIMIT,
    SCHEMA_FILE,
    Answer,
    Batch,
    Target,
    checked,
    document,
    flavour_from_packages,
    parse_dpkg,
    parse_proc_version,
    parse_rpm,
    parse_versionlock,
    parse_versionlock_toml,
    read_outcome,
    scan,
)
from provision.hostpool import Connection, Outcome
from provision.verify import batch as verify_batch

FIXTURES = ROOT / "tests" / "fixtures" / "scan"
DOCTOR = ROOT / "tests" / "fixtures" / "doctor"
BATCH = Batch(verify_batch.new_token, verify_batch.script, verify_batch.parse)
KEYS = {key for key, _ in COMMANDS}
NOW = "2026-12-01T10:00:00Z"


def capture(name: str) -> str:
    return (FIXTURES / name).read_text()


def ok(text: str) -> Answer:
    return Answer(text, "", 0, 40)


def failed(err: str = "", rc: int = 1) -> Answer:
    return Answer("", err, rc, 40)


def answers(**given: Answer) -> dict[str, Answer]:
    """Every command's answer: the given ones (underscores for dashes), the others failed as on a
    host without the tool."""
    out = {key: failed("not found", 127) for key in KEYS}
    for key, answer in given.items():
        assert key.replace("_", "-") in KEYS, key
        out[key.replace("_", "-")] = answer
    return out


def valid(doc: dict) -> dict:
    with open(SCHEMA_FILE, encoding="utf-8") as handle:
        jsonschema.validate(doc, json.load(handle))
    return doc


def dpkg_query(dpkg_l: str) -> str:
    """`dpkg -l` lines as the scan's dpkg-query prints them: its first three columns are
    ${db:Status-Abbrev} ${binary:Package} ${Version} (SOURCES.md)."""
    out = []
    for line in dpkg_l.splitlines():
        parts = line.split(None, 3)
        if len(parts) >= 3 and re.fullmatch(r"[uirhp][ncHUFWti][ R]?", parts[0]):
            out.append(f"{parts[0]:<3}\t{parts[1]}\t{parts[2]}\n")
    return "".join(out)


def modinfo_field(record: str, field: str) -> str:
    """`modinfo -F FIELD` of a `modinfo` record: that field's values, one a line."""
    values = [line.split(":", 1)[1].strip() for line in record.splitlines() if line.startswith(f"{field}:")]
    return "".join(v + "\n" for v in values)


def query_gpu(smi_q: str) -> str:
    """`nvidia-smi --query-gpu=index,name,pci.device_id,driver_version --format=csv` from an
    `nvidia-smi -q` record: each GPU's Product Name and Device Id, the Driver Version."""
    driver = re.search(r"^Driver Version\s+: (\S+)", smi_q, re.M).group(1)
    names = re.findall(r"^    Product Name\s+: (.+)$", smi_q, re.M)
    devices = re.findall(r"^        Device Id\s+: (0x[0-9A-F]{8})$", smi_q, re.M)
    assert names
    assert len(names) == len(devices)
    rows = [f"{i}, {n}, {d}, {driver}" for i, (n, d) in enumerate(zip(names, devices, strict=True))]
    return "index, name, pci.device_id, driver_version\n" + "\n".join(rows) + "\n"


# -- the parsers, on real captures ----------------------------------------------------------
def test_the_version_file_names_the_loaded_release_and_its_flavour():
    assert parse_proc_version(capture("proc-version__open-565.57.01.txt")) == ("565.57.01", "open")
    assert parse_proc_version(capture("proc-version__proprietary-535.183.06.txt")) == ("535.183.06", "proprietary")
    # a Jetson's L4T release is no driver branch: not a fact the schema can hold
    assert parse_proc_version(capture("proc-version__jetson-35.3.1.txt")) is None


def test_a_loaded_module_is_the_driver_even_when_nvidia_smi_says_otherwise(real_matrix):
    doc = document(
        "gpu1",
        answers(
            proc_version=ok(capture("proc-version__open-565.57.01.txt")),
            nvidia_smi=ok(query_gpu((DOCTOR / "q__2x-h100__hw-slowdown-power-brake.txt").read_text())),
            module_license=ok(modinfo_field(capture("modinfo__proprietary-510.68.02-unsigned.txt"), "license")),
        ),
        real_matrix,
        scanned_at=NOW,
    )
    assert valid(doc)["driver"] == {
        "version": "565.57.01",
        "branch": "565",
        "kernel_module": "open",  # the version file's marker, over modinfo's record on disk
        "loaded": True,
        "signed": None,
        "source": "proc",
    }


@pytest.mark.parametrize(
    ("record", "flavour"),
    [("modinfo__open-590.44.01.txt", "open"), ("modinfo__proprietary-510.68.02-unsigned.txt", "proprietary")],
)
def test_without_the_version_file_modinfo_names_the_flavour_and_the_signature(real_matrix, record, flavour):
    text = capture(record)
    doc = document(
        "gpu1",
        answers(
            proc_version=failed("cat: /proc/driver/nvidia/version: No such file or directory"),
            modules=failed(),
            module_license=ok(modinfo_field(text, "license")),
            module_signer=ok(modinfo_field(text, "signer")),  # neither record has a signer: unsigned
            nvidia_smi=ok(query_gpu((DOCTOR / "q__2x-h100__hw-slowdown-power-brake.txt").read_text())),
        ),
        real_matrix,
        scanned_at=NOW,
    )
    assert valid(doc)["driver"] == {
        "version": "535.161.08",
        "branch": "535",
        "kernel_module": flavour,
        "loaded": False,
        "signed": False,
        "source": "nvidia-smi",
    }
    assert doc["error"] is None


def test_a_signer_is_a_signed_module_and_no_module_is_unknown(real_matrix):
    smi = ok(query_gpu((DOCTOR / "q__a10__remapped-rows-pending.txt").read_text()))
    signed = document(
        "g", answers(nvidia_smi=smi, module_signer=ok("DKMS module signing key\n")), real_matrix, scanned_at=NOW
    )
    absent = document(
        "g",
        answers(nvidia_smi=smi, module_signer=failed("modinfo: ERROR: Module nvidia not found.")),
        real_matrix,
        scanned_at=NOW,
    )
    assert signed["driver"]["signed"] is True
    assert absent["driver"]["signed"] is None


def test_gpus_are_read_with_their_catalogue_ids(real_matrix):
    got = {}
    for record in (
        "q__2x-h100__hw-slowdown-power-brake.txt",
        "q__a10__remapped-rows-pending.txt",
        "q__2x-v100__old-ecc-layout.txt",
    ):
        doc = document(
            "g", answers(nvidia_smi=ok(query_gpu((DOCTOR / record).read_text()))), real_matrix, scanned_at=NOW
        )
        got[record] = [(g["index"], g["name"], g["pci_device_id"], g["catalogue_id"]) for g in valid(doc)["gpus"]]
    assert got == {
        "q__2x-h100__hw-slowdown-power-brake.txt": [
            (0, "NVIDIA H100 80GB HBM3", "0x2330", "h100-sxm"),
            (1, "NVIDIA H100 80GB HBM3", "0x2330", "h100-sxm"),
        ],
        "q__a10__remapped-rows-pending.txt": [(0, "NVIDIA A10", "0x2236", "a10")],
        "q__2x-v100__old-ecc-layout.txt": [
            (0, "Tesla V100-PCIE-16GB", "0x1DB4", "v100-pcie-16gb"),
            (1, "Tesla V100-PCIE-16GB", "0x1DB4", "v100-pcie-16gb"),
        ],
    }


def test_dpkg_lists_installed_and_held_packages_and_the_driver_they_carry(real_matrix):
    listing = dpkg_query(capture("dpkg-l__ubuntu20.04-470-toolkit-1.9.txt"))
    packages = {p.name: p for p in parse_dpkg(listing)}
    # 'un' (not installed) and 'rc' (removed, its configuration left) are not installed
    assert "libnvidia-common" not in packages
    assert "libnvidia-compute-418-server:amd64" not in packages
    assert packages["libnvidia-compute-470:amd64"].version == "470.103.01-0ubuntu0.20.04.1"
    assert packages["libnvidia-container-tools"].version == "1.9.0-1"
    held = listing.replace("ii \tlibnvidia-container1:amd64", "hi \tlibnvidia-container1:amd64")
    doc = document(
        "g", answers(os_release=ok('ID=ubuntu\nVERSION_ID="20.04"\n'), dpkg=ok(held)), real_matrix, scanned_at=NOW
    )
    assert valid(doc)["held"] == ["libnvidia-container1:amd64"]
    assert doc["os"] == {"id": "ubuntu", "version_id": "20.04", "family": "Debian", "catalogue_id": None}
    # Ubuntu's archive names the driver's libraries by branch: the release comes from them
    assert doc["driver"]["version"] == "470.103.01"
    assert doc["driver"]["source"] == "package"


def test_rpm_names_may_hold_dashes_and_arches(real_matrix):
    packages = {p.name: p.version for p in parse_rpm(capture("rpm-qa__fedora41-rpmfusion-560.txt"))}
    assert packages["kmod-nvidia-open-6.11.0-0.rc5.43.fc41.x86_64"] == "560.35.03-1.fc41"
    assert packages["xorg-x11-drv-nvidia-libs"] == "560.35.03-3.fc41"  # .i686 and .x86_64: one name
    assert len(packages) == 11


def test_rocky_os_release_maps_to_the_catalogue(real_matrix):
    doc = document("g", answers(os_release=ok(capture("os-release__rocky-9.1.txt"))), real_matrix, scanned_at=NOW)
    assert valid(doc)["os"] == {"id": "rocky", "version_id": "9.1", "family": "RedHat", "catalogue_id": "rocky9"}


def test_tool_versions_from_their_binaries_when_no_package_is_installed(real_matrix):
    doc = document(
        "g",
        answers(
            ctk_version=ok(capture("nvidia-ctk-version__1.12.0.txt")),
            docker_version=ok(capture("docker-version__17.03.1-ce.txt")),
            containerd_version=ok(capture("containerd-version__1.4.4.txt")),
        ),
        real_matrix,
        scanned_at=NOW,
    )
    assert (valid(doc)["container_toolkit"], doc["docker"], doc["containerd"]) == ("1.12.0", "17.03.1", "1.4.4")


def test_packages_win_over_binaries_and_cuda_user_space_is_listed(real_matrix):
    listing = (
        "ii \tnvidia-container-toolkit\t1.17.8-1\n"
        "ii \tdocker-ce\t5:24.0.7-1~ubuntu.22.04~jammy\n"
        "ii \tcontainerd.io\t1.6.26-1\n"
        "hi \tcuda-compat-12-4\t550.54.15-1\n"
        "ii \tcuda-cudart-12-4\t12.4.127-1\n"
        "ii \tcuda-drivers-550\t550.54.15-1\n"
        "ii \tcuda-keyring\t1.1-1\n"
    )
    doc = document(
        "g",
        answers(
            os_release=ok('ID=ubuntu\nVERSION_ID="22.04"\n'),
            dpkg=ok(listing),
            docker_version=ok(capture("docker-version__17.03.1-ce.txt")),
        ),
        real_matrix,
        scanned_at=NOW,
    )
    assert (valid(doc)["container_toolkit"], doc["docker"], doc["containerd"]) == ("1.17.8", "24.0.7", "1.6.26")
    assert doc["cuda_packages"] == [
        {"name": "cuda-compat-12-4", "version": "550.54.15-1"},
        {"name": "cuda-cudart-12-4", "version": "12.4.127-1"},
    ]
    assert doc["held"] == ["cuda-compat-12-4"]
    # cuda-drivers-550 is the catalogue's proprietary package for Ubuntu 22.04 below R580
    assert doc["driver"] == {
        "version": "550.54.15",
        "branch": "550",
        "kernel_module": "proprietary",
        "loaded": False,
        "signed": None,
        "source": "package",
    }


def test_the_flavour_of_installed_packages_follows_the_catalogue(real_matrix):
    def installed(*names):
        return {n: scanning.Installed(n, "580.95.05-1", False) for n in names}

    el9_open = installed("nvidia-open", "nvidia-driver", "nvidia-driver-cuda", "kmod-nvidia-open-dkms")
    el9_closed = installed("nvidia-driver", "nvidia-driver-cuda", "kmod-nvidia-latest-dkms")
    assert flavour_from_packages(real_matrix, "rocky9", "580", el9_open) == "open"
    assert flavour_from_packages(real_matrix, "rocky9", "580", el9_closed) == "proprietary"
    # Ubuntu's open flavour installs the proprietary one's cuda-drivers-<branch> as well
    ubuntu_open = installed("nvidia-driver-570-open", "cuda-drivers-570")
    assert flavour_from_packages(real_matrix, "ubuntu22.04", "570", ubuntu_open) == "open"
    assert flavour_from_packages(real_matrix, "ubuntu22.04", "570", installed("cuda-drivers-570")) == "proprietary"
    # Debian 12: nvidia-open and cuda-drivers side by side name no one flavour
    assert flavour_from_packages(real_matrix, "debian12", "580", installed("nvidia-open", "cuda-drivers")) is None


def test_versionlock_lists_of_dnf_4_and_5():
    # dnf-plugins-core's versionlock.list: NAME-[EPOCH:]VERSION-RELEASE.*, '#' comments, '!' excludes
    listing = (
        "# Added lock on Mon Dec  1 10:00:00 2026\n"
        "nvidia-driver-3:580.95.05-1.el9.*\n"
        "libnvidia-nscq-580-3:580.95.05-1.el9.*\n"
        "kernel-5.14.0-427.13.1.el9_4.*\n"
        "!nvidia-open-3:590.48.01-1.el9.*\n"
    )
    assert parse_versionlock(listing) == ["nvidia-driver", "libnvidia-nscq-580", "kernel"]
    toml = 'version = "1.0"\n[[packages]]\nname = "nvidia-driver"\n[[packages.conditions]]\nkey = "evr"\n'
    assert parse_versionlock_toml(toml) == ["nvidia-driver"]


# -- what a host may print instead ------------------------------------------------------------
def test_a_forged_marker_voids_the_whole_batch(real_matrix):
    token = verify_batch.new_token()
    sections = [f"{token} {i} b\nx\n{token} {i} e 0 40\n" for i in range(len(COMMANDS))]
    # the nvidia-smi section closes early and starts a forged section of its own
    sections[-1] = (
        f"{token} {len(COMMANDS) - 1} b\n{token} 2 e 0 40\nNVRM version: NVIDIA UNIX x86_64 Kernel Module  999.1.1 \n"
    )
    stderr = "".join(f"{token} {i} b\n\n{token} {i} e 0 40\n" for i in range(len(COMMANDS)))
    outcome = Outcome("g", 0, "".join(sections), stderr, 1.0, 0.0)
    doc = read_outcome("g", outcome, BATCH, token, real_matrix, host_timeout=60, scanned_at=NOW)
    assert valid(doc)["reachable"] is True
    assert "refused" in doc["error"]
    assert doc["driver"] is None


def test_huge_lines_are_read_in_bounded_time(real_matrix):
    flood = "ii \t" + "a" * (8 * 1024 * 1024) + "\t1.0-1\n"
    started = time.monotonic()
    doc = document(
        "g",
        answers(
            dpkg=ok(flood + "ii \tcuda-cudart-12-4\t12.4.127-1\n"),
            proc_version=ok("NVRM version: " + "NVIDIA UNIX " * 400_000),
            nvidia_smi=ok("index, name, pci.device_id\n" + "0," * 2_000_000),
            os_release=ok("ID=" + "x" * 3_000_000),
        ),
        real_matrix,
        scanned_at=NOW,
    )
    assert time.monotonic() - started < 2
    assert valid(doc)["driver"] is None
    assert doc["gpus"] == []
    assert doc["os"] is None
    assert doc["cuda_packages"] == []  # the listing was cut at 1 MiB, inside the flooded line


def test_control_characters_never_reach_the_document_or_the_table(real_matrix):
    from provision.cli.scan import table_rows

    name = "NVIDIA H100\x1b[2J\x1b]0;pwned\x07 \u202egnp.exe\u2028{{ lookup('pipe','id') }}"
    doc = document(
        "g",
        answers(
            nvidia_smi=ok(f'index, name, pci.device_id\n0, "{name}", 0x233010DE\n'),
            kernel=ok("6.8.0-90-generic\x1b[31m\n"),
            os_release=ok('ID="debian\x1b[0m"\nVERSION_ID="12"\n'),
            dpkg=ok("hi \tcuda-cudart\x1b-12\t12.4-1\nii \tcuda-nvcc-12-4\t12.4.131-1\x07\n"),
        ),
        real_matrix,
        scanned_at=NOW,
    )
    assert valid(doc)["gpus"][0]["name"] == "NVIDIA H100?[2J?]0;pwned? ?gnp.exe??? lookup('pipe','id') ??"
    assert doc["kernel"] is None
    assert doc["os"] is None
    assert doc["held"] == []
    assert doc["cuda_packages"] == []
    text = json.dumps(doc) + repr(table_rows([doc]))
    strings = re.findall(r'"((?:[^"\\]|\\.)*)"', json.dumps(doc, ensure_ascii=False))
    assert not [v for v in strings if re.search(r"[\x00-\x1f\x7f\u202e\u2028{}]|\\u", v)]
    assert "\\u001b" not in text


def test_a_document_that_breaks_the_schema_is_refused(real_matrix):
    good = document("g", answers(kernel=ok("6.8.0-90-generic\n")), real_matrix, scanned_at=NOW)
    assert good["kernel"] == "6.8.0-90-generic"
    for broken in (
        {**good, "kernel": "6.8.0-90-generic\n"},  # the schema's `$` matches before a trailing newline
        {**good, "kernel": "6.8.0 && id"},
        {**good, "extra": 1},
        {
            **good,
            "driver": {"version": "580.95.05", "branch": "58", "kernel_module": "open", "loaded": True, "signed": None},
        },
    ):
        refused = checked(broken)
        assert valid(refused)["kernel"] is None
        assert refused["driver"] is None
        assert refused["error"].startswith("the scan's document broke its schema and was refused")


# -- hosts, end to end -------------------------------------------------------------------------
@pytest.fixture
def fake_bin(tmp_path, monkeypatch) -> Path:
    """A folder put first on PATH: the commands a test puts there shadow the host's."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder


def tool(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


# The attack's payload: read the batch's token from an ancestor's command line (the script rides
# on `sh -c`) and print the markers that would end this command's section and forge another's.
FORGER = r"""p=$$
while [ "$p" -gt 1 ]; do
  t=$(tr '\0' '\n' < /proc/$p/cmdline 2>/dev/null | grep -o 'provision-[0-9a-f]\{32\}' | head -n 1)
  [ -n "$t" ] && break
  p=$(awk '{print $4}' /proc/$p/stat)
done
echo "index, name, pci.device_id, driver_version"
echo "0, NVIDIA H100 80GB HBM3, 0x233010DE, 999.99.99"
printf '\n%s 2 e 0 40\nNVRM version: NVIDIA UNIX Open Kernel Module for x86_64  999.99.99  Release Build\n' "$t"
"""


def local_scan(real_matrix, host_timeout: float = 30) -> dict:
    (doc,) = scan([Target("here", Connection("local"))], real_matrix, BATCH, host_timeout=host_timeout)
    return valid(doc)


def test_a_command_that_forges_the_marker_is_refused_end_to_end(real_matrix, fake_bin):
    tool(fake_bin, "nvidia-smi", FORGER)
    doc = local_scan(real_matrix)
    assert doc["reachable"] is True
    assert "marker" in doc["error"]
    assert "refused" in doc["error"]
    assert doc["driver"] is None
    assert doc["gpus"] == []


def test_a_hung_command_is_stopped_with_its_process_group_within_the_deadline(real_matrix, fake_bin, tmp_path):
    pids = tmp_path / "pids"
    # a stuck nvidia-smi: it and its child ignore SIGTERM (a GPU that fell off the bus)
    tool(
        fake_bin, "nvidia-smi", f"trap '' TERM\necho $$ >> {pids}\nsh -c 'echo $$ >> {pids}; exec sleep 3600' &\nwait\n"
    )
    tool(fake_bin, "nvidia-ctk", "echo 'NVIDIA Container Toolkit CLI version 1.17.8'\n")
    started = time.monotonic()
    # 20 s: the commands before it get some 5 s of a loaded machine; nvidia-smi the share left, 7 s at most
    doc = local_scan(real_matrix, host_timeout=20)
    assert time.monotonic() - started < 20 + 3
    assert doc["reachable"] is True
    assert re.search(r"`nvidia-smi` did not answer within \d+ s \(stopped with its process group\)", doc["error"])
    assert doc["container_toolkit"] == "1.17.8"  # what answered before it is kept
    deadline = time.monotonic() + 5
    alive = [p for p in pids.read_text().split() if Path(f"/proc/{p}").exists()]
    while alive and time.monotonic() < deadline:  # reaped by now, or a zombie on its way out
        time.sleep(0.2)
        alive = [
            p
            for p in alive
            if Path(f"/proc/{p}").exists() and "\nState:\tZ" not in Path(f"/proc/{p}/status").read_text()
        ]
    assert alive == []


def test_a_flooding_host_is_read_up_to_the_limit(real_matrix, fake_bin):
    tool(fake_bin, "dpkg-query", f"head -c {OUTPUT_LIMIT + 2 * 1024 * 1024} /dev/zero | tr '\\0' 'x'\n")
    doc = local_scan(real_matrix)
    assert "4 MiB" in doc["error"]
    assert doc["held"] == []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null")


def test_a_refused_connection_is_unreachable_with_ssh_s_reason(real_matrix):
    port = free_port()
    target = Target("gone", Connection("ssh", "127.0.0.1", user="root", port=port, ssh_args=SSH_OPTIONS))
    started = time.monotonic()
    (doc,) = scan([target], real_matrix, BATCH, host_timeout=15)
    assert time.monotonic() - started < 10
    assert valid(doc)["reachable"] is False
    assert doc["error"].startswith("unreachable: ")
    assert "Connection refused" in doc["error"]


def test_a_host_that_never_answers_comes_back_at_the_deadline(real_matrix):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    accepted = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    try:
        port = server.getsockname()[1]
        target = Target("mute", Connection("ssh", "127.0.0.1", user="root", port=port, ssh_args=SSH_OPTIONS))
        started = time.monotonic()
        (doc,) = scan([target], real_matrix, BATCH, host_timeout=4)
        assert time.monotonic() - started < 4 + 4
    finally:
        server.close()
    assert valid(doc)["reachable"] is False
    assert doc["error"] == "no answer within 4 s (--host-timeout)"


# -- the command -------------------------------------------------------------------------------
@pytest.fixture
def scan_cli(cli):
    """`provision inventory scan ...`, in process."""
    return lambda *args: cli("inventory", "scan", *args)


def inventory(path: Path, hosts: dict) -> Path:
    path.write_text(yaml.safe_dump({"all": {"children": {"gpus": {"hosts": hosts}}}}))
    return path


def test_the_command_prints_a_table_writes_documents_and_exits_by_what_it_reached(scan_cli, tmp_path):
    inv = inventory(
        tmp_path / "hosts.yml",
        {
            "here": {"ansible_connection": "local"},
            "gone": {"ansible_host": "127.0.0.1", "ansible_port": free_port(), "ansible_user": "root"},
        },
    )
    out = tmp_path / "scans"
    result = scan_cli("-i", str(inv), "--out", str(out), "--host-timeout", "20")
    assert result.code == 1, result
    header = result.out.splitlines()[2]
    assert header.split() == ["host", "reachable", "OS", "driver", "GPUs", "toolkit", "docker", "held"]
    rows = {line.split()[0]: line for line in result.out.splitlines()[4:6]}
    assert rows["gone"].split()[1] == "no"
    assert rows["here"].split()[1] == "yes"
    assert "gone: unreachable: " in result.out
    assert "1 of 2 host(s) scanned" in result.out
    assert sorted(p.name for p in out.iterdir()) == ["gone.json", "here.json"]
    here = valid(json.loads((out / "here.json").read_text()))
    assert here["host"] == "here"
    assert here["reachable"] is True
    assert here["kernel"] == os.uname().release

    only = scan_cli("-i", str(inv), "--limit", "here", "--format", "json")
    assert only.code == 0, only
    (doc,) = json.loads(only.out)
    assert valid(doc)["host"] == "here"
    assert doc["error"] is None


def test_bad_input_is_refused_before_any_host_is_contacted(scan_cli, tmp_path):
    marker = tmp_path / "pwned"
    inv = inventory(
        tmp_path / "hosts.yml",
        {"gpu1": {"ansible_host": "127.0.0.1", "ansible_ssh_common_args": f"-o ProxyCommand='touch {marker}'"}},
    )
    result = scan_cli("-i", str(inv))
    assert result.code == 2
    assert "ProxyCommand" in result.err
    assert result.err.startswith("error: ")
    assert not marker.exists()
    afile = tmp_path / "afile"
    afile.write_text("")
    result = scan_cli(
        "-i", str(inventory(tmp_path / "ok.yml", {"here": {"ansible_connection": "local"}})), "--out", str(afile)
    )
    assert result.code == 2
    assert "is a file" in result.err
    assert "hint: " in result.err
    assert "Traceback" not in result.err
