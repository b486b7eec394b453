"""``Record``: what ``typing.NamedTuple`` makes, made cheaply at import time.

The model's types are NamedTuples to mypy (``cxlctl/model.py`` imports
``typing.NamedTuple`` under ``TYPE_CHECKING``).  At run time, ``typing`` plus
its per-annotation checks cost 10-20 ms of a 40 ms ``cxlctl status --json``,
and even ``collections.namedtuple`` (with the ``functools``/``operator``
imports around it) costs 2-4 ms for the model's 17 classes.  This builds the
same thing from the class body: a ``tuple`` subclass with ``__slots__ = ()``;
fields in annotation order, defaults from the class attributes, one generic
``__new__`` taking positional or keyword arguments (no source compiled per class,
see :func:`_constructor`), fields read through ``itemgetter`` as a namedtuple's;
``_fields``, ``_field_defaults``, ``_make``, ``_replace``,
``_asdict``, a namedtuple-style ``repr``, pickling/copying, and the class's own
methods, properties and docstring.  tests/test_model_records.py holds it to
``collections.namedtuple``'s behaviour.
"""

from __future__ import annotations

from _operator import itemgetter as _itemgetter  # the C module: operator.py imports more

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Iterable, List, Tuple


def _field(i: int) -> property:
    """The accessor of field ``i``: ``itemgetter`` (read in C, as namedtuple's are), one shared by
    every record class (the model's ~170 fields need ~25 of them)."""
    while len(_FIELDS) <= i:
        _FIELDS.append(property(_itemgetter(len(_FIELDS))))
    return _FIELDS[i]


_FIELDS: List[property] = []


def _constructor(name: str, fields: Tuple[str, ...], defaults: Tuple[Any, ...]) -> Any:
    """``__new__(cls, *args, **kwargs)`` of a record with these fields and (trailing) defaults.

    Not generated source as ``collections.namedtuple`` makes (one ``exec``, that is one
    compile, per class: half of the model's import time, bench/README.md): one generic
    function, a little slower to call with keywords (~2 us against ~0.8 us) -- a
    ``status`` builds ~90 records, and a class is built at every start-up of every
    command.  A class built more than :data:`COMPILE_AFTER` times in one process (a
    1,000-memdev scan, the daemon's reconciles) then gets the generated one
    (:func:`_compiled`), once.
    """
    n = len(fields)
    required = n - len(defaults)
    index = {f: i for i, f in enumerate(fields)}
    calls = [0]

    def __new__(_cls: Any, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == COMPILE_AFTER and vars(_cls).get("__new__") is not None:
            _cls.__new__ = staticmethod(_compiled(name, fields, defaults))  # the calls after this one
        k = len(args)
        if not kwargs:
            if k == n:
                return _tuple_new(_cls, args)
            if required <= k < n:
                return _tuple_new(_cls, args + defaults[k - required :])
        if k > n:
            raise TypeError(f"{name}.__new__() takes {n + 1} positional arguments but {k + 1} were given")
        values = list(args) + [_MISSING] * (n - k)
        for f, v in kwargs.items():
            i = index.get(f)
            if i is None:
                raise TypeError(f"{name}.__new__() got an unexpected keyword argument {f!r}")
            if i < k:
                raise TypeError(f"{name}.__new__() got multiple values for argument {f!r}")
            values[i] = v
        for i in range(k, n):
            if values[i] is _MISSING:
                if i < required:
                    raise TypeError(f"{name}.__new__() missing required argument: {fields[i]!r}")
                values[i] = defaults[i - required]
        return _tuple_new(_cls, values)

    __new__.__qualname__ = f"{name}.__new__"
    return __new__


def _compiled(name: str, fields: Tuple[str, ...], defaults: Tuple[Any, ...]) -> Any:
    """``__new__`` as ``collections.namedtuple`` generates it: construction at C-call speed."""
    params = ", ".join(fields)
    code = f"def __new__(_cls, {params}):\n    return _tuple_new(_cls, ({params}{',' if len(fields) == 1 else ''}))\n"
    scope: Dict[str, Any] = {"_tuple_new": tuple.__new__}
    exec(code, scope)
    new = scope["__new__"]
    new.__defaults__ = defaults or None
    new.__qualname__ = f"{name}.__new__"
    return new


#: constructions of one record class after which it gets the generated ``__new__``
COMPILE_AFTER = 64
_MISSING = object()
_tuple_new = tuple.__new__


class _Base(tuple):  # type: ignore[type-arg]
    __slots__ = ()
    _fields: Tuple[str, ...] = ()
    _field_defaults: Dict[str, Any] = {}

    @classmethod
    def _make(cls, iterable: Iterable[Any]) -> Any:
        values = tuple(iterable)
        if len(values) != len(cls._fields):
            raise TypeError(f"Expected {len(cls._fields)} arguments, got {len(values)}")
        return tuple.__new__(cls, values)

    def _replace(self, **kwargs: Any) -> Any:
        values = [kwargs.pop(f, v) for f, v in zip(self._fields, self)]
        if kwargs:
            raise TypeError(f"Got unexpected field names: {list(kwargs)!r}")
        return tuple.__new__(type(self), values)

    def _asdict(self) -> Dict[str, Any]:
        return dict(zip(self._fields, self))

    def __repr__(self) -> str:
        inner = ", ".join(f"{f}={v!r}" for f, v in zip(self._fields, self))
        return f"{type(self).__name__}({inner})"

    def __getnewargs__(self) -> Tuple[Any, ...]:
        return tuple(self)


class _RecordMeta(type):
    """``class X(Record): a: int; b: str = ""`` -> a namedtuple-like ``X``."""

    def __new__(mcls, name: str, bases: Tuple[type, ...], ns: Dict[str, Any]) -> Any:  # noqa: N804
        if not bases:  # Record itself
            return super().__new__(mcls, name, bases, ns)
        annotations = ns.get("__annotations__", {})
        fields = tuple(annotations)
        defaults = tuple(ns[f] for f in fields if f in ns)
        if any(f in ns for f in fields[: len(fields) - len(defaults)]):
            raise TypeError(f"{name}: a field without a default follows one with a default")
        for f in fields:
            if not f.isidentifier() or f.startswith("_"):
                raise ValueError(f"{name}: bad field name {f!r}")
        params = ", ".join(fields)
        new = _constructor(name, fields, defaults)
        body: Dict[str, Any] = {
            "__slots__": (),
            "__new__": new,
            "__doc__": f"{name}({params})",
            "_fields": fields,
            "_field_defaults": dict(zip(fields[len(fields) - len(defaults) :], defaults)),
            "__match_args__": fields,
        }
        body.update({f: _field(i) for i, f in enumerate(fields)})
        body.update((k, v) for k, v in ns.items() if k not in fields)
        return type(name, (_Base,), body)


class Record(metaclass=_RecordMeta):
    """Base of the model's classes at run time (mypy sees ``typing.NamedTuple``)."""


# ``class X(NamedTuple)`` with ``from cxlctl.namedrecord import NamedTuple``: mypy sees typing's
# NamedTuple, the interpreter this module's Record.  typing.NamedTuple costs about 0.3 ms per class at
# import (its annotation checks and namedtuple's exec): a third of `cxlctl doctor --json`, which loads
# 70 such classes (bench/README.md).
if TYPE_CHECKING:
    from typing import NamedTuple as NamedTuple
else:
    NamedTuple = Record
