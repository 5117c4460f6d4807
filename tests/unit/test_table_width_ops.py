"""Issue 23 item 2 for the commands that read hosts: `inventory check`, `inventory scan`, `verify`
(and `verify --list`), `doctor` (captures, logs, `--local`, an inventory's hosts) and apply's
summary honour the width (COLUMNS, else the terminal, else 100) at 60, 80 and 100 columns.

No line is wider than the width: at 100 none at all; at 60 and 80 only a line that holds a single
word or a single `command` longer than the line itself (it goes whole on a line of its own, so it
can still be copied). Every token of what the command shows (read from its --format markdown or
--format json, which are not wrapped) appears whole in the table: no command, GPU UUID, PCI id,
path or version is split, nothing is cut. Commands that need hosts are driven through their
renderers with what real hosts print: the doctor captures of tests/fixtures/doctor, the scan
captures of tests/fixtures/scan, this machine's own verify run; the others run through the CLI.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from support import ROOT
from test_table_width import markdown_tables

WIDTHS = (60, 80, 100)
DOCTOR = ROOT / "tests" / "fixtures" / "doctor"
SCAN = ROOT / "tests" / "fixtures" / "scan"
ONE_WORD_OR_COMMAND = re.compile(r"[^\s`]*(`[^`]*`)?[^\s`]*")


def assert_fits(text: str, width: int) -> None:
    """No line wider than ``width``; at 60 and 80 but a lone word or `command` longer than the line."""
    for line in text.splitlines():
        if len(line) <= width:
            continue
        assert width < 100, f"{len(line)} > {width}: {line!r}"
        assert ONE_WORD_OR_COMMAND.fullmatch(line.strip()), f"{len(line)} > {width}: {line!r}"


def tokens(text: str) -> set[str]:
    """The whitespace-separated tokens of ``text``, quoting backquotes dropped (a long command is
    shown as the commands it chains, each quoted: the same words); a row's name may end in ':'."""
    found = set(text.replace("`", "").split())
    return found | {t.removesuffix(":") for t in found}


def assert_whole(shown: str, texts: list[str], width: int) -> int:
    """Every token of ``texts`` is a token of ``shown``: nothing was split or cut."""
    have, checked = tokens(shown), 0
    for text in texts:
        for token in text.replace("`", "").split():
            if token == "-":  # an empty cell's mark (a host error has no check)
                continue
            assert token in have, f"{token!r} split or missing at {width} columns"
            checked += 1
    assert "…" not in shown
    return checked


def markdown_cells(text: str) -> list[str]:
    tables = markdown_tables(text)
    assert tables, text
    cells = [cell for _, rows in tables for row in rows for cell in row]
    assert cells
    return cells


@pytest.fixture
def at(cli, monkeypatch):
    def run(width: int, *args: str, codes=(0,)):
        monkeypatch.setenv("COLUMNS", str(width))
        result = cli(*args)
        assert result.code in codes, result
        return result

    return run


# -- doctor ---------------------------------------------------------------------------------------
CAPTURES = [
    ["error__nvml-mismatch.txt"],  # a 166-character fix command
    ["dmesg-iso__xid-48-63-94.log"],  # a 96-character URL, Xid lines
    ["q-x__v100-sxm3__dbe-retired-pages-pending.xml"],  # `nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER`
    ["q__2x-h100__hw-slowdown-power-brake.txt", "nvlink-s__8x-v100__inactive-links.txt"],
    ["table__8x-v100__inforom-corrupted.txt"],
    ["journal-k__xid-79-fallen-off-bus.log", "app__cuda-insufficient-driver.txt"],
    ["q__a10__remapped-rows-pending.txt", "fabricmanager__nvswitch-nonfatal.log"],
    ["journal-k__rminitadapter-failed__gpu-operator-1146.log", "q-x__rtx-3090-v13__sw-power-cap-idle.xml"],
]


def doctor_args(names: list[str]) -> list[str]:
    return [arg for name in names for arg in ("--from-file", str(DOCTOR / name))]


def commands_of(fix: str) -> list[str]:
    return re.findall(r"`[^`]+`", " ".join(fix.split()))


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("names", CAPTURES, ids=lambda n: "+".join(x.split("__")[0] for x in n))
def test_doctor_on_captures(at, width, names):
    from provision.cli.doctor import LABEL_ROOM, split_commands

    table = at(width, "doctor", *doctor_args(names), codes=(0, 1))
    doc = json.loads(at(width, "doctor", *doctor_args(names), "--format", "json", codes=(0, 1)).out)
    assert_fits(table.out, width)
    texts = [f[k] for f in doc["findings"] for k in ("severity", "id", "title", "evidence", "fix")]
    assert assert_whole(table.out, texts, width)
    lines = table.out.splitlines()
    for finding in doc["findings"]:  # each command whole on a line; a longer one as the commands it chains
        for command in commands_of(split_commands(" ".join(finding["fix"].split()), width - LABEL_ROOM)):
            assert any(command in line for line in lines), (width, command)
    markdown = at(width, "doctor", *doctor_args(names), "--format", "markdown", codes=(0, 1)).out
    cells = markdown_cells(markdown)
    for finding in doc["findings"]:
        assert (
            " ".join(finding["fix"].split()).replace("|", "\\|").replace("<", "&lt;") in markdown
        )  # as markdown_table escapes it
    assert_whole(" ".join(cells), texts, width)


def test_doctor_shows_a_long_command_as_the_commands_it_chains_each_whole(at):
    """The driver/library mismatch fix: 166 characters of `a; b && c`. At 100 columns each command
    it chains is on one line, whole, and no line is wider than 100; the JSON keeps the text as it is."""
    name = ["error__nvml-mismatch.txt"]
    fix = json.loads(at(100, "doctor", *doctor_args(name), "--format", "json", codes=(1,)).out)["findings"][0]["fix"]
    (command,) = [c for c in commands_of(fix) if "rmmod" in c]
    assert len(command) > 100
    out = at(100, "doctor", *doctor_args(name), codes=(1,)).out
    assert max(map(len, out.splitlines())) <= 100
    for part in (
        "`sudo systemctl stop nvidia-persistenced nvidia-fabricmanager nvidia-dcgm 2>/dev/null`;",
        "`sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia` &&",
        "`sudo modprobe nvidia`",
    ):
        assert any(part in line for line in out.splitlines()), part
    wide = at(400, "doctor", *doctor_args(name), codes=(1,)).out
    assert command in wide  # a line wide enough holds it as it is


@pytest.mark.parametrize(
    ("text", "room", "shown"),
    [
        ("run `a; b && c || d` now", 5, "run `a`; `b` && `c` || `d` now"),
        ("run `a; b && c` now", 40, "run `a; b && c` now"),  # fits: as it is
        ("`grep -E 'x; y && z' f; ls`", 5, "`grep -E 'x; y && z' f`; `ls`"),  # quoted operators are no break
        ('`echo "a; b" && ls`', 5, '`echo "a; b"` && `ls`'),
        ("`a | grep b`", 3, "`a | grep b`"),  # a pipe is one command
        ("`echo a\\; b`", 3, "`echo a\\; b`"),  # an escaped ; is a word
    ],
)
def test_split_commands(text, room, shown):
    from provision.cli.doctor import split_commands

    assert split_commands(text, room) == shown


@pytest.mark.parametrize("width", WIDTHS)
def test_doctor_of_an_inventory_renders_every_host(width, capsys, monkeypatch, real_matrix):
    """doctor -i's renderer: findings of two hosts (real captures) and an unreachable one whose fix
    names a long inventory path; table, markdown and JSON."""
    from provision.cli.doctor import _emit_hosts
    from provision.doctor import diagnose_files

    monkeypatch.setenv("COLUMNS", str(width))
    inventory = "inventories/production-frankfurt-2/gpu-cluster-hosts.yml"  # as given to -i
    results = [
        (
            "dgx-h100-node-017.fra2.example.net",
            diagnose_files([str(DOCTOR / n) for n in CAPTURES[3]], matrix=real_matrix),
            None,
        ),
        ("gpu-v100-a.fra2", diagnose_files([str(DOCTOR / CAPTURES[2][0])], matrix=real_matrix), None),
        ("gpu-x.fra2", None, "ssh: connect to host 127.20.30.40 port 22: No route to host"),
    ]
    assert _emit_hosts(results, "table", inventory) == 1
    table = capsys.readouterr().out
    assert _emit_hosts(results, "json", inventory) == 1
    doc = json.loads(capsys.readouterr().out)
    assert _emit_hosts(results, "markdown", inventory) == 1
    markdown = capsys.readouterr().out
    assert_fits(table, width)
    texts = [f[k] for f in doc["findings"] for k in ("host", "severity", "id", "title", "evidence", "fix")]
    assert_whole(table, texts, width)
    assert f"`ansible -i {inventory} gpu-x.fra2 -m ping`" in table  # the command to run, whole
    assert len(markdown_tables(markdown)[0][1]) == len(doc["findings"])
    assert_whole(" ".join(markdown_cells(markdown)), texts, width)
    assert "gpu-x.fra2: unhealthy: 1 error(s)" in " ".join(table.split())


@pytest.mark.parametrize("width", WIDTHS)
def test_doctor_local(at, width):
    """`doctor --local` on this machine, whatever it finds (no NVIDIA GPU here: a finding)."""
    table = at(width, "doctor", "--local", "--host-timeout", "30", codes=(0, 1))
    doc = json.loads(at(width, "doctor", "--local", "--host-timeout", "30", "--format", "json", codes=(0, 1)).out)
    assert_fits(table.out, width)
    texts = [f[k] for f in doc["findings"] for k in ("severity", "id", "title")]
    texts += [f["fix"] for f in doc["findings"]]
    assert_whole(table.out, texts, width)


def test_doctor_piped_without_columns_fits_100(cli, monkeypatch):
    """Piped (no terminal) and no COLUMNS: 100 columns, as every other table."""
    monkeypatch.delenv("COLUMNS", raising=False)
    out = cli("doctor", *doctor_args(["q-x__a100__mig-pending-MODIFIED.xml"])).out
    assert max(map(len, out.splitlines())) <= 100
    assert max(map(len, out.splitlines())) > 60


# -- verify ---------------------------------------------------------------------------------------
VERIFY = ("verify", "--local", "--os", "ubuntu22.04", "--gpu", "h100-sxm", "--framework", "pytorch")


@pytest.fixture(scope="module")
def local_run():
    """This machine's real verify run (checks that pass, fail and skip), as JSON."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "provision", *VERIFY, "--format", "json"], capture_output=True, text=True, check=False
    )
    doc = json.loads(proc.stdout)
    assert {c["status"] for c in doc["hosts"][0]["checks"]} >= {"pass", "fail", "skip"}
    return doc


def fleet_report(local_run):
    """The local run's checks on three long-named hosts, one of them unreachable, one stopped."""
    from provision.verify.report import CheckResult, HostRun, VerifyReport

    hosts = ["dgx-h100-node-017.fra2.example.net", "127.120.33.201", "gpu-x.fra2.example.net"]
    results = [
        CheckResult(host, c["id"], c["title"], c["status"], c["detail"], tuple(c["evidence"]), c["seconds"])
        for host in hosts[:2]
        for c in local_run["hosts"][0]["checks"]
    ]
    runs = {
        hosts[2]: HostRun("host unreachable: ssh: connect to host gpu-x.fra2.example.net port 22: No route to host"),
        hosts[1]: HostRun(
            "did not finish within 120 s (--host-timeout): stopped after 19 check(s); a command on the host hangs "
            "(provision doctor reads the kernel log)"
        ),
    }
    return VerifyReport(hosts, results, [], 1, runs)


@pytest.mark.parametrize("width", WIDTHS)
def test_verify_local(at, width):
    table = at(width, *VERIFY, codes=(0, 1))
    markdown = at(width, *VERIFY, "--format", "markdown", codes=(0, 1))
    assert_fits(table.out, width)
    cells = markdown_cells(markdown.out)
    assert_whole(table.out, cells, width)
    assert re.search(r"^local: \d+ passed, \d+ failed, \d+ skipped$", table.out, re.M)
    assert "local: " in markdown.out


@pytest.mark.parametrize("width", WIDTHS)
def test_verify_report_of_a_fleet(width, local_run, capsys, monkeypatch):
    from provision.cli.verify import HEADERS, _print_table

    monkeypatch.setenv("COLUMNS", str(width))
    report = fleet_report(local_run)
    _print_table(report)
    table = capsys.readouterr().out
    _print_table(report, "markdown")
    markdown = capsys.readouterr().out
    assert_fits(table, width)
    cells = markdown_cells(markdown)
    assert len(markdown_tables(markdown)[0][1]) == len(report.results) + 2
    assert_whole(table, cells, width)
    assert markdown_tables(markdown)[0][0] == HEADERS
    flat = " ".join(table.split())
    assert "host unreachable: ssh: connect to host gpu-x.fra2.example.net port 22" in flat
    assert flat.count("host unreachable") == 1  # in its row only, not again in the summary line
    assert "gpu-x.fra2.example.net: ERROR, not verified" in flat


def test_verify_table_is_columns_where_they_fit_and_a_line_per_check_else(local_run):
    from provision.cli.verify import report_table

    rows = fleet_report(local_run).table_rows()
    wide = report_table(rows, 400).splitlines()
    assert wide[2].split() == ["host", "check", "status", "evidence", "/", "reason"]
    assert set(wide[3]) == {"-", " "}
    narrow = report_table(rows, 100).splitlines()
    assert "host dgx-h100-node-017.fra2.example.net:" in narrow
    assert len(narrow) < 3 * len(rows)  # not four lines and a blank per check
    assert any(re.fullmatch(r"  FAIL  os +host runs .*", line) for line in narrow), narrow


def test_verify_table_shows_a_reason_whole_and_a_long_evidence_cut_between_words():
    from provision.verify.report import SHOWN_EVIDENCE, CheckResult, VerifyReport

    reason = "nvidia-container-toolkit 1.17.8-1 is installed; the plan pins 1.20.0 " * 3
    evidence = tuple(f"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.95.05 copy {n}" for n in range(40))
    report = VerifyReport(
        ["h"],
        [
            CheckResult("h", "container-toolkit", "t", "fail", reason, (), 0.1),
            CheckResult("h", "driver-packages", "t", "pass", "", evidence, 0.1),
        ],
        [],
        1,
    )
    (fail, passed) = [row[3] for row in report.table_rows()]
    assert fail == " ".join(reason.split())
    assert len(passed) < SHOWN_EVIDENCE + 80
    kept, _, rest = passed.partition(" … ")
    assert set(kept.replace(";", "").split()) <= set(" ".join(evidence).split())  # whole tokens only
    assert re.fullmatch(r"\(\+\d+ characters: --format json shows all\)", rest)


@pytest.mark.parametrize("width", WIDTHS)
def test_verify_list(at, width):
    table = at(width, "verify", "--list").out
    markdown = at(width, "verify", "--list", "--format", "markdown").out
    listed = json.loads(at(width, "verify", "--list", "--format", "json").out)
    assert_fits(table, width)
    cells = markdown_cells(markdown)
    assert_whole(table, cells, width)
    assert len(markdown_tables(markdown)[0][1]) == len(listed)


# -- inventory scan -------------------------------------------------------------------------------
def scan_documents(real_matrix) -> list[dict]:
    """Scan documents as test_scan builds them, from real captures; one host unreachable."""
    from test_scan import dpkg_query, query_gpu

    from provision.fleet.scan import COMMANDS, Answer, document

    def answers(**given):
        out = {key: Answer("", "not found", 127, 40) for key, _ in COMMANDS}
        out.update({k.replace("_", "-"): Answer(v, "", 0, 40) for k, v in given.items()})
        return out

    now = "2026-12-01T10:00:00Z"
    docs = [
        document(
            "dgx-h100-node-017.fra2.example.net",
            answers(
                nvidia_smi=query_gpu((DOCTOR / "q__2x-h100__hw-slowdown-power-brake.txt").read_text()),
                proc_version=(SCAN / "proc-version__open-565.57.01.txt").read_text(),
                os_release='ID=ubuntu\nVERSION_ID="22.04"\n',
                dpkg=dpkg_query((SCAN / "dpkg-l__ubuntu24.04-550-server.txt").read_text()),
                docker_version=(SCAN / "docker-version__17.03.1-ce.txt").read_text(),
                ctk_version=(SCAN / "nvidia-ctk-version__1.12.0.txt").read_text(),
            ),
            real_matrix,
            scanned_at=now,
        ),
        document(
            "gpu-v100-a.fra2",
            answers(
                nvidia_smi=query_gpu((DOCTOR / "q__2x-v100__old-ecc-layout.txt").read_text()),
                proc_version=(SCAN / "proc-version__proprietary-535.183.06.txt").read_text(),
                os_release=(SCAN / "os-release__rocky-9.1.txt").read_text(),
            ),
            real_matrix,
            scanned_at=now,
        ),
    ]
    gone = dict(docs[1], host="gpu-x.fra2.example.net", reachable=False, os=None, driver=None, gpus=[], held=[])
    gone.update(container_toolkit=None, docker=None)
    gone["error"] = "unreachable: ssh: connect to host gpu-x.fra2.example.net port 22: No route to host"
    return [*docs, gone]


@pytest.mark.parametrize("width", WIDTHS)
def test_inventory_scan(width, real_matrix, capsys, monkeypatch):
    from provision.cli.scan import HEADERS, _print_table, table_rows

    monkeypatch.setenv("COLUMNS", str(width))
    docs = scan_documents(real_matrix)
    assert docs[0]["driver"]["version"] == "565.57.01"
    assert docs[0]["gpus"][0]["catalogue_id"] == "h100-sxm"
    _print_table(docs)
    table = capsys.readouterr().out
    _print_table(docs, "markdown")
    markdown = capsys.readouterr().out
    assert_fits(table, width)
    (headers, rows) = markdown_tables(markdown)[0]
    assert headers == list(HEADERS)
    assert len(rows) == len(table_rows(docs)) == 3
    assert_whole(table, [cell for row in rows for cell in row], width)
    flat = " ".join(table.split())
    assert f"{docs[2]['host']}: {docs[2]['error']}" in flat
    assert "2 of 3 host(s) scanned" in flat


def test_inventory_scan_takes_format_markdown(cli, tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump({"all": {"children": {"gpus": {"hosts": {"here": {"ansible_connection": "local"}}}}}})
    )
    res = cli("inventory", "scan", "-i", str(inventory), "--format", "markdown", "--host-timeout", "30")
    assert res.code == 0, res
    ((headers, rows),) = markdown_tables(res.out)
    assert headers[:2] == ["host", "reachable"]
    assert rows[0][:2] == ["here", "yes"]


# -- inventory check ------------------------------------------------------------------------------
def long_inventory(folder: Path, *, bad: bool = False) -> str:
    hosts = {
        "dgx-h100-node-017.fra2.example.net": {"ansible_host": "127.120.33.17", "ansible_port": 2222},
        "dgx-h100-node-018.fra2.example.net": {"ansible_host": "fd00:1200:33::18"},
        "gpu-v100-a.fra2": {"ansible_host": "gpu-v100-a.oob.fra2.example.net", "ansible_user": "provision"},
    }
    if bad:
        hosts["gpu-v100-a.fra2"]["ansible_ssh_common_args"] = "-o ProxyCommand='nc -X connect -x proxy.fra2:3128 %h %p'"
    doc = {
        "all": {
            "children": {
                "h100-training-nodes-frankfurt": {"hosts": {h: hosts[h] for h in list(hosts)[:2]}},
                "v100-inference-legacy": {"hosts": {"gpu-v100-a.fra2": hosts["gpu-v100-a.fra2"]}},
            }
        }
    }
    path = Path("inventories", "production-frankfurt-site-2", "gpu-cluster-hosts.yml")  # from the folder
    (folder / path).parent.mkdir(parents=True)
    (folder / path).write_text(yaml.safe_dump(doc))
    (folder / "fleet.yaml").write_text(
        "groups:\n"
        "  h100-training-nodes-frankfurt: {os: ubuntu22.04, gpu: h100-sxm, framework: pytorch}\n"
        "  v100-inference-legacy: {os: rocky9, gpu: v100-sxm2-32gb, host_only: true}\n"
    )
    return str(path)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("fleet", [False, True], ids=["inventory", "fleet"])
def test_inventory_check(at, tmp_path, monkeypatch, width, fleet):
    monkeypatch.chdir(tmp_path)
    inventory = long_inventory(tmp_path)
    extra = ("--fleet", "fleet.yaml") if fleet else ()
    res = at(width, "inventory", "check", "-i", inventory, *extra)
    assert_fits(res.out + res.err, width)
    for host in ("dgx-h100-node-017.fra2.example.net", "fd00:1200:33::18", "gpu-v100-a.oob.fra2.example.net"):
        assert host in res.out.split()
    flat = " ".join(res.out.split())
    assert "pass connection variables: no shell metacharacter" in flat
    if fleet:
        assert "plan h100-training-nodes-frankfurt: h100-sxm on ubuntu22.04, driver" in flat
        assert "ok: every check provision apply runs before it starts passed" in flat


@pytest.mark.parametrize("width", WIDTHS)
def test_inventory_check_problems_fit_too(at, tmp_path, monkeypatch, width):
    monkeypatch.chdir(tmp_path)
    res = at(width, "inventory", "check", "-i", long_inventory(tmp_path, bad=True), codes=(2,))
    assert_fits(res.out + res.err, width)
    flat = " ".join(res.err.split())
    assert "error: gpu-v100-a.fra2: ansible_ssh_common_args" in flat
    assert "hint: fix the inventory; provision apply refuses to start until this passes" in flat
    assert "FAIL connection variables: 1 problem(s)" in " ".join(res.out.split())


# -- apply's summary ------------------------------------------------------------------------------
@pytest.mark.parametrize("width", WIDTHS)
def test_apply_summary(width, capsys, monkeypatch):
    from provision.cli.fleet import print_summary
    from provision.fleet.apply import GuardOff, Prepared
    from provision.fleet.runner import HostResult, RunResult, _message

    monkeypatch.setenv("COLUMNS", str(width))
    apt = {
        "stderr": "E: Unable to locate package nvidia-driver-580-open\n"
        "E: Couldn't find any package by regex 'nvidia-driver-580-open'\n",
        "msg": "non-zero return code",
    }
    ssh = {"msg": "Failed to connect to the host via ssh: ssh: connect to host 127.120.33.18 port 22: No route to host"}
    hosts = (
        HostResult("dgx-h100-node-017.fra2.example.net", 41, 12, 0, 0, 3, True, None),
        HostResult("dgx-h100-node-018.fra2.example.net", 3, 0, 0, 1, 0, False, f"unreachable: {_message(ssh)}"),
        HostResult("gpu-v100-a.fra2", 17, 2, 1, 0, 1, False, f"nvidia_driver : install the driver: {_message(apt)}"),
    )
    run_dir = "/srv/provisioning/site-frankfurt-2/provision-runs/20261202T021455Z-3f9c2a7e"
    result = RunResult("failed", 2, hosts, run_dir, f"{run_dir}/artifacts/3f9c2a7e").with_not_run(
        [h.host for h in hosts] + ["gpu-v100-b.fra2"], None
    )
    guards = (
        GuardOff("preflight_check_gpu_processes", False, "--no-gpu-process-check", "preflight's GPU process check"),
    )
    prepared = Prepared(None, {}, {}, run_dir, guards)
    print_summary(prepared, result, check=False)
    out = capsys.readouterr().out
    assert_fits(out, width)
    texts = [h.host for h in result.hosts] + [h.cause or h.not_run or "" for h in result.hosts] + [run_dir]
    assert_whole(out, texts, width)
    assert "dgx-h100-node-018.fra2.example.net" in out.split()  # whole, on one line
    assert "guard off by --no-gpu-process-check: preflight's GPU process check" in " ".join(out.split())
