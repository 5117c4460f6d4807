"""Builds and serves the fake-GPU package repositories (see tests/fakegpu/README.md).

Packages carry NVIDIA's names at the plan's exact versions; each repository is a flat apt
repository (like NVIDIA's) signed with a throw-away GPG key, served on 127.0.0.1. The same
packages are also built as RPMs (rpmbuild, signed with rpmsign) in dnf repositories (createrepo_c,
module metadata from modifyrepo_c, repomd.xml signed), for the Rocky-9-shaped hosts.
"""

from __future__ import annotations

import http.client
import http.server
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import yaml

PAYLOAD = Path(__file__).resolve().parent.parent / "fakegpu" / "payload"
# `nvidia-smi mig -lgip` / `-lgipp` output of real GPUs (tests/fakegpu/captures/SOURCES.md)
CAPTURES = Path(__file__).resolve().parent.parent / "fakegpu" / "captures"
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
# Real captures the fake nvidia-smi and fakegpu-dmi print, installed with the driver package in
# /usr/share/fakegpu/captures: `nvidia-smi nvlink -s` and the pcie query (tests/fakegpu/captures/SOURCES.md),
# `nvidia-smi topo -m` and `dmidecode -t 1` (tests/fixtures/platforms, each with its .source.txt)
SERVER_CAPTURES = (
    *sorted(p for p in CAPTURES.glob("*.txt") if p.name.startswith(("nvlink-s__", "pcie__"))),
    *sorted(p for p in (FIXTURES / "platforms").glob("*.txt") if not p.name.endswith(".source.txt")),
    # the doctor's nvlink -s and topo -m captures (an 8x V100 SXM2 with inactive links, 2x A100 ...)
    *sorted(
        p
        for p in (FIXTURES / "doctor").glob("*.txt")
        if p.name.startswith(("nvlink-s__", "topo-m__")) and not p.name.endswith(".source.txt")
    ),
)
SERVER_CAPTURES_DIR = "/usr/share/fakegpu/captures"
DMI_DIR = "/opt/fakegpu/dmi"  # where fakegpu-dmi writes the DMI files (verify_dmi_dir)
# Real BMC captures the kit's ipmitool prints: tests/fixtures/doctor/bmc and tests/fakegpu/captures
# (ipmitool-*), each with its source note
BMC_CAPTURES = FIXTURES / "doctor" / "bmc"
HP_DL360 = "hp-proliant-dl360-ilo2"  # one HP ProLiant DL360 G6/G7 (iLO 2), tests/fakegpu/captures/SOURCES.md
# gpu.json "bmc" -> {the ipmitool command as its caller spells it (-I open dropped): capture}. A
# scenario answers only the commands it has a real capture of, from one BMC.
BMC_SCENARIOS = {
    # Power Supply 1 failed (0 Watts, "Failure detected"), redundancy down to "Non-Redundant"; the SEL
    # empty (that host's `sel list` after a clear). What doctor -i runs: sdr elist (the capture is
    # `sdr elist full`, the full sensor records `sdr elist` also prints) and sel elist.
    "psu-failed": {
        "sdr elist": f"ipmitool-sdr-elist-full__{HP_DL360}__psu1-failure-detected.txt",
        "sdr elist full": f"ipmitool-sdr-elist-full__{HP_DL360}__psu1-failure-detected.txt",
        "sel elist": f"ipmitool-sel-list__{HP_DL360}__no-entries.txt",
        "sel list": f"ipmitool-sel-list__{HP_DL360}__no-entries.txt",
    },
    # ipmitool/ipmitool#176: `sdr` prints "0x00 | ok", `-v sdr` the asserted [Redundancy Lost]
    "psu-redundancy-lost": {
        "sdr": "intel-naming__ipmitool-sdr__pwr-unit-redund-0x00-ok.txt",
        "sdr list": "intel-naming__ipmitool-sdr__pwr-unit-redund-0x00-ok.txt",
        "-v sdr": "intel-naming__ipmitool-sdr-get-v__pwr-unit-redund-redundancy-lost-asserted.txt",
        "-v sdr list": "intel-naming__ipmitool-sdr-get-v__pwr-unit-redund-redundancy-lost-asserted.txt",
        "-v sdr elist": "intel-naming__ipmitool-sdr-get-v__pwr-unit-redund-redundancy-lost-asserted.txt",
    },
    # a Dell R320 (iDRAC7): Fan3B and Fan4B at 0 RPM, critical
    "fan-failed": {"sdr list full": "dell-idrac7__ipmitool-sdr-list-full__r320-fan3b-fan4b-0rpm-cr.txt"},
    # OpenBMC: ambient 46 C over its upper critical 40 C while the status column reads ok
    "hot-inlet": {
        "sensor": "openbmc__ipmitool-sensor-list__ambient-temp-46c-over-ucr-40-reads-ok.txt",
        "sensor list": "openbmc__ipmitool-sensor-list__ambient-temp-46c-over-ucr-40-reads-ok.txt",
    },
    # healthy BMCs
    "healthy-hpe": {
        "sensor": "hpe-ilo4__ipmitool-sensor__dl360p-g8-healthy-partial.txt",
        "sensor list": "hpe-ilo4__ipmitool-sensor__dl360p-g8-healthy-partial.txt",
    },
    "healthy-dell": {
        "sdr elist": "dell-idrac__ipmitool-sdr-elist-all__healthy-partial.txt",
        "sdr elist all": "dell-idrac__ipmitool-sdr-elist-all__healthy-partial.txt",
        "sdr type temperature": "dell-idrac6__ipmitool-sdr-type-temperature__r510-healthy.txt",
    },
}


def bmc_capture(name: str) -> Path:
    """A BMC scenario's capture: the kit's own (tests/fakegpu/captures, ipmitool-*) or the doctor's."""
    return CAPTURES / name if name.startswith("ipmitool-") else BMC_CAPTURES / name


# the fleet's fake GPU kinds (tests/integration/conftest.py GPUS) -> their (-lgip, -lgipp) captures
MIG_CAPTURES = {
    "a100": ("a100-80gb-pcie.lgip.txt", "a100-sxm4-40gb.lgipp.txt"),
    "h100": ("h100-80gb-hbm3.lgip.txt", "h100-80gb-hbm3.lgipp.txt"),
}
# nvidia-smi's default compute-instance profile id for a GPU instance of N compute slices (NVML)
DEFAULT_CI_PROFILE = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}
SECURE_BOOT_VAR = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
CUDA_REPO = "compute/cuda/repos/{repo}/x86_64"
TOOLKIT_REPO = "libnvidia-container/stable/deb/amd64"
DEBIAN_REPO = "debian"
# dnf repositories, at the paths of the vendors' URLs (after a mirror prefix)
TOOLKIT_RPM_REPO = "libnvidia-container/stable/rpm/x86_64"
ROCKY_BASEOS_REPO = "rocky/9/BaseOS/x86_64/os"
ROCKY_EXTRAS_REPO = "rocky/9/extras/x86_64/os"
ROCKY_CRB_REPO = "rocky/9/CRB/x86_64/os"
EPEL_REPO = "epel/9/Everything/x86_64"
DOCKER_CE_URL = "docker-ce/linux/centos"  # + /9/x86_64/stable ($releasever/$basearch), key at /gpg
DOCKER_CE_REPO = f"{DOCKER_CE_URL}/9/x86_64/stable"
# NVIDIA's EL9 CUDA repository: nvidia-driver-3:595.91.07-1.el9 (the toolkit's RPMs: 1.17.8-1)
CUDA_RPM_EPOCH = 3
CUDA_RPM_RELEASE = "1.el9"
TOOLKIT_RPM_RELEASE = "1"
# What a Rocky 9.6 host has installed as its kernel (the running kernel is the CI machine's)
ROCKY_KERNEL = ("5.14.0", "570.12.1.el9_6")
# In the rpm database of a Rocky-shaped host from the start (the files are Debian's, in the image):
# the shell that scriptlets need (Requires(post): /bin/sh) and the installed kernel.
ROCKY_INSTALLED = ("bash", "kernel", "kernel-core", "kernel-modules", "kernel-modules-core")


@dataclass
class Key:
    home: Path
    fingerprint: str
    armored: str

    @classmethod
    def generate(cls, home: Path, uid: str) -> Key:
        home.mkdir(parents=True, mode=0o700)
        env = {**os.environ, "GNUPGHOME": str(home)}
        subprocess.run(
            ["gpg", "--batch", "--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "never"],
            env=env,
            check=True,
            capture_output=True,
        )
        colons = subprocess.run(
            ["gpg", "--batch", "--with-colons", "--list-keys"], env=env, check=True, capture_output=True, text=True
        ).stdout
        fpr = next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:"))
        armored = subprocess.run(
            ["gpg", "--batch", "--armor", "--export", fpr], env=env, check=True, capture_output=True, text=True
        ).stdout
        return cls(home, fpr, armored)

    def sign_repo(self, directory: Path) -> None:
        env = {**os.environ, "GNUPGHOME": str(self.home)}
        for name in ("InRelease", "Release.gpg"):
            (directory / name).unlink(missing_ok=True)
        subprocess.run(
            [
                "gpg",
                "--batch",
                "--yes",
                "--local-user",
                self.fingerprint,
                "--clearsign",
                "-o",
                str(directory / "InRelease"),
                str(directory / "Release"),
            ],
            env=env,
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [
                "gpg",
                "--batch",
                "--yes",
                "--local-user",
                self.fingerprint,
                "-abs",
                "-o",
                str(directory / "Release.gpg"),
                str(directory / "Release"),
            ],
            env=env,
            check=True,
            capture_output=True,
        )

    def close(self) -> None:
        subprocess.run(
            ["gpgconf", "--kill", "all"],
            env={**os.environ, "GNUPGHOME": str(self.home)},
            check=False,
            capture_output=True,
        )


@dataclass
class Package:
    name: str
    version: str  # full Debian version, revision included
    files: dict[str, tuple[Path | str, int]] = field(default_factory=dict)  # dest -> (source file or text, mode)
    depends: list[str] = field(default_factory=list)
    postinst: str | None = None
    description: str = "fakegpu stand-in package (tests only)"
    # RPM only: %pre (a failure aborts the install, as a failing Debian postinst does), %post
    # (defaults to postinst), more Requires/Provides, the epoch
    rpm_pre: str | None = None
    rpm_post: str | None = None
    rpm_requires: list[str] = field(default_factory=list)
    rpm_provides: list[str] = field(default_factory=list)
    epoch: int | None = None

    def build(self, out: Path) -> Path:
        root = Path(tempfile.mkdtemp(prefix=f"fakegpu-{self.name}-"))
        try:
            (root / "DEBIAN").mkdir()
            control = [
                f"Package: {self.name}",
                f"Version: {self.version}",
                "Architecture: all",
                "Maintainer: provision tests <tests@fakegpu.invalid>",
                "Section: misc",
                "Priority: optional",
            ]
            if self.depends:
                control.append("Depends: " + ", ".join(self.depends))
            control.append(f"Description: {self.description}")
            (root / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
            if self.postinst:
                script = root / "DEBIAN" / "postinst"
                script.write_text("#!/bin/sh\nset -e\n" + self.postinst + "\nexit 0\n")
                script.chmod(0o755)
            for dest, (source, mode) in self.files.items():
                target = root / dest.lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(source, Path):
                    shutil.copyfile(source, target)
                else:
                    target.write_text(source)
                target.chmod(mode)
            deb = out / f"{self.name}_{self.version.replace(':', '%3a')}_all.deb"
            subprocess.run(
                ["dpkg-deb", "--root-owner-group", "-Zgzip", "-b", str(root), str(deb)], check=True, capture_output=True
            )
            return deb
        finally:
            shutil.rmtree(root, ignore_errors=True)

    @property
    def upstream(self) -> str:
        return self.version.rsplit("-", 1)[0] if "-" in self.version else self.version

    def build_rpm(self, out: Path, release: str) -> Path:
        """A noarch RPM: Version is the upstream version, Release the given one; Debian
        `name (= version)` dependencies become `Requires: name = [epoch:]upstream-release`."""
        work = Path(tempfile.mkdtemp(prefix=f"fakegpu-rpm-{self.name}-"))
        try:
            stage = work / "stage"
            stage.mkdir()
            paths = []
            for path, (source, mode) in self.files.items():
                # merged /usr: EL packages install units under /usr/lib/systemd
                dest = "/usr" + path if path.startswith("/lib/") else path
                target = stage / dest.lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(source, Path):
                    shutil.copyfile(source, target)
                else:
                    target.write_text(source)
                target.chmod(mode)
                paths.append(f"%config(noreplace) {dest}" if dest.startswith("/etc/") else dest)
            requires = [_rpm_dependency(d, release, self.epoch) for d in self.depends] + self.rpm_requires
            lines = [
                f"Name: {self.name}",
                f"Version: {self.upstream}",
                f"Release: {release}",
                *([f"Epoch: {self.epoch}"] if self.epoch is not None else []),
                f"Summary: {self.description}",
                "License: Proprietary (tests only)",
                "BuildArch: noarch",
                # only the dependencies declared here (no python3 or sh from the payload's shebangs)
                "AutoReqProv: no",
                *[f"Requires: {r}" for r in requires],
                *[f"Provides: {p}" for p in self.rpm_provides],
                "",
                "%description",
                self.description,
                "",
                "%install",
                "mkdir -p %{buildroot}",
                f"cp -a {stage}/. %{{buildroot}}/",
                "",
            ]
            if self.rpm_pre:
                lines += ["%pre", self.rpm_pre, ""]
            post = self.rpm_post if self.rpm_post is not None else self.postinst
            if post:
                lines += ["%post", post, ""]
            lines += ["%files", *paths, ""]
            spec = work / f"{self.name}.spec"
            spec.write_text("\n".join(lines))
            out.mkdir(parents=True, exist_ok=True)
            proc = subprocess.run(
                [
                    "rpmbuild",
                    "--quiet",
                    "--nodeps",
                    "--define",
                    f"_topdir {work}/top",
                    "--define",
                    f"_rpmdir {out}",
                    "--define",
                    "_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm",
                    "--define",
                    "__os_install_post %{nil}",
                    "--define",
                    "_build_id_links none",
                    "-bb",
                    str(spec),
                ],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"rpmbuild {self.name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
            return out / f"{self.name}-{self.upstream}-{release}.noarch.rpm"
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def nevra(self, release: str) -> str:
        """The module artifact form: name-epoch:version-release.arch."""
        return f"{self.name}-{self.epoch or 0}:{self.upstream}-{release}.noarch"


def _rpm_dependency(dep: str, release: str, epoch: int | None = None) -> str:
    m = re.fullmatch(r"(\S+) \(= (\S+)\)", dep)
    if not m:
        return dep
    upstream = m.group(2).rsplit("-", 1)[0]
    return f"{m.group(1)} = {f'{epoch}:' if epoch is not None else ''}{upstream}-{release}"


def driver_packages(names: list[str], version: str) -> list[Package]:
    """The plan's driver packages: the first carries nvidia-smi and nvidia-persistenced."""
    core, *others = names
    persistenced_unit = (
        "[Unit]\nDescription=NVIDIA Persistence Daemon (fakegpu)\n\n[Service]\nType=simple\n"
        "ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose\n"
        "ExecStopPost=/bin/rm -rf /run/nvidia-persistenced\n\n[Install]\nWantedBy=multi-user.target\n"
    )
    # What a boot does to the GPUs' MIG state (the kernel module reading the InfoROM): pending
    # Ampere mode changes take effect; instances are gone with /run. Before any GPU client.
    boot_unit = (
        "[Unit]\nDescription=fakegpu: the GPUs come up after a reboot\nDefaultDependencies=no\n"
        "After=local-fs.target\nBefore=nvidia-persistenced.service provision-mig.service\n\n"
        "[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/usr/bin/nvidia-smi mig --boot\n\n"
        "[Install]\nWantedBy=multi-user.target\n"
    )
    fail_check = (
        'if [ -e /etc/fakegpu/fail-install ]; then echo "fakegpu: simulated driver install failure" >&2; exit 1; fi'
    )
    activate = (
        "if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi\n"
        "systemctl enable fakegpu-boot.service >/dev/null 2>&1 || true"
    )
    postinst = fail_check + "\n" + activate + "\n/usr/lib/fakegpu/fakegpu-dmi || true"
    packages = [
        Package(
            core,
            f"{version}-1",
            files={
                "/usr/bin/nvidia-smi": (PAYLOAD / "nvidia-smi", 0o755),
                "/usr/lib/fakegpu/fakegpu_mig.py": (PAYLOAD / "fakegpu_mig.py", 0o644),
                "/lib/systemd/system/fakegpu-boot.service": (boot_unit, 0o644),
                "/usr/bin/nvidia-persistenced": (PAYLOAD / "nvidia-persistenced", 0o755),
                "/lib/systemd/system/nvidia-persistenced.service": (persistenced_unit, 0o644),
                "/usr/lib/fakegpu/driver-version": (version + "\n", 0o644),
                "/usr/lib/fakegpu/fakegpu-dmi": (PAYLOAD / "fakegpu-dmi", 0o755),
                **{f"{SERVER_CAPTURES_DIR}/{p.name}": (p, 0o644) for p in SERVER_CAPTURES},
            },
            postinst=postinst,
            rpm_pre=fail_check,
            rpm_post=activate + "\n/usr/lib/fakegpu/fakegpu-dmi || true",
            description=f"fakegpu stand-in for the NVIDIA driver {version}",
        )
    ]
    packages += [Package(n, f"{version}-1", depends=[f"{core} (= {version}-1)"]) for n in others]
    return packages


def ipmitool_package() -> Package:
    """The kit's ipmitool (Debian's package name): payload/ipmitool, the BMC captures it prints and
    their source notes, and its scenarios (BMC_SCENARIOS). For the site's Debian mirror (DEBIAN_REPO)."""
    used = sorted({name for scenario in BMC_SCENARIOS.values() for name in scenario.values()})
    files: dict[str, tuple[Path | str, int]] = {
        "/usr/bin/ipmitool": (PAYLOAD / "ipmitool", 0o755),
        "/usr/share/fakegpu/bmc/scenarios.json": (json.dumps(BMC_SCENARIOS, indent=2) + "\n", 0o644),
    }
    for name in used:
        files[f"/usr/share/fakegpu/bmc/{name}"] = (bmc_capture(name), 0o644)
        source = bmc_capture(name).with_name(f"{name}.source.txt")
        files[f"/usr/share/fakegpu/bmc/{name}.source.txt"] = (source, 0o644)
    return Package(
        "ipmitool",
        "1.8.19-4+fakegpu1",
        files=files,
        description="fakegpu stand-in for ipmitool (prints real BMC captures)",
    )


def fabric_manager_packages(names: list[str], version: str) -> list[Package]:
    unit = (
        "[Unit]\nDescription=NVIDIA fabric manager service (fakegpu)\n\n[Service]\nType=simple\n"
        "ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg\n\n"
        "[Install]\nWantedBy=multi-user.target\n"
    )
    fm, *others = names
    return [
        Package(
            fm,
            f"{version}-1",
            files={
                "/usr/bin/nv-fabricmanager": (PAYLOAD / "nv-fabricmanager", 0o755),
                "/lib/systemd/system/nvidia-fabricmanager.service": (unit, 0o644),
                "/usr/share/nvidia/nvswitch/fabricmanager.cfg": ("# fakegpu\nLOG_LEVEL=4\n", 0o644),
                "/usr/lib/fakegpu/fabricmanager-version": (version + "\n", 0o644),
            },
            postinst="if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi",
        )
    ] + [Package(n, f"{version}-1") for n in others]


def toolkit_packages(version: str) -> list[Package]:
    v = f"{version}-1"
    return [
        Package(
            "nvidia-container-toolkit-base",
            v,
            files={
                "/usr/bin/nvidia-ctk": (PAYLOAD / "nvidia-ctk", 0o755),
                "/usr/bin/nvidia-container-runtime": (PAYLOAD / "nvidia-container-runtime", 0o755),
                "/usr/lib/fakegpu/toolkit-version": (version + "\n", 0o644),
            },
        ),
        Package("libnvidia-container1", v),
        Package(
            "libnvidia-container-tools",
            v,
            depends=[f"libnvidia-container1 (= {v})"],
            files={"/usr/bin/nvidia-container-cli": (f"#!/bin/sh\necho 'cli-version: {version} (fakegpu)'\n", 0o755)},
        ),
        Package(
            "nvidia-container-toolkit",
            v,
            depends=[f"nvidia-container-toolkit-base (= {v})", f"libnvidia-container-tools (= {v})"],
        ),
    ]


def rpm_driver_packages(names: list[str], version: str) -> list[Package]:
    """The driver packages as NVIDIA's EL9 repository has them: epoch 3, and the DKMS kernel module
    package requires dkms (from EPEL)."""
    packages = driver_packages(names, version)
    for pkg in packages:
        pkg.epoch = CUDA_RPM_EPOCH
        if pkg.name.startswith("kmod-") and pkg.name.endswith("-dkms"):
            pkg.rpm_requires.append("dkms")
    return packages


def driver_module(stream: str, packages: list[Package], release: str = CUDA_RPM_RELEASE) -> dict:
    """A modulemd v2 document for `name:stream` whose artifacts are the packages (dnf shows them only
    while the stream is enabled)."""
    name, stream_name = stream.split(":", 1)
    return {
        "document": "modulemd",
        "version": 2,
        "data": {
            "name": name,
            "stream": stream_name,
            "version": 20261130000000,
            "context": "00000000",
            "arch": "x86_64",
            "summary": "fakegpu stand-in for the NVIDIA driver module",
            "description": f"fakegpu: the NVIDIA driver packages of stream {stream_name} (tests only)",
            "license": {"module": ["MIT"]},
            "profiles": {"default": {"rpms": [packages[0].name]}},
            "artifacts": {"rpms": sorted(p.nevra(release) for p in packages)},
        },
    }


def kernel_package_name(spec: str) -> tuple[str, str, str]:
    """(name, version, release) that dnf finds for `spec` (e.g. kernel-devel-$(uname -r)): a Rocky
    kernel reads as name-version-release.arch; another kernel's release may hold dashes, which an
    RPM version cannot, so the name takes the rest (dnf tries name-version-release first)."""
    parts = spec.rsplit("-", 2)
    if len(parts) < 3 or parts[0] in ("kernel", ""):
        return spec, "1.0", "1"
    return parts[0], parts[1], parts[2]


def rocky_base_packages(kernel_headers: list[str]) -> list[tuple[Package, str]]:
    """What the roles install from Rocky's own repositories: the dnf plugins (their files are
    Debian's, in the image), the headers of the running kernel, and the installed kernel's packages."""
    out = [
        (Package("dnf-plugins-core", "4.3.0-1", description="fakegpu stand-in for dnf-plugins-core"), "20.el9"),
        (
            Package(
                "python3-dnf-plugin-versionlock",
                "4.3.0-1",
                description="fakegpu stand-in for the dnf versionlock plugin",
            ),
            "20.el9",
        ),
    ]
    for spec in kernel_headers:
        name, version, release = kernel_package_name(spec)
        out.append(
            (Package(name, f"{version}-1", description="fakegpu stand-in for the running kernel's headers"), release)
        )
    out.append(
        (
            Package(
                "bash",
                "5.1.8-1",
                rpm_provides=["/bin/sh", "/bin/bash", "/usr/bin/sh", "/usr/bin/bash"],
                description="fakegpu stand-in for bash",
            ),
            "9.el9",
        )
    )
    version, release = ROCKY_KERNEL
    for name in ROCKY_INSTALLED[1:]:
        out.append((Package(name, f"{version}-1", description="fakegpu stand-in for the installed kernel"), release))
    return out


def epel_release_package(url: str, key: Key) -> Package:
    """epel-release: the EPEL repository (the site's mirror of it) and its signing key."""
    repo = (
        "[epel]\nname=Extra Packages for Enterprise Linux 9 - $basearch\n"
        f"baseurl={url}/{EPEL_REPO.replace('/x86_64', '/$basearch')}/\n"
        "enabled=1\ngpgcheck=1\ncountme=1\ngpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-EPEL-9\n"
    )
    return Package(
        "epel-release",
        "9-1",
        files={
            "/etc/yum.repos.d/epel.repo": (repo, 0o644),
            "/etc/pki/rpm-gpg/RPM-GPG-KEY-EPEL-9": (key.armored, 0o644),
        },
        description="fakegpu stand-in for epel-release",
    )


def docker_ce_packages() -> list[tuple[Package, str]]:
    """Docker CE's package names; the engine's binaries are Debian's docker.io, in the host image."""
    return [
        (Package("docker-ce", "28.5.1-1", epoch=3, description="fakegpu stand-in for docker-ce"), "1.el9"),
        (Package("docker-ce-cli", "28.5.1-1", epoch=1, description="fakegpu stand-in for docker-ce-cli"), "1.el9"),
        (Package("containerd.io", "1.7.28-1", description="fakegpu stand-in for containerd.io"), "1.el9"),
    ]


class Kit:
    """Signed repositories under one directory, served on 127.0.0.1."""

    def __init__(self, root: Path):
        self.root = root
        self.keys: dict[str, Key] = {}
        self.server: RecordingServer | None = None

    def key(self, name: str) -> Key:
        if name not in self.keys:
            self.keys[name] = Key.generate(
                self.root.parent / f"gnupg-{name}", f"provision test {name} <{name}@fakegpu.invalid>"
            )
        return self.keys[name]

    def add(self, repo: str, packages: list[Package], key: str) -> Path:
        directory = self.root / repo
        directory.mkdir(parents=True, exist_ok=True)
        for pkg in packages:
            pkg.build(directory)
        return directory

    def publish(self, repo: str, key: str, *, key_file: str | None = None) -> None:
        directory = self.root / repo
        with (directory / "Packages").open("w") as handle:
            subprocess.run(["apt-ftparchive", "packages", "."], cwd=directory, stdout=handle, check=True)
        subprocess.run(["gzip", "-kf", "Packages"], cwd=directory, check=True)
        with (directory / "Release").open("w") as handle:
            subprocess.run(
                [
                    "apt-ftparchive",
                    "-o",
                    "APT::FTPArchive::Release::Origin=fakegpu",
                    "-o",
                    f"APT::FTPArchive::Release::Label={key}",
                    "release",
                    ".",
                ],
                cwd=directory,
                stdout=handle,
                check=True,
            )
        self.key(key).sign_repo(directory)
        if key_file:
            target = self.root / key_file
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(self.key(key).armored)

    def add_rpms(self, repo: str, packages: list[tuple[Package, str]]) -> Path:
        """Build (package, release) pairs as RPMs into the dnf repository `repo`."""
        directory = self.root / repo
        directory.mkdir(parents=True, exist_ok=True)
        for pkg, release in packages:
            pkg.build_rpm(directory, release)
        return directory

    def publish_rpm(
        self,
        repo: str,
        key: str,
        *,
        sign_packages: bool = True,
        modules: list[dict] | None = None,
        key_file: str | None = None,
    ) -> None:
        """Sign the RPMs (rpmsign), make the repodata (createrepo_c), add module metadata
        (modifyrepo_c) and sign repomd.xml (repomd.xml.asc) with the kit's `key`."""
        directory = self.root / repo
        directory.mkdir(parents=True, exist_ok=True)
        signer = self.key(key)
        env = {**os.environ, "GNUPGHOME": str(signer.home)}
        rpms = sorted(str(p) for p in directory.glob("*.rpm"))
        if sign_packages and rpms:
            _run(
                [
                    "rpmsign",
                    "--define",
                    f"_gpg_name {signer.fingerprint}",
                    "--define",
                    f"__gpg {shutil.which('gpg')}",
                    "--addsign",
                    *rpms,
                ],
                env=env,
            )
        _run(["createrepo_c", "--quiet", "--update", str(directory)])
        if modules:
            modules_yaml = directory.parent / f".{directory.name}-modules.yaml"
            modules_yaml.write_text(
                yaml.safe_dump_all(modules, explicit_start=True, explicit_end=True, sort_keys=False)
            )
            target = modules_yaml.with_name("modules.yaml")
            modules_yaml.rename(target)
            try:
                _run(["modifyrepo_c", "--mdtype=modules", str(target), str(directory / "repodata")])
            finally:
                target.unlink(missing_ok=True)
        repomd = directory / "repodata" / "repomd.xml"
        _run(
            [
                "gpg",
                "--batch",
                "--yes",
                "--local-user",
                signer.fingerprint,
                "--armor",
                "--detach-sign",
                "-o",
                f"{repomd}.asc",
                str(repomd),
            ],
            env=env,
        )
        if key_file:
            target = self.root / key_file
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(signer.armored)

    def serve(self) -> str:
        self.server = RecordingServer(self.root)
        return self.server.url

    def close(self) -> None:
        if self.server:
            self.server.close()
        for key in self.keys.values():
            key.close()


def _run(argv: list[str], *, env: dict | None = None, timeout: float = 120) -> None:
    proc = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, fmt, *args):
        self.server.requests.append((self.command, self.path, args[1] if len(args) > 1 else ""))


class _LoopbackServer:
    """An HTTP server on 127.0.0.1 (a free port) served from a daemon thread."""

    def __init__(self, handler, **state):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        for name, value in state.items():
            setattr(self.httpd, name, value)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class RecordingServer(_LoopbackServer):
    """A static file server on 127.0.0.1 that records every request."""

    def __init__(self, root: Path):
        super().__init__(lambda *a, **kw: _Handler(*a, directory=str(root), **kw), requests=[])

    @property
    def requests(self) -> list[tuple[str, str, str]]:
        return self.httpd.requests


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self._forward()

    def do_HEAD(self):
        self._forward()

    def _forward(self):
        url = urllib.parse.urlsplit(self.path)
        self.server.seen.append((self.command, self.path))
        if url.hostname not in ("127.0.0.1", "localhost"):
            self.send_error(403, "this test proxy forwards to loopback only")
            return
        conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=60)
        path = url.path + (f"?{url.query}" if url.query else "")
        conn.request(
            self.command, path, headers={k: v for k, v in self.headers.items() if k.lower() != "proxy-connection"}
        )
        resp = conn.getresponse()
        body = resp.read()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection"):
                self.send_header(k, v)
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, fmt, *args):
        return


class RecordingProxy(_LoopbackServer):
    """An HTTP forward proxy on 127.0.0.1 (to loopback targets only) that records what it saw."""

    def __init__(self):
        super().__init__(_ProxyHandler, seen=[])

    @property
    def seen(self) -> list[tuple[str, str]]:
        return self.httpd.seen


def mig_profiles_from_captures(kind: str) -> dict[str, dict]:
    """The fake GPU's MIG table (gpu.json ``mig_profiles``: what its `nvidia-smi mig -lgip`/`-lgipp`
    print and `-cgi` places by) for a fleet GPU kind, read from real captures of that GPU, never from
    compat/mig.yaml: a wrong id, count, size or placement in the catalogue then differs from what the
    "GPU" says. Profiles whose placements the -lgipp capture does not give are left out."""
    from provision.matrix.detect import parse_lgip, parse_lgipp

    lgip_name, lgipp_name = MIG_CAPTURES[kind]
    lgip = parse_lgip((CAPTURES / lgip_name).read_text())
    placed = {row.id: row for row in parse_lgipp((CAPTURES / lgipp_name).read_text()) if row.gpu == 0}
    table = {}
    for row in (r for r in lgip if r.gpu == 0):
        where = placed.get(row.id)
        if where is None:
            continue
        compute = int(re.match(r"(\d+)g\.", row.name).group(1))
        table[str(row.id)] = {
            "name": row.name,
            "size": where.size,
            "placements": list(where.placements),
            "compute": compute,
            "max": row.total,
            "memory_gib": row.memory_gib,
            "ci_profile": DEFAULT_CI_PROFILE[compute],
        }
    if not table:
        raise ValueError(f"no MIG profile with placements in the {kind} captures")
    return table
