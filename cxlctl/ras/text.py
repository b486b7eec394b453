"""Plain-text rendering of RAS events: two short lines per event, readable at
80 columns, no markup (kernel text is printed as data, control characters
escaped, so a crafted trace field cannot drive the terminal)."""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from cxlctl.term import clean

from .events import Event


def _hex(v: Optional[int]) -> str:
    return "-" if v is None else f"{v:#x}"


def event_lines(ev: Event, width: Optional[int] = None) -> List[str]:
    """Two or three lines; continuation lines fold at ``width`` (the terminal's,
    at least 80) so nothing is cut."""
    from cxlctl import term

    w = width or max(80, term.width())
    return [x for line in _event_lines(ev) for x in term.fold(line, w).split("\n")]


def _event_lines(ev: Event) -> List[str]:
    m = ev.mapping
    sev = ev.severity_note()
    # seconds since boot, as dmesg counts them (so a line can be found beside the kernel's own)
    head = f"[{ev.timestamp:12.6f} s] {ev.kind}{' ' + sev if sev else ''} {clean(ev.memdev or '?')}"
    if ev.host:
        head += f" ({clean(ev.host)})"
    where: List[str] = []
    if ev.dpa is not None:
        where.append(f"DPA {_hex(ev.dpa)}")
    if m.hpa is not None:
        where.append(f"HPA {_hex(m.hpa)}" + (" (kernel)" if m.hpa_source == "kernel" else ""))
    if m.region:
        where.append(clean(m.region))
    if m.node is not None:
        where.append(f"node {m.node}")
    if m.memory_block is not None:
        where.append(f"block {m.memory_block}" + (f" {clean(m.block_state)}" if m.block_state else ""))
    detail = _detail(ev)
    out = [head]
    if where:
        out.append("    " + ", ".join(where))
    if m.why and m.hpa is None and ev.dpa is not None:
        out.append("    " + clean(m.why))
    if detail:
        out.append("    " + clean(detail))
    return out


#: the fields worth a third line, per kind (the rest stays in --json)
_DETAIL: Dict[str, Tuple[str, ...]] = {
    "general_media": ("descriptor", "type", "transaction_type"),
    "dram": ("descriptor", "type", "transaction_type", "channel", "rank"),
    "memory_module": ("event_type", "health_status", "media_status", "life_used", "device_temp"),
    "poison": ("source", "flags", "dpa_length"),
    "correctable": ("status",),
    "uncorrectable": ("status", "first_error"),
    "overflow": ("count", "log"),
}


def _detail(ev: Event) -> str:
    keys = _DETAIL.get(ev.kind, ())
    parts = [
        f"{k}='{ev.fields[k]}'" if " " in ev.fields[k] else f"{k}={ev.fields[k]}"
        for k in keys
        if ev.fields.get(k) not in (None, "")
    ]
    return " ".join(parts)
