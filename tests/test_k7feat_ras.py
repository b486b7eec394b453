"""RAS on 7.x (issue 20 section 3): the trace fields and events kernels after 6.12 add.

Two sources.  The streams a real 7.3.4 guest wrote for QEMU-injected events
(``fixtures/linux-7.x/events``, ``scripts/record-fixtures.sh ras --kernel 7.x``): its
``hpa_alias0``, ``region_uuid``, ``sub_channel``, PLDM and CME fields, and its event
formats (every ``cxl_*`` event that kernel defines has a kind here).  And, for what QEMU
cannot inject (``cxl_port_aer_*``, ``cxl_memory_sparing``, a real alias), lines in their
``TP_printk`` shape: the recorded 6.12 ones with the later fields added in the place the
formats add them, and the new events' own layout.
"""

from __future__ import annotations

import os
from typing import List

from cxlctl.ras.events import to_event
from cxlctl.ras.health import HealthReport, render_health
from cxlctl.ras.trace import parse_line
from tests.kit import FIXTURES

EVENTS = os.path.join(FIXTURES, "linux-6.12", "events")
EVENTS_7X = os.path.join(FIXTURES, "linux-7.x", "events")


def _recorded(name: str) -> str:
    with open(os.path.join(EVENTS, name)) as f:
        return f.read().splitlines()[0]


def test_general_media_hpa_alias0_and_new_fields() -> None:
    line = _recorded("general-media-in-region.txt")
    assert " hpa=59000a000 region=region1" in line
    newer = line.replace(" hpa=59000a000 ", " hpa=59000a000 hpa_alias0=49000a000 ") + (
        " cme_threshold_ev_flags='' cme_count=0"
    )
    ev = to_event(parse_line(newer), None)
    assert ev.kind == "general_media" and ev.memdev == "mem3"
    assert ev.hpa_alias == 0x49000A000 and ev.as_json()["hpa_alias0"] == 0x49000A000
    assert ev.fields["region_uuid"] == "00000000-0000-0000-0000-000000000000"
    assert ev.fields["cme_count"] == "0"
    none = to_event(parse_line(line.replace(" hpa=59000a000 ", " hpa=59000a000 hpa_alias0=ffffffffffffffff ")), None)
    assert none.hpa_alias is None  # ULLONG_MAX: no alias
    assert to_event(parse_line(line), None).hpa_alias is None  # 6.12: no field


def _recorded_7x(name: str) -> List[str]:
    with open(os.path.join(EVENTS_7X, name)) as f:
        return [x for x in f.read().splitlines() if x.strip()]


def test_7x_recorded_media_and_dram_events_carry_the_new_fields() -> None:
    """What 7.3.4 itself printed: no alias (``ULLONG_MAX``) is no alias, the region's
    UUID and the DRAM record's sub-channel are kept, and nothing is left unparsed."""
    (gm_line,) = [x for x in _recorded_7x("general-media-in-region.txt") if "cxl_general_media:" in x]
    gm = to_event(parse_line(gm_line), None)
    assert gm.kind == "general_media" and gm.severity == "informational" and gm.dpa == 0x4000
    assert "hpa_alias0=ffffffffffffffff" in gm_line and gm.hpa_alias is None and gm.as_json()["hpa_alias0"] is None
    assert gm.fields["region_uuid"] == "00000000-0000-0000-0000-000000000000"
    assert gm.fields["cme_count"] == "0" and gm.fields["comp_id_pldm_valid_flags"] == ""
    (dr_line,) = [x for x in _recorded_7x("dram-in-region.txt") if "cxl_dram:" in x]
    dr = to_event(parse_line(dr_line), None)
    assert dr.kind == "dram" and dr.severity == "failure" and dr.dpa == 0x2040
    assert dr.fields["sub_channel"] == "0" and dr.fields["cvme_count"] == "0" and dr.fields["channel"] == "1"
    poison = [to_event(parse_line(x), None) for x in _recorded_7x("poison-in-region.txt") if "cxl_poison:" in x]
    assert poison and all(p.kind == "poison" and p.hpa_alias is None for p in poison)


def test_7x_every_cxl_event_the_kernel_defines_has_a_kind() -> None:
    """The recorded ``events/cxl/*/format`` files of 7.3.4: a new event there is a new row in KINDS."""
    from cxlctl.ras.events import KINDS

    names = sorted(f[: -len(".format")] for f in os.listdir(os.path.join(EVENTS_7X, "formats")))
    assert "cxl_memory_sparing" in names and "cxl_port_aer_correctable_error" in names
    assert [n for n in names if n not in KINDS] == []


def test_port_aer_events_name_a_port_not_a_memdev() -> None:
    head = "  irq/24-aerdrv-90      [001] .....   120.5: "
    ce = to_event(
        parse_line(
            head + "cxl_port_aer_correctable_error: device=0000:0c:00.0 host=pci0000:0c "
            "status='Received Error From Physical Layer'"
        ),
        None,
    )
    assert (ce.kind, ce.severity, ce.memdev, ce.port) == ("port_correctable", "correctable", None, "0000:0c:00.0")
    assert ce.mapping.why is not None and "every device below that port" in ce.mapping.why
    ue = to_event(
        parse_line(
            head + "cxl_port_aer_uncorrectable_error: device=0000:0c:00.0 host=pci0000:0c "
            "status: 'Memory Address Parity Error' first_error: 'Memory Address Parity Error'"
        ),
        None,
    )
    assert (ue.kind, ue.severity, ue.memdev) == ("port_uncorrectable", "uncorrectable", None)
    assert ue.fields["first_error"] == "Memory Address Parity Error"


def test_memory_sparing_event() -> None:
    line = (
        "  irq/64-0000:0d:-200     [000] .....    77.4: cxl_memory_sparing: memdev=mem2 host=0000:0d:00.0 "
        "serial=16385 log=Informational : time=1796106032644769278 uuid=e71f3a40-2d29-4092-8a39-4d1c966c7c65 "
        "len=128 flags='0x1' handle=1 related_handle=0 maint_op_class=2 maint_op_sub_class=1 : "
        "flags='' result=0 validity_flags='CHANNEL|RANK' spare_res_avail=3 channel=1 rank=0 nibble_mask=0 "
        "bank_group=0 bank=0 row=0 column=0 sub_channel=0"
    )
    ev = to_event(parse_line(line), None)
    assert (ev.kind, ev.memdev, ev.severity) == ("memory_sparing", "mem2", "informational")
    assert ev.fields["sub_channel"] == "0" and ev.fields["spare_res_avail"] == "3"


def test_health_lists_port_events_apart() -> None:
    report = HealthReport((), {"0000:0c:00.0": {"port_correctable/correctable": 2}}, (), ())
    out = render_health(report)
    assert "port 0000:0c:00.0: events port_correctable/correctable 2" in out
