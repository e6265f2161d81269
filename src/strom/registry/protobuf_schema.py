"""Protobuf schemas for the registry: compiling, the stored (canonical) text, the serialized form.

**Input.** A schema is ``.proto`` source, or — as confluent-kafka's ``ProtobufSerializer`` sends it —
the base64 of a serialized ``FileProto``; the latter is first printed as source (`print_file`).
Its ``references`` are the files it imports, by the reference's name (``import "address.proto";`` with
a reference named ``address.proto``); Google's well-known types (``google/protobuf/*.proto``) are
always importable without a reference, as confluent-kafka's clients expect.

**Compiling.** protoc itself checks the schema: grpcio-tools ships it with a Python entry point,
``grpc_tools._protoc_compiler.get_protos``, which compiles a file from a source tree on disk and
answers with the generated Python modules (one per file, dependencies included), or with protoc's
errors (file, line, column, message) which become the 42201 answer. The source tree is a private
temporary directory holding the schema and its references under their names; each generated module
embeds its file's serialized ``FileProto``, which is read back out of the module's syntax
tree (never executed). So a stored schema is exactly what protoc accepts: names resolved, field
numbers unique and in range, types defined, proto2 / proto3 rules kept.

**Canonical text** (`print_file`): the compiled descriptor printed back as ``.proto`` source in one
fixed layout — ``syntax``, ``package``, imports, file options, then messages (options, reserved
ranges and names, fields in declaration order with each ``oneof`` at its first member, nested types),
enums, services and extensions; type names fully qualified (``.pkg.Msg``), maps as ``map<K, V>``,
proto3 ``optional`` as written. Printing and compiling again gives the same descriptor, so the
text a registration stores compiles back to the descriptor served with ``format=serialized``.
Custom options (extensions of ``google.protobuf.*Options``) are not printed (they are dropped);
proto2 groups and editions files are refused.
"""

from __future__ import annotations

import ast
import base64
import binascii
import os
import re
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc_tools
from google.protobuf.descriptor_pb2 import FileDescriptorProto as FileProto
from google.protobuf.message import DecodeError
from grpc_tools import _protoc_compiler

from strom.registry.errors import invalid_schema
from strom.registry.protobuf_print import print_file

_WELL_KNOWN = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]+")
MAIN_FILE = "schema.proto"


@dataclass(frozen=True, slots=True)
class ProtobufSchema:
    """A compiled schema: its canonical text, its descriptor and every file it depends on (by name)."""

    canonical: str
    file: FileProto
    dependencies: dict[str, FileProto] = field(default_factory=dict)

    def serialized(self) -> str:
        """The base64 ``FileProto`` (``format=serialized``, what confluent-kafka reads)."""
        return base64.standard_b64encode(self.file.SerializeToString()).decode("ascii")


def parse(text: str, references: Sequence[tuple[str, str]] = ()) -> ProtobufSchema:
    """Compile ``text`` (source or base64 descriptor) with its references, (name, text) pairs.

    Raises:
        RegistryError: 42201 with protoc's messages when it does not compile.
    """
    descriptor = _as_descriptor(text)
    if descriptor is not None:
        text = print_file(descriptor)
    compiled = compile_files(text, references)
    main = compiled.pop(_main_name(references))
    return ProtobufSchema(print_file(main), main, compiled)


def _as_descriptor(text: str) -> FileProto | None:
    """The descriptor a base64 text holds, or None when the text is not one (then it is source)."""
    stripped = text.strip()
    if ";" in stripped or not _BASE64.fullmatch(stripped):
        return None
    try:
        proto = FileProto.FromString(base64.b64decode(stripped, validate=False))
    except (binascii.Error, DecodeError, ValueError):
        return None
    return proto if proto.message_type or proto.enum_type or proto.service or proto.package else None


def _main_name(references: Sequence[tuple[str, str]]) -> str:
    names = {name for name, _ in references}
    name = MAIN_FILE
    while name in names:
        name = "_" + name
    return name


def compile_files(text: str, references: Sequence[tuple[str, str]]) -> dict[str, FileProto]:
    """protoc's descriptors of the schema (under `_main_name`) and of every file it imports."""
    main = _main_name(references)
    with tempfile.TemporaryDirectory(prefix="strom-proto-") as tree:
        root = Path(tree)
        for name, ref_text in [*references, (main, text)]:
            path = (root / name).resolve()
            if name.startswith("/") or not path.is_relative_to(root.resolve()):
                raise invalid_schema(f"reference name {name!r} is not a relative file name")
            path.parent.mkdir(parents=True, exist_ok=True)
            source = ref_text if _as_descriptor(ref_text) is None else print_file(_as_descriptor(ref_text))
            path.write_text(source, encoding="utf-8")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # protoc's warnings (an unused import...) do not refuse
                modules = _protoc_compiler.get_protos(main.encode(), [tree.encode(), _WELL_KNOWN.encode()])
        except _protoc_compiler.ProtocErrors as exc:
            found = [
                f"{e.filename.decode(errors='replace')}:{e.line + 1}:{e.column + 1}: "
                f"{e.message.decode(errors='replace')}"
                for e in exc.errors()
            ]
            raise invalid_schema("; ".join(found) or "protoc refused the schema") from None
    files: dict[str, FileProto] = {}
    for _, code in modules:
        proto = _descriptor_of(code)
        files[proto.name] = proto
    if main not in files:
        raise invalid_schema("protoc gave no descriptor for the schema")
    return files


def _descriptor_of(code: bytes) -> FileProto:
    """The ``FileProto`` a generated module passes to ``AddSerializedFile``."""
    for node in ast.walk(ast.parse(code)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "AddSerializedFile"
            and node.args
        ):
            value = ast.literal_eval(node.args[0])
            if isinstance(value, bytes):
                return FileProto.FromString(value)
    raise invalid_schema("protoc's output holds no descriptor")
