"""``cxlctl.namedrecord.Record`` (the model's run-time NamedTuple) behaves as ``collections.namedtuple``."""

from __future__ import annotations

import copy
import pickle
from collections import namedtuple
from typing import Any, Optional

import pytest

from cxlctl import model
from cxlctl.model import Coordinates, Memdev, Warning_
from cxlctl.namedrecord import Record


def test_a_record_is_the_namedtuple_of_its_body() -> None:
    make: Any = namedtuple  # untyped: mypy would make "Warning_" a second, unrelated type
    ref = make("Warning_", ["code", "severity", "message", "subject"], defaults=[None])
    w = Warning_("c", "warning", "m")
    r = ref("c", "warning", "m")
    assert isinstance(w, tuple) and tuple(w) == tuple(r)
    assert w._fields == r._fields and w._field_defaults == r._field_defaults == {"subject": None}
    assert repr(w) == repr(r)
    assert w._asdict() == r._asdict()
    assert w._replace(subject="s") == r._replace(subject="s")
    assert Warning_._make(["a", "b", "c", "d"]) == ref._make(["a", "b", "c", "d"])
    assert Warning_(code="c", severity="warning", message="m") == w  # keyword construction
    assert Warning_.__match_args__ == ("code", "severity", "message", "subject")
    assert Warning_.__doc__ and "stable for scripts" in Warning_.__doc__  # the class's own docstring


def test_records_refuse_what_namedtuples_refuse() -> None:
    w = Warning_("c", "warning", "m")
    with pytest.raises(AttributeError):
        w.code = "x"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        w.extra = 1  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        Warning_("c")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        w._replace(nope=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Warning_._make(["only one"])


def test_records_pickle_copy_and_keep_methods() -> None:
    c = Coordinates(read_bandwidth=1)
    assert pickle.loads(pickle.dumps(c)) == c and type(pickle.loads(pickle.dumps(c))) is Coordinates
    assert copy.deepcopy(c) == c and copy.copy(c) is not None
    args: Any = [()] * 11 + [model.WeightedInterleave(False, {}, None), None, None, (), ()]
    inv = model.Inventory(*args)
    assert inv.has_cxl is False and inv.memdev("mem0") is None  # a property and a method of the body


def test_field_order_and_defaults_come_from_the_annotations() -> None:
    assert Memdev._fields[:3] == ("name", "ram_size", "pmem_size")
    assert Memdev._field_defaults == {"dpa_allocated": 0, "regions": ()}
    with pytest.raises(TypeError):

        class Bad(Record):  # a default before a field without one
            a: Optional[int] = None
            b: int


def test_a_class_built_often_gets_the_generated_constructor_and_builds_the_same() -> None:
    """The generic ``__new__`` (no compile at import) hands over to namedtuple's generated one after
    ``COMPILE_AFTER`` constructions of a class: the same records either way, the same refusals."""
    from cxlctl import namedrecord
    from cxlctl.namedrecord import NamedTuple

    class Often(NamedTuple):
        a: int
        b: str = "x"

    def some() -> Any:
        return [Often(1), Often(1, "y"), Often(a=2), Often(b="z", a=3)]

    first = some()
    generic = Often.__new__
    for _ in range(namedrecord.COMPILE_AFTER):
        Often(0)
    assert Often.__new__ is not generic
    assert some() == first == [(1, "x"), (1, "y"), (2, "x"), (3, "z")]
    bad: Any = Often
    with pytest.raises(TypeError):
        bad()
    with pytest.raises(TypeError):
        bad(1, c=2)
