"""Published API types, and a check of a JSON answer against them.

A type is a small tree (``Prim``, ``Lit``, ``Arr``, ``Obj``, ``Ref``, ``Union``,
``Inter``) read from a published description: TypeScript declarations shipped in
npm packages (``shapes_ts``) or a swagger 2.0 document (``from_swagger``).
``Shapes.check`` lists every way a value departs from a named type: a key the
type does not declare, a value of another JSON type, a literal outside an enum.
``Shapes.read`` resolves a dotted path (``user.login``, ``labels[].name``) in the
published type, so a test can insist that a field the client reads exists there.

Swagger 2.0 has no way to say "nullable", and the Go servers that publish it
(Gitea, Woodpecker) send ``null`` for unset pointers and slices; a ``Shapes``
built with ``optional_nullable=True`` accepts ``null`` for an optional field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

JSON_KIND = {str: "string", bool: "boolean", int: "number", float: "number"}


@dataclass(frozen=True)
class Prim:
    """``string``, ``number``, ``integer``, ``boolean``, ``null`` or ``any``."""

    name: str


@dataclass(frozen=True)
class Lit:
    value: object


@dataclass(frozen=True)
class Arr:
    item: Type


@dataclass(frozen=True)
class Member:
    type: Type
    optional: bool


@dataclass(frozen=True)
class Obj:
    """An object type; ``open`` when it has an index signature (any key allowed)."""

    members: Mapping[str, Member] = field(default_factory=dict)
    open: bool = False
    values: Type | None = None  # the index signature's value type, if any


@dataclass(frozen=True)
class Ref:
    name: str
    args: tuple[Type, ...] = ()


@dataclass(frozen=True)
class Union:
    options: tuple[Type, ...]


@dataclass(frozen=True)
class Inter:
    parts: tuple[Type, ...]


Type = Prim | Lit | Arr | Obj | Ref | Union | Inter
ANY = Prim("any")


@dataclass(frozen=True)
class Decl:
    """A named declaration: its type parameters, body, and the parameters' defaults."""

    params: tuple[str, ...]
    body: Type
    defaults: tuple[Type | None, ...] = ()


class Shapes:
    """Named published types and the checks made against them."""

    def __init__(self, decls: Mapping[str, Decl], *, optional_nullable: bool = False) -> None:
        self.decls = dict(decls)
        self.optional_nullable = optional_nullable

    def merged(self, other: Shapes) -> Shapes:
        """Both sets of declarations; ``other`` wins on a clash."""
        return Shapes({**self.decls, **other.decls}, optional_nullable=self.optional_nullable)

    def resolve(self, t: Type, depth: int = 0) -> Type:
        """``t`` with references and utility types expanded one level at a time."""
        if depth > 40:
            raise ValueError(f"type {t} does not resolve (cycle?)")
        if isinstance(t, Ref):
            return self.resolve(self._expand(t), depth + 1)
        if isinstance(t, Inter):
            return self._intersect(tuple(self.resolve(p, depth + 1) for p in t.parts))
        return t

    def _expand(self, ref: Ref) -> Type:
        utility = self._utility(ref)
        if utility is not None:
            return utility
        if ref.name in self.decls:  # swagger names have dots: ``errors.PipelineError``
            head, member = ref.name, ""
        else:
            head, _, member = ref.name.partition(".")
        if head not in self.decls:
            raise KeyError(f"published description has no type {ref.name!r}")
        decl = self.decls[head]
        if member:  # an enum member (``AccessLevel.ADMIN``) reads as its whole enum
            return decl.body
        env: dict[str, Type] = {}
        for i, param in enumerate(decl.params):
            given = ref.args[i] if i < len(ref.args) else None
            default = decl.defaults[i] if i < len(decl.defaults) else None
            env[param] = given or default or ANY
        return _substitute(decl.body, env) if env else decl.body

    def _utility(self, ref: Ref) -> Type | None:
        name, args = ref.name, ref.args
        if name == "Record":
            return Obj(open=True, values=args[1] if len(args) > 1 else ANY)
        if name == "Array":
            return Arr(args[0])
        if name == "Exclude":
            return args[0]
        if name == "Partial":
            obj = self.resolve(args[0])
            if not isinstance(obj, Obj):
                return obj
            members = {k: Member(m.type, True) for k, m in obj.members.items()}
            return Obj(members, obj.open, obj.values)
        if name in ("Omit", "MappedOmit"):
            obj = self.resolve(args[0])
            dropped = {lit.value for lit in _literals(args[1])}
            assert isinstance(obj, Obj), f"{name} of a non-object"
            members = {k: m for k, m in obj.members.items() if k not in dropped}
            return Obj(members, obj.open, obj.values)
        return None

    def _intersect(self, parts: tuple[Type, ...]) -> Type:
        """Objects merge; a primitive with a brand object (``string & {_?: never}``) is it."""
        prims = [p for p in parts if not isinstance(p, Obj)]
        if prims:
            return prims[0] if len(prims) == 1 else Inter(tuple(prims))
        members: dict[str, Member] = {}
        for part in parts:
            assert isinstance(part, Obj)
            members.update(part.members)
        return Obj(members, any(isinstance(p, Obj) and p.open for p in parts))

    def check(self, value: Any, t: Type | str, where: str = "$") -> list[str]:
        """Every departure of ``value`` from ``t`` (a type or a declared name)."""
        resolved = self.resolve(Ref(t) if isinstance(t, str) else t)
        if isinstance(resolved, Prim):
            return _check_prim(value, resolved.name, where)
        if isinstance(resolved, Lit):
            ok = value == resolved.value and type(value) is type(resolved.value)
            return [] if ok else [f"{where}: {value!r} is not {resolved.value!r}"]
        if isinstance(resolved, Arr):
            if not isinstance(value, list):
                return [f"{where}: {_kind(value)} where the description has an array"]
            return [
                p
                for i, item in enumerate(value)
                for p in self.check(item, resolved.item, f"{where}[{i}]")
            ]
        if isinstance(resolved, Union):
            return self._check_union(value, resolved, where)
        if isinstance(resolved, Obj):
            return self._check_obj(value, resolved, where)
        assert isinstance(resolved, Inter), resolved  # resolve() expands every Ref
        return [p for part in resolved.parts for p in self.check(value, part, where)]

    def _check_union(self, value: Any, t: Union, where: str) -> list[str]:
        best: list[str] | None = None
        options = [o for o in t.options if value is None or o != Prim("null")]
        for option in options:
            problems = self.check(value, option, where)
            if not problems:
                return []
            if best is None or len(problems) < len(best):
                best = problems
        if all(isinstance(o, Lit) for o in options):
            allowed = ", ".join(repr(o.value) for o in options if isinstance(o, Lit))
            return [f"{where}: {value!r} is not one of {allowed}"]
        return best or [f"{where}: matches no option"]

    def _check_obj(self, value: Any, t: Obj, where: str) -> list[str]:
        if not isinstance(value, dict):
            return [f"{where}: {_kind(value)} where the description has an object"]
        problems = []
        for key, item in value.items():
            member = t.members.get(key)
            if member is None:
                if not t.open:
                    problems.append(f"{where}.{key}: not in the published description")
                elif t.values is not None:
                    problems += self.check(item, t.values, f"{where}.{key}")
                continue
            if item is None and member.optional and self.optional_nullable:
                continue
            problems += self.check(item, member.type, f"{where}.{key}")
        return problems

    def read(self, t: Type | str, path: str) -> Type:
        """The published type at ``path`` (``a.b``, ``labels[].name``); KeyError if absent."""
        current = self.resolve(Ref(t) if isinstance(t, str) else t)
        for step in path.split("."):
            name, many = step.removesuffix("[]"), step.endswith("[]")
            current = self._member(current, name, path)
            if many:
                current = self._element(current, path)
        return current

    def _member(self, t: Type, name: str, path: str) -> Type:
        for option in self._options(t):
            if isinstance(option, Obj) and name in option.members:
                return self.resolve(option.members[name].type)
        raise KeyError(f"{path}: the published description has no field {name!r}")

    def _element(self, t: Type, path: str) -> Type:
        items = [self.resolve(o.item) for o in self._options(t) if isinstance(o, Arr)]
        if not items:
            raise KeyError(f"{path}: the published description has no array here")
        return items[-1] if len(items) == 1 else Union(tuple(items))

    def _options(self, t: Type) -> list[Type]:
        resolved = self.resolve(t)
        if isinstance(resolved, Union):
            return [x for o in resolved.options for x in self._options(o)]
        return [resolved]


def conformance(shapes: Shapes, answer: Any, type_name: str, reads: Iterable[str]) -> list[str]:
    """What keeps ``answer`` (an object, or a list of them) from being a published ``type_name``.

    Every key the answer has must be declared with the value's JSON type; every
    path in ``reads`` (what the client reads) must be declared and be present in
    the answer at least once (``null`` along the way counts as absent, not missing).
    """
    items = answer if isinstance(answer, list) else [answer]
    problems = [p for i, item in enumerate(items) for p in shapes.check(item, type_name, f"[{i}]")]
    for path in reads:
        try:
            shapes.read(type_name, path)
        except KeyError as exc:
            problems.append(f"{type_name}.{path}: {exc.args[0]}")
        found: list[Any] = []
        for i, item in enumerate(items):
            try:
                found += _walk(item, path.split("."))
            except KeyError:
                problems.append(f"[{i}].{path}: missing from the answer")
        if not found and items:
            problems.append(f"{path}: present in no item of the answer")
    return problems


def _walk(value: Any, steps: list[str]) -> list[Any]:
    """The values at ``steps`` (``[]`` spreads an array); KeyError when a key is absent."""
    if not steps:
        return [value]
    if value is None:
        return []
    name, many = steps[0].removesuffix("[]"), steps[0].endswith("[]")
    if not isinstance(value, dict) or name not in value:
        raise KeyError(name)
    inner = value[name]
    if not many:
        return _walk(inner, steps[1:])
    return [v for item in inner or [] for v in _walk(item, steps[1:])]


def _check_prim(value: Any, name: str, where: str) -> list[str]:
    if name == "any":
        return []
    kind = _kind(value)
    if name == "integer":
        ok = kind == "number" and isinstance(value, int)
    else:
        ok = kind == name
    return [] if ok else [f"{where}: {kind} where the description has {name}"]


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return JSON_KIND.get(type(value), type(value).__name__)


def _literals(t: Type) -> list[Lit]:
    if isinstance(t, Lit):
        return [t]
    if isinstance(t, Union):
        return [lit for o in t.options for lit in _literals(o)]
    return []


def _substitute(t: Type, env: Mapping[str, Type]) -> Type:
    """``t`` with type parameters replaced (``Compare<T>`` -> ``Compare<Label[]>``)."""
    if isinstance(t, Ref):
        if not t.args and t.name in env:
            return env[t.name]
        return Ref(t.name, tuple(_substitute(a, env) for a in t.args))
    if isinstance(t, Arr):
        return Arr(_substitute(t.item, env))
    if isinstance(t, Union):
        return Union(tuple(_substitute(o, env) for o in t.options))
    if isinstance(t, Inter):
        return Inter(tuple(_substitute(p, env) for p in t.parts))
    if isinstance(t, Obj):
        members = {k: Member(_substitute(m.type, env), m.optional) for k, m in t.members.items()}
        values = _substitute(t.values, env) if t.values is not None else None
        return Obj(members, t.open, values)
    return t


def from_swagger(document: Mapping[str, Any]) -> Shapes:
    """The ``definitions`` of a swagger 2.0 document (``null`` allowed where optional)."""
    definitions = document.get("definitions", {})
    decls = {name: Decl((), _swagger_type(schema)) for name, schema in definitions.items()}
    return Shapes(decls, optional_nullable=True)


def _swagger_type(schema: Mapping[str, Any]) -> Type:
    if "$ref" in schema:
        return Ref(str(schema["$ref"]).rsplit("/", 1)[-1])
    if "allOf" in schema:
        return Inter(tuple(_swagger_type(s) for s in schema["allOf"]))
    if "enum" in schema:
        return Union(tuple(Lit(v) for v in schema["enum"]))
    kind = schema.get("type")
    if kind == "array":
        return Arr(_swagger_type(schema.get("items", {})))
    if kind == "object" or "properties" in schema:
        required = set(schema.get("required", []))
        members = {
            name: Member(_swagger_type(sub), name not in required)
            for name, sub in schema.get("properties", {}).items()
        }
        extra = schema.get("additionalProperties")
        values = _swagger_type(extra) if isinstance(extra, dict) else None
        return Obj(members, open=values is not None or not members, values=values)
    if kind in ("string", "boolean", "integer"):
        return Prim(kind)
    if kind == "number":
        return Prim("number")
    return ANY
