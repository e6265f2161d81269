"""The codec's code generator: one straight-line Python function per message version, from its spec.

`compile_decoder` / `compile_encoder` walk a :class:`MessageSpec` for one version, emit Python source
through a :class:`SourceBuilder` (splicing in the wire-type snippets of :mod:`strom.protocol.primitives`)
and ``compile`` it. The generated code knows the exact layout of that version, so at run time nothing
interprets fields:

* consecutive fixed-width fields -- and the length prefix of the variable field that follows them --
  are read or written by a single precompiled :class:`struct.Struct` call (``pending`` collects them
  until a variable-width field, a loop or a branch forces a flush);
* arrays become ``for`` loops (arrays of fixed-width elements one precompiled unpack or pack), structs
  are inlined, messages are plain ``dict``s built with one dict display (keys are the snake_case JSON
  names); every element takes at least one byte, so a corrupt count above the bytes left is refused
  before its loop runs;
* flexible versions (KIP-482) use compact lengths and a tagged-field section per struct. Known tags
  are decoded (absent ones get their default), unknown ones skipped; a tag is written only when the
  dict holds it with a non-default value (docs/protocol.md#tagged-fields-at-their-defaults).

Pure. codec.py caches what is compiled here and owns the headers, the public API and the error
contract.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from strom.protocol import primitives
from strom.protocol.primitives import (
    LENGTH_PREFIX,
    SourceBuilder,
    dec_blob,
    dec_flush,
    dec_length,
    dec_null_check,
    dec_uvarint,
    enc_blob,
    enc_flush,
    enc_length,
    enc_uvarint,
)
from strom.protocol.spec import FIXED_TYPES, FieldSpec, MessageSpec

# ``fn(buf, pos) -> (body, pos)`` and ``fn(body, out)``, as compiled below.
Decoder = Callable[[memoryview, int], tuple[dict[str, Any], int]]
Encoder = Callable[[Mapping[str, Any], bytearray], None]

# -- decoding ----------------------------------------------------------------------------------


def _dec_value(g: SourceBuilder, f: FieldSpec, target: str, pending: list[tuple[str, str]], ind: int) -> None:
    if f.is_array:
        count = g.var("n")
        dec_length(g, f, "i", count, pending, ind)
        body = dec_null_check(g, f, count, target, ind)
        if f.type in FIXED_TYPES:
            code, size = FIXED_TYPES[f.type]
            table = g.table(code, primitives.array_unpackers)
            g.emit(
                body, f"if {count} < {primitives.SMALL_ARRAY}: {target} = list({table}[{count}](buf, pos))"
            )
            g.emit(body, f"else: {target} = _unpack_array({code!r}, {size}, {count}, buf, pos)")
            g.emit(body, f"pos += {size} * {count}")
            return
        # Every element takes at least one byte: bounds the loop on a corrupt count.
        g.emit(body, f"if {count} > end - pos: raise ValueError('array longer than frame')")
        g.emit(body, f"{target} = []")
        g.emit(body, f"for _ in range({count}):")
        elem = g.var("e")
        if f.type == "struct":
            _dec_struct(g, f.fields, elem, body + 1)
        else:
            inner: list[tuple[str, str]] = []
            length = g.var("ln")
            dec_length(g, f, LENGTH_PREFIX[f.type], length, inner, body + 1)
            g.emit(body + 1, f"if {length} < 0: raise ValueError('null array element')")
            dec_blob(g, f.type, length, elem, body + 1)
        g.emit(body + 1, f"{target}.append({elem})")
    elif f.type == "struct":
        if f.nullable(g.version):
            marker = g.var("m")
            pending.append(("b", marker))
            dec_flush(g, pending, ind)
            g.emit(ind, f"if {marker} < 0: {target} = None")
            g.emit(ind, "else:")
            ind += 1
        else:
            dec_flush(g, pending, ind)
        _dec_struct(g, f.fields, target, ind)
    elif f.type in FIXED_TYPES:
        pending.append((FIXED_TYPES[f.type][0], target))
    else:
        length = g.var("ln")
        dec_length(g, f, LENGTH_PREFIX[f.type], length, pending, ind)
        body = dec_null_check(g, f, length, target, ind)
        dec_blob(g, f.type, length, target, body)


def _dec_struct(g: SourceBuilder, fields: tuple[FieldSpec, ...], target: str, ind: int) -> None:
    """Decode a struct's fields at ``pos`` and assign the resulting dict to ``target``."""
    plain, tagged = g.split(fields)
    items: list[tuple[str, str]] = []
    pending: list[tuple[str, str]] = []
    for f in plain:
        v = g.var("v")
        items.append((f.attr, v))
        _dec_value(g, f, v, pending, ind)
    dec_flush(g, pending, ind)
    if g.flexible:
        for f in tagged:
            v = g.var("v")
            items.append((f.attr, v))
            default = f.default_for(g.version)
            g.emit(ind, f"{v} = {'[]' if isinstance(default, list) else g.const(default)}")
        _dec_tags(g, tagged, items[len(plain) :], ind)
    g.emit(ind, f"{target} = {{{', '.join(f'{a!r}: {v}' for a, v in items)}}}")


def _dec_tags(g: SourceBuilder, tagged: list[FieldSpec], items: list[tuple[str, str]], ind: int) -> None:
    count, tag, size, nxt = g.var("nt"), g.var("tg"), g.var("sz"), g.var("nx")
    dec_uvarint(g, count, ind)
    g.emit(ind, f"for _ in range({count}):")
    g.emit(ind + 1, f"{tag}, pos = _ruv(buf, pos)")
    g.emit(ind + 1, f"{size}, pos = _ruv(buf, pos)")
    g.emit(ind + 1, f"{nxt} = pos + {size}")
    g.emit(ind + 1, f"if {nxt} > end: raise ValueError('tagged field longer than frame')")
    for i, (f, (_, v)) in enumerate(zip(tagged, items, strict=True)):
        g.emit(ind + 1, f"{'if' if i == 0 else 'elif'} {tag} == {f.tag}:")
        pending: list[tuple[str, str]] = []
        _dec_value(g, f, v, pending, ind + 2)
        dec_flush(g, pending, ind + 2)
        g.emit(ind + 2, f"if pos != {nxt}: raise ValueError('tagged field size mismatch')")
    g.emit(ind + 1, f"pos = {nxt}")


def compile_decoder(spec: MessageSpec, version: int) -> Decoder:
    """``fn(buf, pos) -> (body, pos)`` for one version of one message."""
    g = SourceBuilder(version, spec.flexible(version))
    g.emit(1, "end = len(buf)")
    _dec_struct(g, spec.fields, "body", 1)
    g.emit(1, "return body, pos")
    fn: Decoder = g.build(f"def _fn(buf, pos):  # decode {spec.name} v{version}")
    return fn


# -- encoding ----------------------------------------------------------------------------------


def _enc_value(
    g: SourceBuilder, f: FieldSpec, expr: str, pending: list[tuple[str, str]], out: str, ind: int
) -> None:
    nullable = f.nullable(g.version)
    if f.is_array:
        arr = g.var("a")
        g.emit(ind, f"{arr} = {expr}")
        enc_length(g, f, ("i", nullable), arr, pending, out, ind)
        if f.type in FIXED_TYPES:
            code = FIXED_TYPES[f.type][0]
            table, small = g.table(code, primitives.array_packers), primitives.SMALL_ARRAY
            g.emit(ind, f"if {arr} and len({arr}) < {small}: {out} += {table}[len({arr})](*{arr})")
            g.emit(ind, f"elif {arr}: {out} += _pack_array({code!r}, {arr})")
            return
        elem = g.var("e")
        g.emit(ind, f"for {elem} in {arr} or ():" if nullable else f"for {elem} in {arr}:")
        inner: list[tuple[str, str]] = []
        if f.type == "struct":
            _enc_struct(g, f.fields, elem, out, ind + 1)
        else:
            enc_blob(g, f, elem, False, inner, out, ind + 1)
    elif f.type == "struct":
        sub = g.var("s")
        g.emit(ind, f"{sub} = {expr}")
        if nullable:
            pending.append(("b", f"-1 if {sub} is None else 1"))
            enc_flush(g, pending, out, ind)
            g.emit(ind, f"if {sub} is not None:")
            ind += 1
        else:
            enc_flush(g, pending, out, ind)
            g.emit(ind, f"{sub} = {sub} or _EMPTY")
        _enc_struct(g, f.fields, sub, out, ind)
    elif f.type in FIXED_TYPES:
        pending.append((FIXED_TYPES[f.type][0], expr))
    else:
        enc_blob(g, f, expr, nullable, pending, out, ind)


def _tag_condition(g: SourceBuilder, f: FieldSpec, value: str) -> str:
    """True when a tagged value differs from its default and so must be written."""
    default = f.default_for(g.version)
    if f.type == "struct" and not f.is_array:
        # a struct is at its default when every field it carries is (e.g. CurrentLeader -1/-1)
        defaults = tuple((s.attr, s.default_for(g.version)) for s in f.fields if s.present(g.version))
        return f"{value} is not None and _differs({value}, {g.const(defaults)})"
    if f.is_array or f.type in ("bytes", "records"):
        return f"{value} is not None" if default is None else f"{value}"
    return f"{value} != {g.const(default)}"


def _enc_struct(g: SourceBuilder, fields: tuple[FieldSpec, ...], src: str, out: str, ind: int) -> None:
    plain, tagged = g.split(fields)
    pending: list[tuple[str, str]] = []
    for f in plain:
        default = f.default_for(g.version)
        dexpr = "()" if isinstance(default, list) else g.const(default)
        _enc_value(g, f, f"{src}.get({f.attr!r}, {dexpr})", pending, out, ind)
    if not g.flexible:
        enc_flush(g, pending, out, ind)
        return
    if not tagged:
        pending.append(("B", "0"))
        enc_flush(g, pending, out, ind)
        return
    enc_flush(g, pending, out, ind)
    tags = g.var("tags")
    g.emit(ind, f"{tags} = []")
    for f in tagged:
        value, buf = g.var("w"), g.var("o")
        g.emit(ind, f"{value} = {src}.get({f.attr!r}, _MISSING)")
        g.emit(ind, f"if {value} is not _MISSING and {_tag_condition(g, f, value)}:")
        g.emit(ind + 1, f"{buf} = bytearray()")
        inner: list[tuple[str, str]] = []
        _enc_value(g, f, value, inner, buf, ind + 1)
        enc_flush(g, inner, buf, ind + 1)
        g.emit(ind + 1, f"{tags}.append(({f.tag}, {buf}))")
    enc_uvarint(g, f"len({tags})", out, ind)
    tag, data = g.var("tg"), g.var("td")
    g.emit(ind, f"for {tag}, {data} in {tags}:")
    g.emit(ind + 1, f"{out} += _uv({tag}) + _uv(len({data}))")
    g.emit(ind + 1, f"{out} += {data}")


def compile_encoder(spec: MessageSpec, version: int) -> Encoder:
    """``fn(body, out)`` appending one version of one message to the bytearray ``out``."""
    g = SourceBuilder(version, spec.flexible(version))
    _enc_struct(g, spec.fields, "body", "out", 1)
    if not g.lines:
        g.emit(1, "pass")
    fn: Encoder = g.build(f"def _fn(body, out):  # encode {spec.name} v{version}")
    return fn
