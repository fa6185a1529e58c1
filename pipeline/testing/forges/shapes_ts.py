"""Read the type declarations of a TypeScript ``.d.ts`` file into ``shapes`` types.

Enough of TypeScript for generated API typings (``gitea-js``, ``@gitbeaker/core``,
``gitlab-event-types``): ``interface`` (with ``extends`` and type parameters),
``type`` aliases, ``enum``; member types built from primitives, literals,
arrays, unions, intersections, object literals and generic references. What it
cannot read (classes, functions, conditional or mapped types) it skips, or reads
as ``any`` inside an alias; a declaration the checks use that reads as ``any``
would make them vacuous, so ``Shapes.read`` of a field the client needs still
fails when the declaration is missing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pipeline.testing.forges.shapes import (
    ANY,
    Arr,
    Decl,
    Inter,
    Lit,
    Member,
    Obj,
    Prim,
    Ref,
    Shapes,
    Type,
    Union,
)

TOKEN = re.compile(
    r"""\s+|//[^\n]*|/\*.*?\*/
    |(?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
    |(?P<num>-?\d+(?:\.\d+)?)
    |(?P<word>[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*)
    |(?P<op>=>|\.\.\.|[{}\[\]<>()|&;:?,=.*+-/!@#%^~`])""",
    re.VERBOSE | re.DOTALL,
)
PRIMS = {"string", "number", "boolean", "null", "undefined", "never", "bigint"}
LOOSE = {"any", "unknown", "object", "void", "Date", "Function", "symbol"}
CLOSERS = {"{": "}", "[": "]", "(": ")", "<": ">"}


class TsSyntaxError(ValueError):
    """The declaration file uses syntax this reader does not follow."""


def tokenize(text: str) -> list[str]:
    tokens = []
    for match in TOKEN.finditer(text):
        if match.lastgroup is not None:
            tokens.append(match.group())
    return tokens


def read_declarations(texts: Iterable[str], *, optional_nullable: bool = False) -> Shapes:
    """Every ``interface``, ``type`` and ``enum`` declared in ``texts``."""
    decls: dict[str, Decl] = {}
    for text in texts:
        decls.update(_Parser(tokenize(text)).declarations())
    return Shapes(decls, optional_nullable=optional_nullable)


class _Parser:
    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.pos = 0

    def peek(self, ahead: int = 0) -> str:
        index = self.pos + ahead
        return self.tokens[index] if index < len(self.tokens) else ""

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if expected is not None and token != expected:
            context = " ".join(self.tokens[max(0, self.pos - 5) : self.pos + 5])
            raise TsSyntaxError(f"expected {expected!r}, got {token!r} near: {context}")
        self.pos += 1
        return token

    def skip_balanced(self) -> None:
        opener = self.take()
        closer, depth = CLOSERS[opener], 1
        while depth and self.pos < len(self.tokens):
            token = self.take()
            if token == opener:
                depth += 1
            elif token == closer:
                depth -= 1

    def declarations(self) -> dict[str, Decl]:
        decls: dict[str, Decl] = {}
        while self.pos < len(self.tokens):
            token = self.peek()
            if token == "interface":
                name, decl = self.interface()
                decls[name] = decl
            elif token == "enum":
                name, decl = self.enum()
                decls[name] = decl
            elif token == "type" and re.match(r"[A-Za-z_$]", self.peek(1)) and self.peek(2) in "=<":
                name, decl = self.alias()
                decls[name] = decl
            elif token in CLOSERS:
                self.skip_balanced()
            else:
                self.take()
        return decls

    def params(self) -> tuple[tuple[str, ...], tuple[Type | None, ...]]:
        """Type parameter names and their defaults (``<T extends U, U = string>``)."""
        names: list[str] = []
        defaults: list[Type | None] = []
        if self.peek() != "<":
            return (), ()
        self.take("<")
        while self.peek() != ">":
            names.append(self.take())
            self.skip_until(",", ">", "=")  # an ``extends X`` constraint
            default: Type | None = None
            if self.peek() == "=":
                self.take("=")
                try:
                    default = self.union()
                except TsSyntaxError:
                    self.skip_until(",", ">")
                    default = ANY
            defaults.append(default)
            if self.peek() == ",":
                self.take(",")
        self.take(">")
        return tuple(names), tuple(defaults)

    def skip_until(self, *stops: str) -> None:
        while self.peek() not in (*stops, ""):
            if self.peek() in CLOSERS:
                self.skip_balanced()
            else:
                self.take()

    def interface(self) -> tuple[str, Decl]:
        self.take("interface")
        name, (params, defaults) = self.take(), self.params()
        bases: list[Type] = []
        if self.peek() == "extends":
            self.take()
            bases.append(self.postfix())
            while self.peek() == ",":
                self.take()
                bases.append(self.postfix())
        body = self.object_literal()
        # ``extends Record<string, unknown>`` adds no declared field; it is left out
        # so a key the interface does not name still counts as undeclared.
        kept = [b for b in bases if not (isinstance(b, Ref) and b.name == "Record")]
        return name, Decl(params, Inter((*kept, body)) if kept else body, defaults)

    def enum(self) -> tuple[str, Decl]:
        self.take("enum")
        name = self.take()
        self.take("{")
        values: list[Type] = []
        counter = 0
        while self.peek() != "}":
            self.take()  # member name
            if self.peek() == "=":
                self.take("=")
                raw = self.take()
                value: object = raw[1:-1] if raw[0] in "'\"" else int(raw)
                counter = value + 1 if isinstance(value, int) else counter
            else:
                value, counter = counter, counter + 1
            values.append(Lit(value))
            if self.peek() == ",":
                self.take(",")
        self.take("}")
        return name, Decl((), Union(tuple(values)))

    def alias(self) -> tuple[str, Decl]:
        self.take("type")
        name, (params, defaults) = self.take(), self.params()
        self.take("=")
        start = self.pos
        try:
            body = self.union()
            if self.peek() not in (";", ""):
                raise TsSyntaxError(f"type {name}: unexpected {self.peek()!r}")
        except TsSyntaxError:
            self.pos = start
            self.skip_to_semicolon()
            body = ANY
        if self.peek() == ";":
            self.take(";")
        return name, Decl(params, body, defaults)

    def skip_to_semicolon(self) -> None:
        while self.pos < len(self.tokens) and self.peek() != ";":
            if self.peek() in CLOSERS and self.peek() != "<":
                self.skip_balanced()
            else:
                self.take()

    def union(self) -> Type:
        if self.peek() == "|":
            self.take("|")
        options = [self.intersection()]
        while self.peek() == "|":
            self.take("|")
            options.append(self.intersection())
        return options[0] if len(options) == 1 else Union(tuple(options))

    def intersection(self) -> Type:
        parts = [self.postfix()]
        while self.peek() == "&":
            self.take("&")
            parts.append(self.postfix())
        if self.peek() in ("extends", "?", "=>"):
            raise TsSyntaxError("conditional or function type")
        return parts[0] if len(parts) == 1 else Inter(tuple(parts))

    def postfix(self) -> Type:
        t = self.primary()
        while self.peek() == "[":
            if self.peek(1) != "]":
                raise TsSyntaxError("indexed access type")
            self.take("[")
            self.take("]")
            t = Arr(t)
        return t

    def primary(self) -> Type:
        token = self.peek()
        if token == "(":
            self.take("(")
            inner = self.union()
            self.take(")")
            return inner
        if token == "{":
            return self.object_literal()
        if token[:1] in "'\"":
            return Lit(self.take()[1:-1])
        if re.fullmatch(r"-?\d+(\.\d+)?", token):
            raw = self.take()
            return Lit(float(raw) if "." in raw else int(raw))
        if token in ("true", "false"):
            return Lit(self.take() == "true")
        if token in ("keyof", "typeof", "infer", "readonly", "[") or not token:
            raise TsSyntaxError(f"unsupported type syntax {token!r}")
        return self.reference()

    def reference(self) -> Type:
        name = self.take()
        if name in PRIMS:
            return Prim(name)
        if name in LOOSE:
            return ANY
        args: list[Type] = []
        if self.peek() == "<":
            self.take("<")
            args.append(self.union())
            while self.peek() == ",":
                self.take(",")
                args.append(self.union())
            self.take(">")
        return Ref(name, tuple(args))

    def object_literal(self) -> Obj:
        self.take("{")
        members: dict[str, Member] = {}
        open_, values = False, None
        while self.peek() != "}":
            if self.peek() == "[":
                open_, values = True, self.index_signature()
            elif self.peek(1) in ("(", "<"):
                self.skip_member()  # a method signature
            else:
                name, member = self.member_or_any()
                members[name] = member
            while self.peek() in (";", ","):
                self.take()
        self.take("}")
        return Obj(members, open_, values)

    def member_or_any(self) -> tuple[str, Member]:
        """A member; one whose type this reader cannot follow reads as ``any``."""
        start = self.pos
        try:
            return self.member()
        except TsSyntaxError:
            self.pos = start
            name = self.take().strip("'\"")
            self.skip_member()
            return name, Member(ANY, True)

    def member(self) -> tuple[str, Member]:
        if self.peek() == "readonly" and self.peek(1) not in (":", "?"):
            self.take()
        raw = self.take()
        name = raw[1:-1] if raw[:1] in "'\"" else raw
        optional = self.peek() == "?"
        if optional:
            self.take("?")
        self.take(":")
        return name, Member(self.union(), optional)

    def index_signature(self) -> Type | None:
        self.skip_balanced()  # ``[key: string]`` or ``[K in keyof T]``
        if self.peek() == "?":
            self.take("?")
        self.take(":")
        try:
            return self.union()
        except TsSyntaxError:
            self.skip_member()
            return None

    def skip_member(self) -> None:
        while self.peek() not in (";", "}", ""):
            if self.peek() in ("{", "(", "["):
                self.skip_balanced()
            else:
                self.take()


def literal_names(t: Type) -> list[object]:
    """The values of a union of literals (an enum, a string union)."""
    if isinstance(t, Lit):
        return [t.value]
    if isinstance(t, Union):
        return [v for o in t.options for v in literal_names(o)]
    return []


__all__ = ["TsSyntaxError", "literal_names", "read_declarations", "tokenize"]
