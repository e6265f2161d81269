"""A ``FileProto`` printed as ``.proto`` source: the registry's canonical Protobuf text.

The layout is fixed (see `strom.registry.protobuf_schema`): two-space indents, one declaration a
line, type names fully qualified with a leading dot so that no scope lookup can change their meaning,
maps as ``map<K, V>`` (their synthetic ``...Entry`` messages are not printed), each ``oneof`` at the
place of its first member, proto3 ``optional`` fields with the keyword and without their synthetic
oneof. Options are printed from the fields each options message has set (built-in options only).
"""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf.descriptor_pb2 import DescriptorProto as MessageProto
from google.protobuf.descriptor_pb2 import EnumDescriptorProto as EnumProto
from google.protobuf.descriptor_pb2 import FieldDescriptorProto as FieldProto
from google.protobuf.descriptor_pb2 import FileDescriptorProto as FileProto
from google.protobuf.descriptor_pb2 import ServiceDescriptorProto as ServiceProto
from google.protobuf.message import Message

from strom.registry.errors import invalid_schema

_MAX_FIELD_NUMBER = 536_870_911
_SCALARS: dict[int, str] = {
    value: name.removeprefix("TYPE_").lower()
    for name, value in FieldProto.Type.items()
    if name not in ("TYPE_MESSAGE", "TYPE_ENUM", "TYPE_GROUP")
}


def print_file(proto: FileProto) -> str:
    """The canonical source text of ``proto``."""
    if proto.syntax == "editions":
        raise invalid_schema("Protobuf editions are not supported; use syntax proto2 or proto3")
    syntax = proto.syntax or "proto2"
    out = [f'syntax = "{syntax}";']
    if proto.package:
        out.append(f"package {proto.package};")
    public, weak = set(proto.public_dependency), set(proto.weak_dependency)
    for i, dep in enumerate(proto.dependency):
        kind = "public " if i in public else "weak " if i in weak else ""
        out.append(f"import {kind}{_quote(dep)};")
    out += _options(proto.options, "")
    printer = _Printer(syntax == "proto3")
    for message in proto.message_type:
        out += printer.message(message, "", proto.package)
    for enum in proto.enum_type:
        out += printer.enum(enum, "")
    for service in proto.service:
        out += printer.service(service)
    out += printer.extensions(proto.extension, "")
    return "\n".join(out) + "\n"


def _quote(text: str) -> str:
    escaped = []
    for char in text:
        if char in '"\\':
            escaped.append("\\" + char)
        elif char == "\n":
            escaped.append("\\n")
        elif ord(char) < 32 or ord(char) == 127:
            escaped.append(f"\\{ord(char):03o}")
        else:
            escaped.append(char)
    return '"' + "".join(escaped) + '"'


def _value(options: Message, name: str, value: object) -> str:
    descriptor = options.DESCRIPTOR.fields_by_name[name]
    if descriptor.enum_type is not None:
        return str(descriptor.enum_type.values_by_number[int(str(value))].name)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, bytes):
        return _quote(value.decode("latin-1"))
    return repr(value)


def _option_pairs(options: Message) -> list[tuple[str, str]]:
    pairs = []
    for descriptor, value in options.ListFields():
        if descriptor.is_extension or descriptor.name == "uninterpreted_option":
            raise invalid_schema("custom options are not supported")
        if descriptor.name == "map_entry":
            continue
        pairs.append((descriptor.name, _value(options, descriptor.name, value)))
    return pairs


def _options(options: Message, indent: str) -> list[str]:
    return [f"{indent}option {name} = {value};" for name, value in _option_pairs(options)]


def _ranges(ranges: list[tuple[int, int]]) -> str:
    parts = []
    for start, end in ranges:  # end exclusive
        last = end - 1
        if start == last:
            parts.append(str(start))
        else:
            parts.append(f"{start} to {'max' if last >= _MAX_FIELD_NUMBER else last}")
    return ", ".join(parts)


class _Printer:
    def __init__(self, proto3: bool) -> None:
        self._proto3 = proto3

    def message(self, message: MessageProto, indent: str, scope: str) -> list[str]:
        inner = indent + "  "
        full_name = f"{scope}.{message.name}" if scope else message.name
        out = [f"{indent}message {message.name} {{"]
        out += _options(message.options, inner)
        if message.reserved_range:
            out.append(f"{inner}reserved {_ranges([(r.start, r.end) for r in message.reserved_range])};")
        if message.reserved_name:
            out.append(f"{inner}reserved {', '.join(_quote(n) for n in message.reserved_name)};")
        if message.extension_range:
            out.append(f"{inner}extensions {_ranges([(r.start, r.end) for r in message.extension_range])};")
        maps = {f".{full_name}.{m.name}": m for m in message.nested_type if m.options.map_entry}
        printed_oneofs: set[int] = set()
        for fld in message.field:
            real_oneof = fld.HasField("oneof_index") and not fld.proto3_optional
            if not real_oneof:
                out.append(self.field(fld, inner, maps))
                continue
            if fld.oneof_index in printed_oneofs:
                continue
            printed_oneofs.add(fld.oneof_index)
            decl = message.oneof_decl[fld.oneof_index]
            out.append(f"{inner}oneof {decl.name} {{")
            out += _options(decl.options, inner + "  ")
            members = [
                f for f in message.field if f.HasField("oneof_index") and f.oneof_index == fld.oneof_index
            ]
            out += [self.field(member, inner + "  ", maps, in_oneof=True) for member in members]
            out.append(f"{inner}}}")
        for nested in message.nested_type:
            if not nested.options.map_entry:
                out += self.message(nested, inner, full_name)
        for enum in message.enum_type:
            out += self.enum(enum, inner)
        out += self.extensions(message.extension, inner)
        out.append(f"{indent}}}")
        return out

    def field(
        self,
        fld: FieldProto,
        indent: str,
        maps: dict[str, MessageProto],
        in_oneof: bool = False,
    ) -> str:
        if fld.type == FieldProto.TYPE_GROUP:
            raise invalid_schema("proto2 groups are not supported")
        entry = maps.get(fld.type_name)
        if entry is not None and fld.label == FieldProto.LABEL_REPEATED:
            key, value = entry.field[0], entry.field[1]
            text = f"map<{self._type(key)}, {self._type(value)}> {fld.name} = {fld.number}"
        else:
            text = f"{self._label(fld, in_oneof)}{self._type(fld)} {fld.name} = {fld.number}"
        extras = []
        if fld.HasField("default_value"):
            default = fld.default_value
            quoted = fld.type in (FieldProto.TYPE_STRING, FieldProto.TYPE_BYTES)
            extras.append(f"default = {_quote(default) if quoted else default}")
        if fld.HasField("json_name") and fld.json_name != _json_name(fld.name):
            extras.append(f"json_name = {_quote(fld.json_name)}")
        extras += [f"{name} = {value}" for name, value in _option_pairs(fld.options)]
        return f"{indent}{text}{' [' + ', '.join(extras) + ']' if extras else ''};"

    def _label(self, fld: FieldProto, in_oneof: bool) -> str:
        if in_oneof:
            return ""
        if fld.label == FieldProto.LABEL_REPEATED:
            return "repeated "
        if fld.label == FieldProto.LABEL_REQUIRED:
            return "required "
        if not self._proto3 or fld.proto3_optional or fld.extendee:
            return "optional "
        return ""

    @staticmethod
    def _type(fld: FieldProto) -> str:
        if fld.type in (FieldProto.TYPE_MESSAGE, FieldProto.TYPE_ENUM) or not fld.HasField("type"):
            return str(fld.type_name)
        return _SCALARS[fld.type]

    def enum(self, enum: EnumProto, indent: str) -> list[str]:
        inner = indent + "  "
        out = [f"{indent}enum {enum.name} {{"]
        out += _options(enum.options, inner)
        if enum.reserved_range:  # enum ranges are inclusive
            out.append(f"{inner}reserved {_ranges([(r.start, r.end + 1) for r in enum.reserved_range])};")
        if enum.reserved_name:
            out.append(f"{inner}reserved {', '.join(_quote(n) for n in enum.reserved_name)};")
        for value in enum.value:
            pairs = _option_pairs(value.options)
            extras = f" [{', '.join(f'{n} = {v}' for n, v in pairs)}]" if pairs else ""
            out.append(f"{inner}{value.name} = {value.number}{extras};")
        out.append(f"{indent}}}")
        return out

    def service(self, service: ServiceProto) -> list[str]:
        out = [f"service {service.name} {{"]
        out += _options(service.options, "  ")
        for method in service.method:
            request = f"{'stream ' if method.client_streaming else ''}{method.input_type}"
            response = f"{'stream ' if method.server_streaming else ''}{method.output_type}"
            options = _options(method.options, "    ")
            body = " {\n" + "\n".join(options) + "\n  }" if options else ";"
            out.append(f"  rpc {method.name}({request}) returns ({response}){body}")
        out.append("}")
        return out

    def extensions(self, fields: Iterable[FieldProto], indent: str) -> list[str]:
        by_extendee: dict[str, list[FieldProto]] = {}
        for fld in fields:
            by_extendee.setdefault(fld.extendee, []).append(fld)
        out = []
        for extendee, members in by_extendee.items():
            out.append(f"{indent}extend {extendee} {{")
            out += [self.field(m, indent + "  ", {}) for m in members]
            out.append(f"{indent}}}")
        return out


def _json_name(name: str) -> str:
    """protoc's default JSON name: underscores dropped, the letter after each one upper-cased."""
    out, upper = [], False
    for char in name:
        if char == "_":
            upper = True
        elif upper:
            out.append(char.upper())
            upper = False
        else:
            out.append(char)
    return "".join(out)
