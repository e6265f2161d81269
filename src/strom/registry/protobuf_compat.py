"""Protobuf compatibility: the differences between two schemas and which of them break readers.

The rules are those Confluent's registry applies to Protobuf (its ``protobuf.diff`` package), on the
compiled descriptors: walk the *original* schema (the writer's) and the *update* (the reader's), record
each difference with its kind and path, and call the update compatible when every difference is of a
kind in `COMPATIBLE_CHANGES`. BACKWARD compares the latest version (original) with the new schema
(update), FORWARD the other way round. Protobuf's wire format makes most changes safe both ways:

* fields are matched by **number**, not name: adding or removing a field is compatible (an unknown
  field is skipped, a missing one takes its default), renaming one is too; removing or adding a
  proto2 ``required`` field is not;
* a field's type may change only within a wire-compatible group: {int32, int64, uint32, uint64, bool,
  enums}, {sint32, sint64}, {string, bytes}, {fixed32, sfixed32}, {fixed64, sfixed64}, float,
  double; scalar ↔ message ↔ map is a kind change; a message-typed field must keep its type's name
  (package aside) and that message must itself be compatible (references across subjects included);
* labels: a number turning repeated (or back) breaks packed encoding; a string or bytes may;
* ``oneof``: adding or removing one, adding a member, moving a member out to the top level are
  compatible; moving several existing fields into one oneof, or a field into an existing oneof, is
  not (they become mutually exclusive); a member removed while its oneof stays is a removal;
* messages and enums are matched by name within their scope: removing a message is not compatible,
  adding one is, moving one to another index is (message indexes are per schema id); enums may gain,
  lose or rename constants; the ``package`` may not change.

Map fields are compared by their key and value types; their synthetic entry messages are not types
of their own. A message pair under comparison is not compared again inside itself (recursion).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from google.protobuf.descriptor_pb2 import DescriptorProto as MessageProto
from google.protobuf.descriptor_pb2 import EnumDescriptorProto as EnumProto
from google.protobuf.descriptor_pb2 import FieldDescriptorProto as FieldProto
from google.protobuf.descriptor_pb2 import FileDescriptorProto as FileProto

from strom.registry.protobuf_schema import ProtobufSchema

COMPATIBLE_CHANGES = frozenset(
    {
        "MESSAGE_ADDED",
        "MESSAGE_MOVED",
        "ENUM_ADDED",
        "ENUM_REMOVED",
        "ENUM_CONST_ADDED",
        "ENUM_CONST_CHANGED",
        "ENUM_CONST_REMOVED",
        "FIELD_ADDED",
        "FIELD_REMOVED",
        "FIELD_NAME_CHANGED",
        "FIELD_STRING_OR_BYTES_LABEL_CHANGED",
        "ONEOF_ADDED",
        "ONEOF_REMOVED",
        "ONEOF_FIELD_ADDED",
        "ONEOF_FIELD_MOVED_TO_TOP_LEVEL",
    }
)
_SCALAR_KINDS = {
    **dict.fromkeys(("int32", "int64", "uint32", "uint64", "bool"), "GENERAL_NUMBER"),
    **dict.fromkeys(("sint32", "sint64"), "SIGNED_NUMBER"),
    **dict.fromkeys(("string", "bytes"), "STRING_OR_BYTES"),
    **dict.fromkeys(("fixed32", "sfixed32"), "FIXED32"),
    **dict.fromkeys(("fixed64", "sfixed64"), "FIXED64"),
    "float": "FLOAT",
    "double": "DOUBLE",
}
_SCALAR_NAMES = {
    value: name.removeprefix("TYPE_").lower()
    for name, value in FieldProto.Type.items()
    if name not in ("TYPE_MESSAGE", "TYPE_ENUM", "TYPE_GROUP")
}


@dataclass(frozen=True, slots=True)
class _Type:
    """A named type of one side: its descriptor and its file's package."""

    proto: MessageProto | EnumProto
    package: str
    proto3: bool  # its file's syntax: proto2 labels every singular field, proto3 only ``optional``

    @property
    def is_map(self) -> bool:
        return isinstance(self.proto, MessageProto) and self.proto.options.map_entry


def _collect(files: Iterable[FileProto]) -> dict[str, _Type]:
    types: dict[str, _Type] = {}

    def walk(
        messages: Iterable[MessageProto],
        enums: Iterable[EnumProto],
        scope: str,
        file: FileProto,
    ) -> None:
        proto3 = file.syntax == "proto3"
        for message in messages:
            name = f"{scope}.{message.name}" if scope else message.name
            types[name] = _Type(message, file.package, proto3)
            walk(message.nested_type, message.enum_type, name, file)
        for enum in enums:
            types[f"{scope}.{enum.name}" if scope else enum.name] = _Type(enum, file.package, proto3)

    for file in files:
        walk(file.message_type, file.enum_type, file.package, file)
    return types


@dataclass(slots=True)
class _Context:
    original: dict[str, _Type]
    update: dict[str, _Type]
    differences: list[tuple[str, str]] = field(default_factory=list)
    in_progress: set[tuple[str, str]] = field(default_factory=set)

    def add(self, kind: str, path: str) -> None:
        self.differences.append((kind, path))

    def sub(self) -> _Context:
        return _Context(self.original, self.update, [], self.in_progress)

    @property
    def compatible(self) -> bool:
        return all(kind in COMPATIBLE_CHANGES for kind, _ in self.differences)


def differences(original: ProtobufSchema, update: ProtobufSchema) -> list[tuple[str, str]]:
    """Every difference (kind, path) from ``original`` to ``update``."""
    ctx = _Context(
        _collect([*original.dependencies.values(), original.file]),
        _collect([*update.dependencies.values(), update.file]),
    )
    if original.file.package != update.file.package:
        ctx.add("PACKAGE_CHANGED", "#/")
    _compare_types(
        ctx,
        (original.file.message_type, original.file.enum_type, original.file.package),
        (update.file.message_type, update.file.enum_type, update.file.package),
        "#",
    )
    return ctx.differences


def can_read(reader: ProtobufSchema, writer: ProtobufSchema) -> list[str]:
    """Why ``reader`` may not read data written with ``writer``; empty if it may."""
    return [
        f"{kind} at {path}" for kind, path in differences(writer, reader) if kind not in COMPATIBLE_CHANGES
    ]


_Scope = tuple[Iterable[MessageProto], Iterable[EnumProto], str]  # messages, enums, full name of scope


def _compare_types(ctx: _Context, original: _Scope, update: _Scope, path: str) -> None:
    def index(scope: _Scope) -> tuple[dict[str, tuple[int, MessageProto]], dict[str, EnumProto]]:
        messages = [m for m in scope[0] if not m.options.map_entry]
        return {m.name: (i, m) for i, m in enumerate(messages)}, {e.name: e for e in scope[1]}

    (o_messages, o_enums), (u_messages, u_enums) = index(original), index(update)
    for name in sorted(set(o_messages) | set(u_messages)):
        where = f"{path}/{name}"
        if name not in u_messages:
            ctx.add("MESSAGE_REMOVED", where)
        elif name not in o_messages:
            ctx.add("MESSAGE_ADDED", where)
        else:
            (o_index, o_message), (u_index, u_message) = o_messages[name], u_messages[name]
            o_full, u_full = _join(original[2], name), _join(update[2], name)
            _compare_message(ctx, o_message, u_message, o_full, u_full, where)
            if o_index != u_index:
                ctx.add("MESSAGE_MOVED", where)
    for name in sorted(set(o_enums) | set(u_enums)):
        where = f"{path}/{name}"
        if name not in u_enums:
            ctx.add("ENUM_REMOVED", where)
        elif name not in o_enums:
            ctx.add("ENUM_ADDED", where)
        else:
            _compare_enum(ctx, o_enums[name], u_enums[name], where)


def _join(scope: str, name: str) -> str:
    return f"{scope}.{name}" if scope else name


def _compare_enum(ctx: _Context, original: EnumProto, update: EnumProto, path: str) -> None:
    o_values = {v.number: v.name for v in original.value}
    u_values = {v.number: v.name for v in update.value}
    for number in sorted(set(o_values) | set(u_values)):
        if number not in u_values:
            ctx.add("ENUM_CONST_REMOVED", f"{path}/{number}")
        elif number not in o_values:
            ctx.add("ENUM_CONST_ADDED", f"{path}/{number}")
        elif o_values[number] != u_values[number]:
            ctx.add("ENUM_CONST_CHANGED", f"{path}/{number}")


def _fields(
    message: MessageProto,
) -> tuple[dict[int, FieldProto], dict[int, str], dict[str, list[int]]]:
    """Fields by number, each oneof member's oneof name, and each oneof's member numbers."""
    by_number = {f.number: f for f in message.field}
    oneof_of: dict[int, str] = {}
    oneofs: dict[str, list[int]] = {}
    for f in message.field:
        if f.HasField("oneof_index") and not f.proto3_optional:
            name = message.oneof_decl[f.oneof_index].name
            oneof_of[f.number] = name
            oneofs.setdefault(name, []).append(f.number)
    return by_number, oneof_of, oneofs


def _compare_message(
    ctx: _Context, original: MessageProto, update: MessageProto, o_full: str, u_full: str, path: str
) -> None:
    pair = (o_full, u_full)
    if pair not in ctx.in_progress:
        ctx.in_progress.add(pair)
        try:
            _compare_fields(
                ctx, original, update, _proto3(ctx.original, o_full), _proto3(ctx.update, u_full), path
            )
        finally:
            ctx.in_progress.discard(pair)
    _compare_types(
        ctx,
        (original.nested_type, original.enum_type, o_full),
        (update.nested_type, update.enum_type, u_full),
        path,
    )


def _proto3(types: dict[str, _Type], name: str) -> bool:
    found = types.get(name)
    return found.proto3 if found is not None else True


def _compare_fields(
    ctx: _Context, original: MessageProto, update: MessageProto, o3: bool, u3: bool, path: str
) -> None:
    o_fields, o_oneof_of, o_oneofs = _fields(original)
    u_fields, u_oneof_of, u_oneofs = _fields(update)
    deleted_oneofs = {
        name
        for name, members in o_oneofs.items()
        if name not in u_oneofs and not set(members) & set(u_fields)
    }
    for name, members in u_oneofs.items():
        groups: set[str] = set()
        moved_in = 0
        for number in members:
            if number in o_oneof_of:
                groups.add("oneof:" + o_oneof_of[number])
            elif number in o_fields:
                groups.add(f"field:{number}")
                moved_in += 1
        if len(groups) > 1:
            kind = "MULTIPLE_FIELDS_MOVED_TO_ONEOF" if moved_in > 1 else "FIELD_MOVED_TO_EXISTING_ONEOF"
            ctx.add(kind, f"{path}/{name}")
    for name in sorted(set(o_oneofs) | set(u_oneofs)):
        if name not in u_oneofs:
            ctx.add("ONEOF_REMOVED", f"{path}/{name}")
        elif name not in o_oneofs:
            ctx.add("ONEOF_ADDED", f"{path}/{name}")
    for number in sorted(set(o_fields) | set(u_fields)):
        o_field, u_field = o_fields.get(number), u_fields.get(number)
        o_oneof, u_oneof = o_oneof_of.get(number), u_oneof_of.get(number)
        if u_field is None:
            assert o_field is not None
            if o_oneof is not None:
                if o_oneof not in deleted_oneofs:
                    ctx.add("ONEOF_FIELD_REMOVED", f"{path}/{o_oneof}/{number}")
            else:
                required = o_field.label == FieldProto.LABEL_REQUIRED
                ctx.add("REQUIRED_FIELD_REMOVED" if required else "FIELD_REMOVED", f"{path}/{number}")
        elif o_field is None:
            if u_oneof is not None:
                ctx.add("ONEOF_FIELD_ADDED", f"{path}/{u_oneof}/{number}")
            else:
                required = u_field.label == FieldProto.LABEL_REQUIRED
                ctx.add("REQUIRED_FIELD_ADDED" if required else "FIELD_ADDED", f"{path}/{number}")
        else:
            if o_oneof is not None and u_oneof is None:
                ctx.add("ONEOF_FIELD_MOVED_TO_TOP_LEVEL", f"{path}/{number}")
            where = f"{path}/{u_oneof}/{number}" if u_oneof is not None else f"{path}/{number}"
            if o_field.name != u_field.name:
                ctx.add("FIELD_NAME_CHANGED", where)
            o_type = _field_type(o_field, o_oneof is not None, ctx.original, o3)
            u_type = _field_type(u_field, u_oneof is not None, ctx.update, u3)
            _compare_types_of(ctx, o_type, u_type, where)


def _label(fld: FieldProto, in_oneof: bool, proto3: bool) -> str | None:
    """The label as written: None for proto3's implicit presence, oneof members and maps."""
    if in_oneof:
        return None
    if fld.label == FieldProto.LABEL_REPEATED:
        return "REPEATED"
    if fld.label == FieldProto.LABEL_REQUIRED:
        return "REQUIRED"
    return "OPTIONAL" if fld.proto3_optional or not proto3 else None


@dataclass(frozen=True, slots=True)
class _FieldType:
    name: str  # a scalar's name or a named type's full name
    label: str | None
    named: _Type | None


def _field_type(fld: FieldProto, in_oneof: bool, types: dict[str, _Type], proto3: bool) -> _FieldType:
    if fld.type in (FieldProto.TYPE_MESSAGE, FieldProto.TYPE_ENUM) or not fld.HasField("type"):
        name = fld.type_name.removeprefix(".")
        named = types.get(name)
        if named is not None and named.is_map:
            return _FieldType(name, None, named)
        return _FieldType(name, _label(fld, in_oneof, proto3), named)
    return _FieldType(_SCALAR_NAMES.get(fld.type, "bytes"), _label(fld, in_oneof, proto3), None)


def _kind(t: _FieldType) -> str:
    if t.named is None:
        return "SCALAR" if t.name in _SCALAR_KINDS else "MESSAGE"
    if isinstance(t.named.proto, EnumProto):
        return "SCALAR"
    return "MAP" if t.named.is_map else "MESSAGE"


def _compare_types_of(ctx: _Context, original: _FieldType, update: _FieldType, path: str) -> None:
    o_kind, u_kind = _kind(original), _kind(update)
    if o_kind != u_kind:
        ctx.add("FIELD_KIND_CHANGED", path)
    elif o_kind == "SCALAR":
        o_scalar, u_scalar = _scalar_kind(original), _scalar_kind(update)
        if o_scalar != u_scalar:
            ctx.add("FIELD_SCALAR_KIND_CHANGED", path)
        elif original.label is not None and update.label is not None and original.label != update.label:
            string_like = o_scalar == "STRING_OR_BYTES"
            ctx.add(
                "FIELD_STRING_OR_BYTES_LABEL_CHANGED" if string_like else "FIELD_NUMERIC_LABEL_CHANGED", path
            )
    elif o_kind == "MAP":
        assert original.named is not None and update.named is not None
        o_entry, u_entry = original.named.proto, update.named.proto
        assert isinstance(o_entry, MessageProto) and isinstance(u_entry, MessageProto)
        for o_part, u_part in zip(o_entry.field, u_entry.field, strict=False):
            o_type = _field_type(o_part, True, ctx.original, True)
            u_type = _field_type(u_part, True, ctx.update, True)
            _compare_types_of(ctx, o_type, u_type, path)
    else:
        _compare_message_types(ctx, original, update, path)


def _scalar_kind(t: _FieldType) -> str:
    if t.named is not None:
        return "GENERAL_NUMBER"  # an enum
    return _SCALAR_KINDS[t.name]


def _compare_message_types(ctx: _Context, original: _FieldType, update: _FieldType, path: str) -> None:
    if original.named is None or update.named is None:
        if original.name != update.name:
            ctx.add("FIELD_NAMED_TYPE_CHANGED", path)
        return
    o_local = _local(original.name, original.named.package)
    u_local = _local(update.name, update.named.package)
    if o_local != u_local:
        ctx.add("FIELD_NAMED_TYPE_CHANGED", path)
        return
    o_proto, u_proto = original.named.proto, update.named.proto
    assert isinstance(o_proto, MessageProto) and isinstance(u_proto, MessageProto)
    sub = ctx.sub()
    _compare_message(sub, o_proto, u_proto, original.name, update.name, f"#/{o_local}")
    ctx.differences += sub.differences
    if not sub.compatible:
        ctx.add("FIELD_NAMED_TYPE_CHANGED", path)


def _local(full_name: str, package: str) -> str:
    return full_name.removeprefix(package + ".") if package else full_name
