"""A strict parser of the Prometheus text exposition format 0.0.4, for the daemon tests.

Separate from daemon_support so the VM tests can import it without the unit
tests' conftest.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple


class Exposition:
    """A parsed exposition: families (name → type, help) and samples ((name, labels) → value)."""

    def __init__(self) -> None:
        self.types: Dict[str, str] = {}
        self.helps: Dict[str, str] = {}
        self.samples: Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float] = {}

    def get(self, name: str, **labels: str) -> Optional[float]:
        """The value of the one series of ``name`` whose labels include ``labels``."""
        hits = [v for (n, lab), v in self.samples.items() if n == name and set(labels.items()) <= set(lab)]
        assert len(hits) <= 1, (name, labels, hits)
        return hits[0] if hits else None

    def series(self, name: str) -> List[Dict[str, str]]:
        return [dict(lab) for (n, lab) in self.samples if n == name]


_METRIC = r"[a-zA-Z_:][a-zA-Z0-9_:]*"


def parse_exposition(text: str) -> Exposition:
    """Strict parser of the Prometheus text format 0.0.4 (raises AssertionError on any violation)."""
    import math
    import re

    ex = Exposition()
    assert text.endswith("\n"), "the exposition must end with a newline"
    seen_samples: Dict[str, bool] = {}
    current: Optional[str] = None
    done: Set[str] = set()

    def family_of(sample: str) -> str:
        for suffix in ("_sum", "_count", "_bucket"):
            base = sample[: -len(suffix)]
            if sample.endswith(suffix) and ex.types.get(base) in ("summary", "histogram"):
                return base
        return sample

    for n, line in enumerate(text.splitlines(), 1):
        where = f"line {n}: {line!r}"
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                assert re.fullmatch(_METRIC, name), where
                if parts[1] == "TYPE":
                    assert name not in ex.types, f"second TYPE for {name}: {where}"
                    assert name not in seen_samples, f"TYPE after samples of {name}: {where}"
                    t = parts[3] if len(parts) > 3 else ""
                    assert t in ("counter", "gauge", "summary", "histogram", "untyped"), where
                    ex.types[name] = t
                else:
                    assert name not in ex.helps, f"second HELP for {name}: {where}"
                    ex.helps[name] = (parts[3] if len(parts) > 3 else "").replace("\\n", "\n").replace("\\\\", "\\")
            continue
        m = re.fullmatch(rf"({_METRIC})(\{{(.*)\}})? (\S+)( -?\d+)?", line)
        assert m, f"not a sample: {where}"
        name, labtext, value = m.group(1), m.group(3), m.group(4)
        labels: List[Tuple[str, str]] = []
        if labtext:
            pos = 0
            lm = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')
            while pos < len(labtext):
                mm = lm.match(labtext, pos)
                assert mm, f"bad labels at {labtext[pos:]!r}: {where}"
                raw = mm.group(2)
                assert re.fullmatch(r'(?:[^\\]|\\[\\"n])*', raw), f"bad escape: {where}"
                val = re.sub(r"\\(.)", lambda x: "\n" if x.group(1) == "n" else x.group(1), raw)
                labels.append((mm.group(1), val))
                pos = mm.end()
            names = [k for k, _ in labels]
            assert len(names) == len(set(names)), f"duplicate label: {where}"
        fam = family_of(name)
        if current != fam:
            assert fam not in done, f"samples of {fam} are not contiguous: {where}"
            if current is not None:
                done.add(current)
            current = fam
        seen_samples[fam] = True
        v = (
            float(value)
            if value not in ("NaN", "+Inf", "-Inf")
            else {"NaN": math.nan, "+Inf": math.inf, "-Inf": -math.inf}[value]
        )
        key = (name, tuple(sorted(labels)))
        assert key not in ex.samples, f"duplicate series: {where}"
        ex.samples[key] = v
    return ex
