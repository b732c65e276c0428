"""The base of the API's shapes: a model whose constructors build its JSON (see the package doc)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from pydantic import BaseModel

__all__ = ["Json", "Shape"]

Json = dict[str, Any]
"""A shape's JSON value: its keys in the model's order."""


def _reader(keys: tuple[str, ...]) -> Callable[[object], Json]:
    """A function that reads an object's attributes named ``keys`` into a dict, in that order:
    what ``{k: getattr(o, k) for k in keys}`` does, at the speed of a dict display (a generated
    function, as ``dataclasses`` writes an ``__init__``): the comprehension takes four times as
    long, a tenth more on a page of 10,000 events."""
    if not all(k.isidentifier() for k in keys):
        raise ValueError(f"field names must be identifiers: {keys}")
    items = ", ".join(f"{k!r}: o.{k}" for k in keys)
    scope: dict[str, Any] = {}
    exec(f"def read(o):\n    return {{{items}}}\n", scope)
    read: Callable[[object], Json] = scope["read"]
    return read


class Shape(BaseModel):
    # (no docstring: a model's own docstring is its description in the OpenAPI document)

    _keys: ClassVar[tuple[str, ...]] = ()
    _key_set: ClassVar[frozenset[str]] = frozenset()
    _required: ClassVar[frozenset[str]] = frozenset()
    _read: ClassVar[Callable[[object], Json]] = staticmethod(_reader(()))

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls._keys = tuple(cls.model_fields)
        cls._key_set = frozenset(cls._keys)
        cls._required = frozenset(k for k, f in cls.model_fields.items() if f.is_required())
        cls._read = staticmethod(_reader(cls._keys))

    @classmethod
    def make(cls, **values: Any) -> Json:
        """The shape's JSON of ``values`` by field name, in the fields' order; a field with a
        default may be left out (it is then not sent). TypeError for a name the shape lacks
        or a required field left out."""
        keys = cls._keys  # once: a model class's attributes are slow to look up
        if len(values) == len(keys):  # the usual case: every field, none other
            try:
                return {k: values[k] for k in keys}
            except KeyError:
                pass
        unknown = values.keys() - cls._key_set
        missing = cls._required - values.keys()
        if unknown or missing:
            raise TypeError(f"{cls.__name__}: unknown {sorted(unknown)}, missing {sorted(missing)}")
        return {k: values[k] for k in keys if k in values}

    @classmethod
    def of(cls, obj: object, **given: Any) -> Json:
        """The shape's JSON of ``obj``: each field ``given`` a value, else ``obj``'s
        attribute of the field's name. TypeError for a name the shape lacks."""
        if not given:
            return cls._read(obj)
        known = cls._key_set
        if not given.keys() <= known:
            raise TypeError(f"{cls.__name__}: unknown {sorted(given.keys() - known)}")
        return {k: given[k] if k in given else getattr(obj, k) for k in cls._keys}

    @classmethod
    def of_each(cls, objs: Iterable[object]) -> list[Json]:
        """:meth:`of` each of ``objs``."""
        return list(map(cls._read, objs))
