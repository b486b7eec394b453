"""``Record``: what ``typing.NamedTuple`` makes, made cheaply at import time.

The model's types are NamedTuples to mypy (``cxlctl/model.py`` imports
``typing.NamedTuple`` under ``TYPE_CHECKING``).  At run time, ``typing`` plus
its per-annotation checks cost 10-20 ms of a 40 ms ``cxlctl status --json``,
and even ``collections.namedtuple`` (with the ``functools``/``operator``
imports around it) costs 2-4 ms for the model's 17 classes.  This builds the
same thing from the class body: a ``tuple`` subclass with ``__slots__ = ()``;
fields in annotation order, defaults from the class attributes, one generic
``__new__`` taking positional or keyword arguments (no source compiled per class,
see :func:`_constructor`), fields read through ``_tuplegetter`` as a namedtuple's;
``_fields``, ``_field_defaults``, ``_make``, ``_replace``,
``_asdict``, a namedtuple-style ``repr``, pickling/copying, and the class's own
methods, properties and docstring.  tests/test_model_records.py holds it to
``collections.namedtuple``'s behaviour.
"""

from __future__ import annotations

from _operator import itemgetter as _itemgetter  # the C module: operator.py imports more

try:  # what collections.namedtuple reads its fields with (the C module, builtin: nothing to load)
    from _collections import _tuplegetter  # type: ignore[import-not-found]  # no typeshed stub
except ImportError:  # pragma: no cover - an interpreter without it, as namedtuple falls back

    def _tuplegetter(index: int, doc: str) -> Any:
        return property(_itemgetter(index), doc=doc)


TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Iterable, List, Tuple


def _accessors(n: int) -> List[Any]:
    """The accessors of fields 0 to ``n - 1`` (and maybe more), one per index shared by every
    record class (the model's ~170 fields need ~25 of them): namedtuple's own, ``_tuplegetter``
    (a C descriptor reading the tuple's item: a third cheaper than a ``property`` calling an
    ``itemgetter``, and the scan and the JSON read a few thousand fields)."""
    while len(_FIELDS) < n:
        i = len(_FIELDS)
        _FIELDS.append(_tuplegetter(i, f"Alias for field number {i}"))
    return _FIELDS


_FIELDS: List[Any] = []


def _constructor(name: str, fields: Tuple[str, ...], defaults: Tuple[Any, ...]) -> Any:
    """``__new__(cls, *args, **kwargs)`` of a record with these fields and (trailing) defaults.

    Not generated source as ``collections.namedtuple`` makes (one ``exec``, that is one
    compile, per class: half of the model's import time, bench/README.md): one generic
    function -- a class is built at every start-up of every command.  Keyword arguments
    (how the scan builds its records) are placed in C: the defaults and the arguments
    merged into one dict, read back in field order by one ``itemgetter``.  Any call that
    does not fit exactly (a missing or unknown field, a field given twice) takes
    :func:`_placed`, which says what is wrong as namedtuple's ``__new__`` does.  A class
    built more than :data:`COMPILE_AFTER` times in one process (a 1,000-memdev scan, the
    daemon's reconciles) then gets the generated one (:func:`_compiled`), once: a little
    faster still (~0.5 us against ~2 us with keywords).
    """
    n = len(fields)
    required = n - len(defaults)
    by_name = dict(zip(fields[required:], defaults))
    pick = _itemgetter(*fields) if n > 1 else lambda d: tuple(d[f] for f in fields)
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
        else:
            values = {**by_name, **kwargs}
            if k:
                values.update(zip(fields, args))
            # n keys, none given twice: the fields exactly, unless an unknown keyword took a
            # missing field's place (itemgetter's KeyError)
            if len(values) == n and (not k or kwargs.keys().isdisjoint(fields[:k])):
                try:
                    return _tuple_new(_cls, pick(values))
                except KeyError:
                    pass
        return _tuple_new(_cls, _placed(name, fields, defaults, args, kwargs))

    __new__.__qualname__ = f"{name}.__new__"
    return __new__


def _placed(
    name: str, fields: Tuple[str, ...], defaults: Tuple[Any, ...], args: Tuple[Any, ...], kwargs: Dict[str, Any]
) -> List[Any]:
    """The field values of a call :func:`_constructor`'s quick paths did not take: the arguments
    one by one, raising ``TypeError`` as namedtuple's ``__new__`` would for a wrong call."""
    n, k = len(fields), len(args)
    required = n - len(defaults)
    if k > n:
        raise TypeError(f"{name}.__new__() takes {n + 1} positional arguments but {k + 1} were given")
    values = list(args) + [_MISSING] * (n - k)
    for f, v in kwargs.items():
        if f not in fields:
            raise TypeError(f"{name}.__new__() got an unexpected keyword argument {f!r}")
        i = fields.index(f)
        if i < k:
            raise TypeError(f"{name}.__new__() got multiple values for argument {f!r}")
        values[i] = v
    for i in range(k, n):
        if values[i] is _MISSING:
            if i < required:
                raise TypeError(f"{name}.__new__() missing required argument: {fields[i]!r}")
            values[i] = defaults[i - required]
    return values


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
        values = tuple(map(kwargs.pop, self._fields, self))  # kwargs.pop(field, old value), in C
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
        fields = tuple(ns.get("__annotations__", ()))
        defaulted = ns.keys() & fields
        required = len(fields) - len(defaulted)
        if not defaulted.isdisjoint(fields[:required]):
            raise TypeError(f"{name}: a field without a default follows one with a default")
        # An annotated name in a class body is an identifier (the parser's); namedtuple also refuses
        # a leading underscore.  str.startswith through map(), in C: the model builds its classes
        # at every start-up (a bound method per field, or str.isidentifier, was ~15 % of each).
        if any(map(str.startswith, fields, ("_",) * len(fields))):
            bad = next(f for f in fields if f.startswith("_"))
            raise ValueError(f"{name}: bad field name {bad!r}")
        defaults = tuple(map(ns.__getitem__, fields[required:]))
        body: Dict[str, Any] = {
            "__slots__": (),
            "__new__": _constructor(name, fields, defaults),
            "__doc__": f"{name}({', '.join(fields)})",
            "_fields": fields,
            "_field_defaults": dict(zip(fields[required:], defaults)),
            "__match_args__": fields,
        }
        body.update(ns)  # the class's own docstring, methods, properties (its defaults: replaced next)
        body.update(zip(fields, _accessors(len(fields))))
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
