"""The nvidia-smi field table (provision.smi) and the parsers that walk it.

Each walker is checked against documents built from the table itself: a value placed at a
field's XML path, -q label path or --query-gpu column must come back, converted, in that field.
"""

from dataclasses import fields as dataclass_fields

import pytest

from provision import smi
from provision.doctor import parse_smi
from provision.doctor.state import GpuState
from provision.verify import facts

# GpuState attributes that are not nvidia-smi fields: where a record came from, and the clock
# reasons (a family of flags read through state.CLOCK_REASONS).
NOT_FIELDS = {"source", "fmt", "clocks_label", "clocks"}
SAMPLE = {smi.clean: "Some Text", smi.number: "41.5 W", smi.integer: "7", smi.flag: "Enabled"}
WANT = {smi.clean: "Some Text", smi.number: 41.5, smi.integer: 7, smi.flag: True}


def _sample(f: smi.Field) -> tuple[str, object]:
    if f.raw:
        return "ERR!", "ERR!"
    return SAMPLE[f.convert], WANT[f.convert]


def test_every_gpu_state_field_is_declared_once():
    names = [f.name for f in (*smi.LOG_FIELDS, *smi.GPU_FIELDS)]
    assert len(names) == len(set(names))
    state = {f.name for f in dataclass_fields(GpuState)} - NOT_FIELDS
    assert state <= set(names), f"GpuState fields missing from provision.smi: {sorted(state - set(names))}"
    for f in smi.GPU_FIELDS:
        assert f.xml or f.text or f.query or f.table, f"{f.name} is read from no format"


def test_query_names_are_unique_and_aliases_point_at_declared_names():
    queries = [q for f in (*smi.LOG_FIELDS, *smi.GPU_FIELDS) for q in f.query]
    assert len(queries) == len(set(queries))
    assert set(smi.QUERY_ALIASES.values()) <= set(queries)
    assert not set(smi.QUERY_ALIASES) & set(queries)


def test_doctor_csv_columns():
    # the columns that make a header "--query-gpu CSV" for doctor: those it reads, with aliases
    columns = parse_smi._CSV_FIELDS
    assert columns == {
        "index", "name", "gpu_name", "pci.bus_id", "gpu_bus_id", "uuid", "gpu_uuid", "persistence_mode",
        "driver_model.current", "pstate", "utilization.gpu", "temperature.gpu", "power.draw",
        "enforced.power.limit", "power.limit", "power.default_limit", "ecc.mode.current",
        "ecc.errors.uncorrected.volatile.total", "ecc.errors.uncorrected.aggregate.total",
        "ecc.errors.corrected.volatile.total", "ecc.errors.corrected.aggregate.total",
        "retired_pages.single_bit_ecc.count", "retired_pages.double_bit.count", "retired_pages.pending",
        "remapped_rows.correctable", "remapped_rows.uncorrectable", "remapped_rows.pending",
        "remapped_rows.failure", "mig.mode.current", "mig.mode.pending", "pcie.link.gen.current",
        "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max", "fan.speed", "fabric.state",
        "fabric.status", "gpu_recovery_action", "driver_version",
    }  # fmt: skip
    assert "pci.device_id" not in parse_smi._CSV_FIELDS  # verify reads it; GpuState has no slot for it
    assert parse_smi.csv_header("index, pci.device_id") == ["index", "pci.device_id"]
    assert parse_smi.csv_header("pci.device_id, foo.bar") is None


def _xml_gpu(fields: dict[str, str]) -> str:
    """A <gpu> element with one value at each path (shared parents merged)."""
    tree: dict = {}
    for path, value in fields.items():
        node = tree
        *parents, leaf = path.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value

    def render(node: dict) -> str:
        return "".join(f"<{k}>{render(v) if isinstance(v, dict) else v}</{k}>" for k, v in node.items())

    return f'<gpu id="00000000:3B:00.0">{render(tree)}</gpu>'


def test_xml_walker_reads_every_field_at_its_first_path():
    values = {}
    expected = {}
    for f in parse_smi.STATE_FIELDS:
        if f.xml:
            text, want = _sample(f)
            values[f.xml[0].replace("{power}", smi.XML_POWER[0])] = text
            expected[f.name] = want
    root = _xml_gpu(values).replace("<gpu ", "<nvidia_smi_log><driver_version>580.95.05</driver_version><gpu ")
    result = parse_smi.parse_xml(root + "</nvidia_smi_log>", "f")
    (g,) = result.gpus
    assert result.driver_version == "580.95.05"
    assert g.bus_id == "0000:3b:00.0"
    assert {name: getattr(g, name) for name in expected} == expected
    assert len(expected) >= 35


def _q_text(fields: dict[str, str]) -> str:
    tree: dict = {}
    for path, value in fields.items():
        node = tree
        *parents, leaf = path.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value

    def render(node: dict, depth: int) -> list[str]:
        out = []
        for k, v in node.items():
            pad = "    " * depth
            out += [pad + k, *render(v, depth + 1)] if isinstance(v, dict) else [f"{pad}{k:<40}: {v}"]
        return out

    head = ["==============NVSMI LOG==============", "", "Driver Version : 580.95.05", "", "GPU 00000000:3B:00.0"]
    return "\n".join(head + render(tree, 1)) + "\n"


def test_q_text_walker_reads_every_field_at_its_first_label_path():
    values = {}
    expected = {}
    for f in parse_smi.STATE_FIELDS:
        if f.text:
            text, want = _sample(f)
            path = f.text[0].replace("{power}", smi.TEXT_POWER[0]).replace("Pending*", "Pending Page Blacklist")
            values[path] = text
            expected[f.name] = want
    result = parse_smi.parse_q_text(_q_text(values), "f")
    (g,) = result.gpus
    assert result.driver_version == "580.95.05"
    assert {name: getattr(g, name) for name in expected} == expected
    assert len(expected) >= 35


def test_csv_walker_reads_every_field_from_its_column():
    cols, cells, expected = [], [], {}
    for f in parse_smi.STATE_FIELDS:
        if f.query:
            text, want = _sample(f)
            cols.append(f.query[0])
            cells.append(text)
            expected[f.name] = want
    (g,) = parse_smi.parse_csv(", ".join(cols) + "\n" + ", ".join(cells) + "\n", "f").gpus
    assert {name: getattr(g, name) for name in expected} == expected
    assert len(expected) >= 30


def test_alternatives_first_readable_wins():
    xml = _xml_gpu(
        {
            "gpu_power_readings/enforced_power_limit": "N/A",
            "gpu_power_readings/current_power_limit": "300.00 W",
            "gpu_power_readings/power_limit": "250.00 W",
            "power_readings/enforced_power_limit": "100.00 W",  # another section: not read
        }
    )
    (g,) = parse_smi.parse_xml(f"<nvidia_smi_log>{xml}</nvidia_smi_log>", "f").gpus
    assert g.power_limit == 300.0
    (c,) = parse_smi.parse_csv("index, enforced.power.limit, power.limit\n0, [N/A], 250.00 W\n", "f").gpus
    assert c.power_limit == 250.0


def test_power_section_is_the_one_the_gpu_has():
    xml = _xml_gpu({"gpu_power_readings/power_draw": "N/A", "power_readings/power_draw": "70.00 W"})
    (g,) = parse_smi.parse_xml(f"<nvidia_smi_log>{xml}</nvidia_smi_log>", "f").gpus
    assert g.power_draw is None  # newer section present: the older one is not consulted
    old = _xml_gpu({"power_readings/power_draw": "70.00 W"})
    (g,) = parse_smi.parse_xml(f"<nvidia_smi_log>{old}</nvidia_smi_log>", "f").gpus
    assert g.power_draw == 70.0


@pytest.mark.parametrize("label", ["Pending Page Blacklist", "Pending Page Retirement", "Pending"])
def test_text_label_prefix(label):
    (g,) = parse_smi.parse_q_text(_q_text({f"Retired Pages/{label}": "Yes"}), "f").gpus
    assert g.retired_pending is True


def test_raw_field_keeps_what_nvidia_smi_printed():
    xml = _xml_gpu({"fan_speed": "N/A"})
    (g,) = parse_smi.parse_xml(f"<nvidia_smi_log>{xml}</nvidia_smi_log>", "f").gpus
    assert g.fan == "N/A"
    (g,) = parse_smi.parse_q_text(_q_text({"Fan Speed": "ERR!"}), "f").gpus
    assert g.fan == "ERR!"


def test_verify_queries_the_table_s_properties():
    assert facts.SMI_FIELDS == (
        "index",
        "name",
        "pci.device_id",
        "driver_version",
        "persistence_mode",
        "mig.mode.current",
        "mig.mode.pending",
    )
    read = facts.GPU_FIELDS
    assert read == tuple({"driver": "driver_version"}.get(name, name) for name in facts.Gpu._fields)
    assert smi.device_id("0x20B510DE") == "0x20b5"
    assert smi.device_id("0x20b5") == "0x20b5"


@pytest.mark.parametrize(
    ("text", "want"),
    [("580.95.05", "580.95.05"), ("13.3 [Deprecated; use CUDA UMD Version]", "13.3"), ("N/A", None), (None, None)],
)
def test_version_converter(text, want):
    assert smi.version(text) == want
