"""“Did you mean …”: the nearest of the valid words to a mistyped one (difflib's ratio, as git and
kubectl suggest a command), for a hint."""

from __future__ import annotations

from typing import Iterable


def did_you_mean(word: str, choices: Iterable[str], lead: str = "") -> str:
    """``did you mean: LEAD NEAREST?`` when a valid word is close to ``word``, else the valid words."""
    import difflib

    valid = sorted(set(choices))
    near = difflib.get_close_matches(word, valid, n=1, cutoff=0.6)
    if near:
        return f"did you mean: {(lead + ' ') if lead else ''}{near[0]}?"
    return "one of: " + ", ".join(valid)
