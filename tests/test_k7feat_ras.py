"""RAS on 7.x (issue 20 section 3): the trace fields and events kernels after 6.12 add.

Lines: the recorded 6.12 ones (fixtures/linux-6.12/events) with what the later ``TP_printk``
formats add in the place they add it (``hpa_alias0=%llx`` after ``hpa=``; the PLDM and CME
fields at the end), and the new events in their ``TP_printk`` shape
(``cxl_port_aer_*``: ``device=%s host=%s status=...``; ``cxl_memory_sparing``: the common
event header, then the sparing record) -- no 7.x guest has produced events here yet.
"""

from __future__ import annotations

import os

from cxlctl.ras.events import to_event
from cxlctl.ras.health import HealthReport, render_health
from cxlctl.ras.trace import parse_line
from tests.kit import FIXTURES

EVENTS = os.path.join(FIXTURES, "linux-6.12", "events")


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
