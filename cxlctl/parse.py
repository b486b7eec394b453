"""Pure parsers and formatters for sysfs values and user input.

Strict by design (see the reference's input-safety notes): node lists and sizes
reject trailing junk, negatives and overflow instead of guessing, and every
parser raises ``ValueError`` with a message that names the problem.
"""

from __future__ import annotations

import os

# typing costs ~5 ms of start-up: only mypy needs it here
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, Iterable, List, Optional, Tuple


U64_MAX = (1 << 64) - 1


def _page_size() -> int:
    try:
        v = os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # no sysconf (not POSIX), or it cannot tell
        return 4096
    return v if v > 0 else 4096


#: the host's base page size, the unit of vmstat's page counters, numa_maps' default
#: ``kernelpagesize_kB`` and ``soft_offline_page``'s alignment; 4096 where it cannot be asked.
#: The one place it is written: a 64 KiB-page (arm64, ppc64) host is not 4096.
PAGE_SIZE = _page_size()
MAX_NODES = 1 << 10  # the kernel's MAX_NUMNODES is at most 1024

#: ASCII only: ``str.isdigit`` accepts ``²`` (which ``int`` rejects) and ``int`` accepts
#: ``١`` (Arabic-Indic one); neither is a number in sysfs or on a command line.
#: Checked with str methods, not ``re``: importing and compiling ``re`` costs a few
#: milliseconds of ``status --json`` start-up, which reads numbers and nothing else.
_HEX_DIGITS = "0123456789abcdefABCDEF"


def _is_hex_digits(text: str) -> bool:
    """``[0-9a-fA-F]+``."""
    return text != "" and not text.lstrip(_HEX_DIGITS)


def _is_int(text: str) -> bool:
    """``-?(0[xX][0-9a-fA-F]+|[0-9]+)``."""
    body = text[1:] if text[:1] == "-" else text
    if body[:2] in ("0x", "0X"):
        return _is_hex_digits(body[2:])
    return is_decimal(body)


_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}


def is_decimal(text: str) -> bool:
    """True for a non-empty run of ASCII digits (what ``str.isdigit`` should have meant)."""
    return text.isascii() and text.isdigit()


def decimal_suffix(name: str, prefix: str) -> Optional[int]:
    """The N of an entry named ``<prefix>N`` (``node3`` → 3); None when N is not ASCII digits."""
    if not name.startswith(prefix):
        return None
    tail = name[len(prefix) :]
    return int(tail) if is_decimal(tail) else None


def sysfs_int(text: Optional[str], *, base: int = 10) -> Optional[int]:
    """A non-negative number read from sysfs, procfs or a trace field; None when absent, empty or
    odd -- never an exception.  The one tolerant number parser (:func:`parse_int` raises, for
    callers that say what was wrong).

    ``base`` as for ``int()``: 10, ASCII decimal digits only; 16, hex with or without ``0x``;
    0, decimal or ``0x`` hex (sysfs mixes both).  At most 20 digits and 64 bits: the kernel
    prints no wider number, and the bound keeps ``int()`` off a file of 5,000 digits.
    """
    if text is None:
        return None
    t = text.strip()
    if base != 10 and t[:2] in ("0x", "0X"):
        t, base = t[2:], 16
    elif base == 0:
        base = 10
    if len(t) > 20 or not (is_decimal(t) if base == 10 else _is_hex_digits(t)):
        return None
    v = int(t, base)
    return v if v <= U64_MAX else None


def parse_int(text: str) -> int:
    """Decimal, or hex when prefixed with 0x (sysfs mixes both).

    ASCII digits only, and within 64 bits either way: the kernel prints nothing
    wider, so a longer number is corruption, not a value.
    """
    t = text.strip()
    if not _is_int(t):
        raise ValueError(f"not a number: {text[:40]!r}")
    v = int(t, 16) if "x" in t.lower() else int(t, 10)
    if abs(v) > U64_MAX:
        raise ValueError(f"number out of 64-bit range: {text[:40]!r}")
    return v


def parse_hex(text: str) -> int:
    """Hex with or without ``0x`` (``block_size_bytes`` has none, ``dpa_size`` is zero-padded).

    Never negative (a size or address), at most 64 bits.
    """
    t = text.strip()
    if not t:
        raise ValueError("empty value")
    if not _is_hex_digits(t[2:] if t[:2] in ("0x", "0X") else t):
        raise ValueError(f"not a hex number: {text[:40]!r}")
    v = int(t, 16)
    if v > U64_MAX:
        raise ValueError(f"number out of 64-bit range: {text[:40]!r}")
    return v


def selected_word(text: str) -> str:
    """The ``[bracketed]`` choice of a sysfs mode file (``always [madvise] never`` -> ``madvise``);
    the text itself, stripped, when none is bracketed."""
    a, b = text.find("["), text.find("]")
    return text[a + 1 : b] if 0 <= a < b else text.strip()


def parse_nodelist(text: str, limit: int = MAX_NODES) -> Tuple[int, ...]:
    """Parse ``0-3,5,7-8`` (the kernel's ``%*pbl`` and numactl's grammar) strictly.

    Returns the sorted, de-duplicated ids.  An empty string is the empty set (the
    kernel prints that for, e.g., a node without CPUs).
    """
    t = text.strip()
    if not t:
        return ()
    out: set[int] = set()
    for part in t.split(","):
        p = part.strip()
        if not p:
            raise ValueError(f"empty element in list {text!r}")
        lo_s, sep, hi_s = p.partition("-")
        if not is_decimal(lo_s) or (sep and not is_decimal(hi_s)):
            raise ValueError(f"bad element {p!r} in list {text!r}: expected N or N-M")
        lo = int(lo_s)
        hi = int(hi_s) if sep else lo
        if hi < lo:
            raise ValueError(f"bad range {p!r} in list {text!r}: end before start")
        if hi >= limit:
            raise ValueError(f"{hi} in list {text!r} is out of range (max {limit - 1})")
        out.update(range(lo, hi + 1))
    return tuple(sorted(out))


def format_nodelist(ids: Iterable[int]) -> str:
    """Inverse of :func:`parse_nodelist`, compressing runs: (0,1,2,5) → ``0-2,5``."""
    s = sorted(set(ids))
    parts = []
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        parts.append(str(s[i]) if i == j else f"{s[i]}-{s[j]}")
        i = j + 1
    return ",".join(parts)


def parse_size(text: str) -> int:
    """Bytes from ``512M``/``4G``/``1T``/``4096`` (K/M/G/T/P as powers of 1024, like ndctl).

    An optional trailing ``B``/``iB`` is accepted (``4GiB``).  Fractions are accepted
    when they come out to whole bytes (``1.5G``).
    """
    t = text.strip().upper()
    if not t:
        raise ValueError("empty size")
    for tail in ("IB", "B"):
        if t.endswith(tail) and len(t) > len(tail) and not is_decimal(t[-len(tail) - 1]):
            t = t[: -len(tail)]
            break
        if tail == "B" and t.endswith("B") and is_decimal(t[:-1]):
            t = t[:-1]
            break
    unit = t[-1] if t[-1] in _SUFFIX and t[-1] != "" else ""
    num = t[:-1] if unit else t
    if not num or not all(is_decimal(c) or c == "." for c in num) or num.count(".") > 1 or num in (".",):
        raise ValueError(f"bad size {text!r}: expected a number with an optional K/M/G/T suffix")
    mult: int = _SUFFIX[unit]
    value: int
    if "." in num:
        whole, frac = num.split(".")
        scaled = int(whole or "0") * mult + (int(frac or "0") * mult) // (10 ** len(frac))
        if (int(frac or "0") * mult) % (10 ** len(frac)):
            raise ValueError(f"size {text!r} is not a whole number of bytes")
        value = scaled
    else:
        value = int(num) * mult
    if value > U64_MAX:
        raise ValueError(f"size {text!r} is too large")
    return value


def format_size(n: Optional[int], *, unknown: str = "-") -> str:
    """Human size with binary units, as ``cxl list -u`` prints them (``512.00 MiB``); ``unknown``
    for None (``-`` in a table cell, a word such as "size unknown" in a sentence)."""
    if n is None:
        return unknown
    if n < 0:
        return "-" + format_size(-n)
    if n >= 1 << 60:  # beyond any real device: integer maths (a float would overflow)
        return f"{n >> 50} PiB" if n % (1 << 50) == 0 else f"~{n >> 50} PiB"
    for unit, mult in (("PiB", 1 << 50), ("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= mult:
            v = n / mult
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.2f} {unit}"
    return f"{n} B"


def parse_meminfo(text: str, keys: Tuple[str, ...] = ()) -> Dict[str, int]:
    """``Node 0 MemTotal:  123 kB`` lines (or ``/proc/meminfo``'s) → {key: bytes}.

    Lines that do not parse are skipped; the caller decides whether a missing key
    deserves a warning.  ``keys``: only lines whose key ends with one of these are
    parsed (the scan reads two of a node's 40 lines); the result holds them, and
    perhaps a longer key ending like one.
    """
    out: Dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if keys and not key.rstrip().endswith(keys):
            continue
        fields = rest.split()  # none for a line without a ":"
        num = fields[0] if fields else ""
        if not (num.isascii() and num.isdigit()):  # is_decimal, inlined: a node's file has ~30 lines
            continue
        val = int(num)
        if len(fields) > 1 and fields[1].lower() == "kb":
            val *= 1024
        words = key.split()
        out[words[-1] if words else key] = val
    return out


def parse_name_list(text: str, what: str, prefix: str) -> List[str]:
    """``mem0,mem2`` → names, strictly: no empty element, each ``<prefix>N`` with ASCII N.

    The same strictness as :func:`parse_nodelist` (``1,,2`` is an error, not ``1,2``).
    """
    out: List[str] = []
    for part in text.split(","):
        p = part.strip()
        if not p:
            raise ValueError(f"empty element in {what} list {text!r}")
        if decimal_suffix(p, prefix) is None:
            raise ValueError(f"{p!r} is not a {what} name (expected {prefix}N)")
        if p not in out:
            out.append(p)
    return out


def parse_seconds(text: str) -> float:
    """A finite, non-negative number of seconds (``5``, ``0.5``) for a timeout option.

    Rejects ``-1``, ``nan``, ``inf`` and non-ASCII digits (``float`` takes all of
    them); shared by every command that waits (``region create``, ``tune apply``).
    """
    import re

    t = text.strip()
    if not re.fullmatch(r"[0-9]+(\.[0-9]*)?|\.[0-9]+", t):
        raise ValueError(f"{text!r} is not a number of seconds (0 or more, e.g. 5 or 0.5)")
    v = float(t)
    import math

    if not math.isfinite(v):  # pragma: no cover - the pattern admits only finite numbers
        raise ValueError(f"{text!r} is not a finite number of seconds")
    return v
