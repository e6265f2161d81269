"""Wire primitives shared by the generated codecs.

Kafka's fixed-width integers are big-endian (``int8/16/32/64``, ``uint16``, ``float64``, ``uuid`` as 16
raw bytes). Classic strings carry an ``int16`` length, classic bytes/records/arrays an ``int32`` count;
``-1`` means null. Flexible versions (KIP-482) use *unsigned* varints instead: compact strings, bytes
and arrays are prefixed with ``N + 1`` (``0`` = null), and each struct ends with a tagged-field section
``uvarint count, {uvarint tag, uvarint size, size bytes}*``. These protocol varints are unsigned
LEB128, unlike the zigzag varints inside record batches.

This module knows each wire type twice: as run-time helpers (varints, scalar arrays) and as the
source snippets that :mod:`strom.protocol.codec` splices into its generated functions
(:class:`SourceBuilder` plus ``dec_*``/``enc_*``). Snippets read at ``pos`` in ``buf`` (a byte
memoryview) or append to a bytearray; consecutive fixed-width items are collected in a *pending*
run and flushed as one precompiled :class:`struct.Struct` call, and a classic length prefix joins
the run of the fixed fields before it. Decode helpers and snippets raise ``ValueError`` (or
``IndexError``/``struct.error`` on truncation); the codec turns those into ``CorruptFrame``.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from strom.protocol.spec import FieldSpec

__all__ = [
    "LENGTH_PREFIX",
    "MISSING",
    "SMALL_ARRAY",
    "UVARINT_SMALL",
    "RecordsRegion",
    "SourceBuilder",
    "array_packers",
    "array_unpackers",
    "dec_blob",
    "dec_flush",
    "dec_length",
    "dec_null_check",
    "dec_uvarint",
    "differs_from_defaults",
    "enc_blob",
    "enc_flush",
    "enc_length",
    "enc_uvarint",
    "pack_array",
    "read_uvarint",
    "unpack_array",
    "uvarint",
]


class RecordsRegion:
    """A ``records`` value the encoder frames but does not hold: only its size is known here.

    The encoder writes its length prefix and records where it goes in ``out.regions`` (see
    ``codec.encode_response_chunks``), and the I/O driver sends the bytes itself (storage's
    ``FileRecords``: file ranges sent with ``sendfile``). Subclasses define ``__len__``.
    """

    __slots__ = ()

    def __len__(self) -> int:
        raise NotImplementedError


# One-byte encodings of 0..127, the common case for compact lengths and tag counts.
UVARINT_SMALL: tuple[bytes, ...] = tuple(bytes((i,)) for i in range(128))

# A uvarint for an int32-sized quantity takes at most 5 bytes (Kafka's ByteUtils.readUnsignedVarint).
_UVARINT_MAX_SHIFT = 28


def uvarint(value: int) -> bytes:
    """Encode a non-negative int as an unsigned varint."""
    if value < 0x80:
        if value < 0:
            raise ValueError(f"uvarint of negative {value}")
        return UVARINT_SMALL[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    """Decode an unsigned varint at ``pos``; return ``(value, new_pos)``."""
    result = 0
    shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > _UVARINT_MAX_SHIFT:
            raise ValueError("uvarint longer than 5 bytes")


# Scalar arrays shorter than this (replica lists, partition ids) use a precompiled Struct per length.
SMALL_ARRAY = 16


@functools.lru_cache(maxsize=512)
def _array_struct(code: str, count: int) -> struct.Struct:
    return struct.Struct(f">{count}{code}")


@functools.cache
def array_packers(code: str) -> tuple[Callable[..., bytes], ...]:
    """``array_packers("i")[n](*values)`` packs ``n`` int32s, for ``n < SMALL_ARRAY``."""
    return tuple(_array_struct(code, n).pack for n in range(SMALL_ARRAY))


@functools.cache
def array_unpackers(code: str) -> tuple[Callable[[memoryview, int], tuple[Any, ...]], ...]:
    """``array_unpackers("i")[n](buf, pos)`` reads ``n`` int32s, for ``n < SMALL_ARRAY``."""
    return tuple(_array_struct(code, n).unpack_from for n in range(SMALL_ARRAY))


def pack_array(code: str, values: Sequence[Any]) -> bytes:
    """Pack a list of fixed-width scalars (no count prefix) in one call."""
    count = len(values)
    if count < 64:
        return _array_struct(code, count).pack(*values)
    return struct.pack(f">{count}{code}", *values)


def unpack_array(code: str, size: int, count: int, buf: memoryview, pos: int) -> list[Any]:
    """Unpack ``count`` fixed-width scalars of ``size`` bytes at ``pos`` (bounds already checked)."""
    if count > (len(buf) - pos) // size:
        raise ValueError("array longer than the frame")
    unpack: Callable[[memoryview, int], tuple[Any, ...]] = (
        _array_struct(code, count).unpack_from if count < 64 else struct.Struct(f">{count}{code}").unpack_from
    )
    return list(unpack(buf, pos))


def differs_from_defaults(value: Mapping[str, object], defaults: tuple[tuple[str, object], ...]) -> bool:
    """Whether a struct dict holds any non-default field (missing keys count as default).

    Empty arrays match a ``[]`` default whatever their sequence type.
    """
    for key, default in defaults:
        item = value.get(key, default)
        if item != default and not (isinstance(default, list) and not default and not item):
            return True
    return False


# -- source snippets for the generated codecs ------------------------------------------------


class SourceBuilder:
    """Accumulates the source lines and the namespace (constants, Structs) of one function."""

    def __init__(self, version: int, flexible: bool) -> None:
        self.version = version
        self.flexible = flexible
        self.lines: list[str] = []
        self.ns: dict[str, Any] = {
            "_ruv": read_uvarint,
            "_uv": uvarint,
            "_UVS": UVARINT_SMALL,
            "_pack_array": pack_array,
            "_unpack_array": unpack_array,
            "_differs": differs_from_defaults,
            "_MISSING": MISSING,
            "_EMPTY": {},
            "_Region": RecordsRegion,
        }
        self._count = 0
        self._structs: dict[str, str] = {}

    def var(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def const(self, value: Any) -> str:
        if value is None or isinstance(value, bool | int | float | str | bytes):
            return repr(value)
        name = self.var("_K")
        self.ns[name] = value
        return name

    def struct(self, fmt: str, method: str) -> str:
        key = f"{fmt}.{method}"
        if key not in self._structs:
            name = self.var("_S")
            self.ns[name] = getattr(struct.Struct(fmt), method)
            self._structs[key] = name
        return self._structs[key]

    def table(self, code: str, make: Callable[[str], tuple[Callable[..., Any], ...]]) -> str:
        """Name of a per-length table of array (un)packers for scalar ``code``."""
        name = f"_{make.__name__}_{code}"
        self.ns[name] = make(code)
        return name

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def compact(self, field: FieldSpec) -> bool:
        return self.flexible and not field.never_flexible

    def split(self, fields: tuple[FieldSpec, ...]) -> tuple[list[FieldSpec], list[FieldSpec]]:
        """Fields on the wire in this version: (positional, tagged sorted by tag)."""
        plain: list[FieldSpec] = []
        tagged: list[FieldSpec] = []
        for f in fields:
            if f.present(self.version):
                (tagged if self.flexible and f.tagged(self.version) else plain).append(f)
        return plain, sorted(tagged, key=lambda f: f.tag or 0)

    def build(self, header: str) -> Callable[..., Any]:
        source = "\n".join([header, *self.lines])
        exec(compile(source, f"<strom.codec {header}>", "exec"), self.ns)  # source generated from the specs
        fn: Callable[..., Any] = self.ns["_fn"]
        fn.__doc__ = source
        return fn


MISSING = object()
LENGTH_PREFIX = {"string": "h", "bytes": "i", "records": "i"}


def dec_flush(g: SourceBuilder, pending: list[tuple[str, str]], ind: int) -> None:
    if pending:
        fmt = ">" + "".join(code for code, _ in pending)
        g.emit(ind, f"{', '.join(v for _, v in pending)}, = {g.struct(fmt, 'unpack_from')}(buf, pos)")
        g.emit(ind, f"pos += {struct.calcsize(fmt)}")
        pending.clear()


def dec_uvarint(g: SourceBuilder, target: str, ind: int) -> None:
    g.emit(ind, f"{target} = buf[pos]")
    g.emit(ind, f"if {target} < 128: pos += 1")
    g.emit(ind, f"else: {target}, pos = _ruv(buf, pos)")


def dec_length(
    g: SourceBuilder, f: FieldSpec, prefix: str, target: str, pending: list[tuple[str, str]], ind: int
) -> None:
    """Read a length/count into ``target`` (-1 = null), flushing pending fixed fields."""
    if g.compact(f):
        dec_flush(g, pending, ind)
        dec_uvarint(g, target, ind)
        g.emit(ind, f"{target} -= 1")
    else:
        pending.append((prefix, target))
        dec_flush(g, pending, ind)


def dec_null_check(g: SourceBuilder, f: FieldSpec, length: str, target: str, ind: int) -> int:
    """Emit the null branch; return the indent for the non-null branch."""
    if f.nullable(g.version):
        g.emit(ind, f"if {length} < 0:")
        g.emit(ind + 1, f"if {length} != -1: raise ValueError('negative length')")
        g.emit(ind + 1, f"{target} = None")
        g.emit(ind, "else:")
        return ind + 1
    g.emit(ind, f"if {length} < 0: raise ValueError('null in non-nullable {f.name}')")
    return ind


def dec_blob(g: SourceBuilder, type_: str, length: str, target: str, ind: int) -> None:
    piece = f"buf[pos:pos + {length}]"
    conv = {"string": f"str({piece}, 'utf-8')", "bytes": f"bytes({piece})", "records": piece}[type_]
    g.emit(ind, f"{target} = {conv}")
    g.emit(ind, f"pos += {length}")


def enc_flush(g: SourceBuilder, pending: list[tuple[str, str]], out: str, ind: int) -> None:
    if pending:
        fmt = ">" + "".join(code for code, _ in pending)
        g.emit(ind, f"{out} += {g.struct(fmt, 'pack')}({', '.join(e for _, e in pending)})")
        pending.clear()


def enc_uvarint(g: SourceBuilder, expr: str, out: str, ind: int) -> None:
    tmp = g.var("u")
    g.emit(ind, f"{tmp} = {expr}")
    g.emit(ind, f"{out} += _UVS[{tmp}] if 0 <= {tmp} < 128 else _uv({tmp})")


def enc_length(
    g: SourceBuilder,
    f: FieldSpec,
    prefix_nullable: tuple[str, bool],
    value: str,
    pending: list[tuple[str, str]],
    out: str,
    ind: int,
) -> None:
    """Write the length/count of ``value`` (``-1``/``0`` for None when nullable)."""
    prefix, nullable = prefix_nullable
    if g.compact(f):
        enc_flush(g, pending, out, ind)
        expr = f"len({value}) + 1"
        enc_uvarint(g, f"0 if {value} is None else {expr}" if nullable else expr, out, ind)
    else:
        pending.append((prefix, f"-1 if {value} is None else len({value})" if nullable else f"len({value})"))
        enc_flush(g, pending, out, ind)


def enc_blob(
    g: SourceBuilder,
    f: FieldSpec,
    expr: str,
    nullable: bool,
    pending: list[tuple[str, str]],
    out: str,
    ind: int,
) -> None:
    """A string, bytes or records value: length prefix (merged into ``pending``) then the bytes."""
    raw = g.var("b")
    if f.type == "string":
        if nullable:
            text = g.var("t")
            g.emit(ind, f"{text} = {expr}")
            g.emit(ind, f"{raw} = None if {text} is None else {text}.encode()")
        else:
            g.emit(ind, f"{raw} = {expr}.encode()")
    else:
        g.emit(ind, f"{raw} = {expr}")
    enc_length(g, f, (LENGTH_PREFIX[f.type], nullable), raw, pending, out, ind)
    if f.type == "records":
        # A region is left out of ``out``; an output without ``regions`` (plain bytearray) refuses it.
        g.emit(ind, f"if isinstance({raw}, _Region): {out}.regions.append((len({out}), {raw}))")
        g.emit(ind, f"elif {raw} is not None: {out} += {raw}" if nullable else f"else: {out} += {raw}")
        return
    g.emit(ind, f"if {raw} is not None: {out} += {raw}" if nullable else f"{out} += {raw}")
