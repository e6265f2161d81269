"""Protobuf in the registry: protoc's checks, the canonical text, and Confluent's evolution rules."""

from __future__ import annotations

import base64

import pytest

from strom.registry.compatibility import Compatibility, check
from strom.registry.errors import RegistryError
from strom.registry.protobuf_compat import can_read, differences
from strom.registry.protobuf_schema import ProtobufSchema, parse

HEAD = 'syntax = "proto3";\npackage demo;\n'


def proto(body: str, refs: tuple[tuple[str, str], ...] = (), head: str = HEAD) -> ProtobufSchema:
    return parse(head + body, refs)


def kinds(original: ProtobufSchema, update: ProtobufSchema) -> set[str]:
    return {kind for kind, _ in differences(original, update)}


def backward(new: ProtobufSchema, old: ProtobufSchema) -> bool:
    return not check(Compatibility.BACKWARD, new, [old], can_read)


V1 = proto("message Order { int64 id = 1; string note = 2; }")


def test_protoc_errors_are_42201_with_the_line() -> None:
    for body in ("message {", "message A { int32 x = 1; string y = 1; }", "message A { Missing m = 1; }"):
        with pytest.raises(RegistryError) as info:
            proto(body)
        assert info.value.error_code == 42201
        assert "schema.proto:" in info.value.message
    with pytest.raises(RegistryError):
        proto('import "nowhere.proto";\nmessage A { int32 x = 1; }')


def test_canonical_text_round_trips_and_base64_descriptors_are_the_same_schema() -> None:
    source = HEAD + (
        'import "google/protobuf/timestamp.proto";\n'
        "message A {\n  int32 x = 1;  // comment\n  google.protobuf.Timestamp at = 2;\n"
        "  map<string, int64> counts = 3;\n  oneof pick { string s = 4; int32 i = 5; }\n"
        "  optional int32 maybe = 6;\n  repeated B bs = 7;\n  message B { E e = 1; }\n"
        "  enum E { E_UNSET = 0; E_ONE = 1; }\n}\n"
        "service S { rpc Get(A) returns (stream A); }\n"
    )
    schema = parse(source)
    assert "// comment" not in schema.canonical
    assert "map<string, int64> counts = 3;" in schema.canonical
    assert "optional int32 maybe = 6;" in schema.canonical
    assert "  oneof pick {\n    string s = 4;\n    int32 i = 5;\n  }" in schema.canonical
    again = parse(schema.canonical)
    assert (again.canonical, again.file) == (schema.canonical, schema.file)
    from_descriptor = parse(schema.serialized())
    assert from_descriptor.canonical == schema.canonical
    assert base64.b64decode(schema.serialized()) == schema.file.SerializeToString()


def test_references_are_imports_by_name() -> None:
    address = 'syntax = "proto3";\npackage geo;\nmessage Address { string city = 1; }\n'
    order = proto(
        'import "geo/address.proto";\nmessage Order { geo.Address to = 1; }',
        (("geo/address.proto", address),),
    )
    assert "geo/address.proto" in order.dependencies
    assert ".geo.Address to = 1;" in order.canonical
    with pytest.raises(RegistryError):
        proto('import "../escape.proto";\nmessage O { int32 x = 1; }', (("../escape.proto", address),))


def test_fields_added_removed_and_renamed_are_compatible() -> None:
    added = proto("message Order { int64 id = 1; string note = 2; double total = 3; }")
    renamed = proto("message Order { int64 id = 1; string comment = 2; }")
    assert kinds(V1, added) == {"FIELD_ADDED"}
    assert kinds(added, V1) == {"FIELD_REMOVED"}
    assert kinds(V1, renamed) == {"FIELD_NAME_CHANGED"}
    for mode in Compatibility:
        assert not check(mode, added, [V1, renamed], can_read), mode


@pytest.mark.parametrize(
    ("before", "after", "ok"),
    [
        ("int32", "int64", True),
        ("uint64", "bool", True),
        ("string", "bytes", True),
        ("fixed32", "sfixed32", True),
        ("sint32", "sint64", True),
        ("int32", "sint32", False),
        ("int32", "string", False),
        ("float", "double", False),
        ("fixed64", "int64", False),
    ],
)
def test_scalar_type_changes_follow_the_wire_groups(before: str, after: str, ok: bool) -> None:
    old = proto(f"message M {{ {before} v = 1; }}")
    new = proto(f"message M {{ {after} v = 1; }}")
    assert backward(new, old) is ok
    if not ok:
        assert kinds(old, new) == {"FIELD_SCALAR_KIND_CHANGED"}


def test_kinds_labels_and_named_types() -> None:
    scalar = proto("message M { int32 v = 1; }")
    message = proto("message M { N v = 1; } message N { int32 x = 1; }")
    assert "FIELD_KIND_CHANGED" in kinds(scalar, message)
    # Labels are compared only where both are written (proto3's implicit presence has none).
    optional = proto("message M { optional int32 v = 1; }")
    repeated = proto("message M { repeated int32 v = 1; }")
    assert kinds(optional, repeated) == {"FIELD_NUMERIC_LABEL_CHANGED"}
    assert not backward(repeated, optional)
    assert backward(repeated, scalar)
    optional_s = proto("message M { optional string v = 1; }")
    assert backward(proto("message M { repeated string v = 1; }"), optional_s)
    assert backward(proto("message M { optional int32 v = 1; }"), scalar)  # implicit → optional
    other = proto("message M { P v = 1; } message N { int32 x = 1; } message P { int32 x = 1; }")
    assert "FIELD_NAMED_TYPE_CHANGED" in kinds(message, other)
    enum_field = proto("message M { E v = 1; } enum E { A = 0; }")
    assert backward(enum_field, proto("message M { int64 v = 1; }"))  # enums are numbers on the wire


def test_messages_enums_and_package() -> None:
    two = proto("message A { int32 x = 1; } message B { int32 y = 1; }")
    one = proto("message A { int32 x = 1; }")
    assert kinds(two, one) == {"MESSAGE_REMOVED"}
    assert not backward(one, two)
    assert backward(two, one)  # MESSAGE_ADDED
    swapped = proto("message B { int32 y = 1; } message A { int32 x = 1; }")
    assert kinds(two, swapped) == {"MESSAGE_MOVED"} and backward(swapped, two)
    assert not backward(proto("message A { int32 x = 1; }", head='syntax = "proto3";\npackage other;\n'), one)
    e1 = proto("enum E { A = 0; B = 1; }")
    e2 = proto("enum E { A = 0; C = 1; D = 2; }")
    assert kinds(e1, e2) == {"ENUM_CONST_CHANGED", "ENUM_CONST_ADDED"} and backward(e2, e1)


def test_oneofs() -> None:
    plain = proto("message M { int32 a = 1; int32 b = 2; }")
    one_in = proto("message M { oneof o { int32 a = 1; } int32 b = 2; }")
    both_in = proto("message M { oneof o { int32 a = 1; int32 b = 2; } }")
    assert kinds(plain, both_in) >= {"MULTIPLE_FIELDS_MOVED_TO_ONEOF"}
    assert not backward(both_in, plain)
    assert "FIELD_MOVED_TO_EXISTING_ONEOF" in kinds(one_in, both_in)
    assert backward(plain, both_in)  # moved out to the top level
    grown = proto("message M { oneof o { int32 a = 1; int32 b = 2; int32 c = 3; } }")
    assert kinds(both_in, grown) == {"ONEOF_FIELD_ADDED"}
    shrunk = proto("message M { oneof o { int32 a = 1; } }")
    assert kinds(both_in, shrunk) == {"ONEOF_FIELD_REMOVED"} and not backward(shrunk, both_in)
    gone = proto("message M { int32 b = 2; }")
    assert kinds(one_in, gone) == {"ONEOF_REMOVED"}  # the whole oneof deleted: compatible
    assert backward(gone, one_in)


def test_proto2_required_fields() -> None:
    head = 'syntax = "proto2";\npackage demo;\n'
    old = proto("message M { optional int32 a = 1; }", head=head)
    new = proto("message M { optional int32 a = 1; required int32 b = 2; }", head=head)
    assert kinds(old, new) == {"REQUIRED_FIELD_ADDED"}
    assert not backward(new, old) and not backward(old, new)


def test_referenced_messages_and_maps_are_compared_inside() -> None:
    geo_v1 = 'syntax = "proto3";\npackage geo;\nmessage Address { string city = 1; }\n'
    geo_v2 = 'syntax = "proto3";\npackage geo;\nmessage Address { int32 city = 1; }\n'
    body = 'import "geo.proto";\nmessage Order { geo.Address to = 1; }'
    old, new = proto(body, (("geo.proto", geo_v1),)), proto(body, (("geo.proto", geo_v2),))
    assert {"FIELD_SCALAR_KIND_CHANGED", "FIELD_NAMED_TYPE_CHANGED"} <= kinds(old, new)
    assert not backward(new, old)
    m1 = proto("message M { map<string, int32> m = 1; }")
    assert backward(proto("message M { map<string, int64> m = 1; }"), m1)
    assert not backward(proto("message M { map<string, string> m = 1; }"), m1)


def test_recursive_messages_terminate() -> None:
    tree = proto("message Node { int32 v = 1; repeated Node kids = 2; }")
    wider = proto("message Node { int64 v = 1; repeated Node kids = 2; string name = 3; }")
    assert backward(wider, tree) and backward(tree, wider)


@pytest.mark.parametrize("mode", list(Compatibility))
def test_every_mode_with_a_removed_message(mode: Compatibility) -> None:
    v1 = proto("message A { int32 x = 1; }")
    v2 = proto("message A { int32 x = 1; } message B { int32 y = 1; }")
    v3 = proto("message A { int32 x = 1; string s = 2; }")  # drops B again
    problems = check(mode, v3, [v1, v2], can_read)
    # B's removal breaks BACKWARD against v2 only (v1 never had it); FORWARD sees B added: fine.
    assert bool(problems) == (mode.backward and mode is not Compatibility.NONE)
    if mode.backward:
        assert all("MESSAGE_REMOVED" in p for p in problems) and len(problems) == 1


PROTO2 = """syntax = "proto2";
package x.y;
option java_package = "com.x";
option optimize_for = SPEED;
message M {
  reserved 5, 8 to 10, 5000 to max;
  reserved "old";
  extensions 1000 to 2000;
  required string a = 1 [default = "h\\"i"];
  optional int32 b = 2 [default = 3, deprecated = true];
  repeated int32 c = 3 [packed = true];
  optional E e = 4 [default = Y];
  enum E { option allow_alias = true; X = 0; Y = 1; Z = 1; reserved 7 to 9; }
  message N { optional string q = 1 [json_name = "Qq"]; }
  optional N n = 6;
  oneof choice { string s = 11; int64 l = 12; }
}
extend M { optional int32 ext = 1000; }
service Svc { rpc Call(M) returns (stream M); }
"""


def test_proto2_features_print_and_compile_back_to_the_same_descriptor() -> None:
    schema = parse(PROTO2)
    for line in (
        "  reserved 5, 8 to 10, 5000 to max;",
        '  required string a = 1 [default = "h\\"i"];',
        "  optional int32 b = 2 [default = 3, deprecated = true];",
        '    optional string q = 1 [json_name = "Qq"];',
        "  rpc Call(.x.y.M) returns (stream .x.y.M);",
        "extend .x.y.M {",
    ):
        assert line in schema.canonical.splitlines(), line
    again = parse(schema.canonical)
    assert (again.canonical, again.file) == (schema.canonical, schema.file)
    with pytest.raises(RegistryError):
        parse('syntax = "proto2";\nmessage G { optional group Inner = 1 { optional int32 x = 2; } }')
