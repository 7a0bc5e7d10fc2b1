"""Generate the API reference, docs/api.md, from the comments in proto/memevo/v1/*.proto.

Run ``python scripts/gen_docs.py`` (or ``scripts/gen_clients.sh``, which also regenerates the
client stubs) after editing a .proto file. protoc (grpcio-tools, pinned in pyproject's ``test``
extra) parses the protos with their source comments into a descriptor set; this script renders
it as Markdown: the service and its RPCs, then every message and enum with each field's type and
comment. The output depends only on the protos, so CI regenerates it and fails on any difference.
``--check`` exits 1 instead of writing when docs/api.md is out of date.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import descriptor_pb2

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PACKAGE = "memevo.v1"
PACKAGE_DIR = PROTO_ROOT / "memevo" / "v1"
OUTPUT = ROOT / "docs" / "api.md"
GENERATED_NOTE = (
    "<!-- Generated from proto/memevo/v1/*.proto by scripts/gen_docs.py (run scripts/gen_clients.sh). Do not edit. -->"
)


def _well_known_root() -> Path:
    """Where grpcio-tools keeps the well-known types (google/protobuf/timestamp.proto)."""
    spec = importlib.util.find_spec("grpc_tools")
    if spec is None or spec.origin is None:
        raise SystemExit("grpcio-tools is missing: pip install -e '.[test]'")
    return Path(spec.origin).resolve().parent / "_proto"


# Field numbers inside FileDescriptorProto / DescriptorProto / ... that SourceCodeInfo paths use.
FILE_MESSAGE, FILE_ENUM, FILE_SERVICE = 4, 5, 6
MESSAGE_FIELD, MESSAGE_NESTED, MESSAGE_ENUM = 2, 3, 4
ENUM_VALUE = 2
SERVICE_METHOD = 2

F = descriptor_pb2.FieldDescriptorProto
SCALAR_NAMES = {
    F.TYPE_DOUBLE: "double",
    F.TYPE_FLOAT: "float",
    F.TYPE_INT64: "int64",
    F.TYPE_UINT64: "uint64",
    F.TYPE_INT32: "int32",
    F.TYPE_FIXED64: "fixed64",
    F.TYPE_FIXED32: "fixed32",
    F.TYPE_BOOL: "bool",
    F.TYPE_STRING: "string",
    F.TYPE_BYTES: "bytes",
    F.TYPE_UINT32: "uint32",
    F.TYPE_SFIXED32: "sfixed32",
    F.TYPE_SFIXED64: "sfixed64",
    F.TYPE_SINT32: "sint32",
    F.TYPE_SINT64: "sint64",
}


@dataclass(frozen=True)
class Comments:
    """The comments protoc attached to one element."""

    leading: str
    trailing: str

    def text(self) -> str:
        """Leading and trailing comment as one block of lines, trimmed."""
        parts = [_dedent(c) for c in (self.leading, self.trailing) if c.strip()]
        return "\n".join(parts)

    def one_line(self) -> str:
        """The comment for a table cell: one line, pipes escaped."""
        return " ".join(line.strip() for line in self.text().splitlines() if line.strip()).replace("|", "\\|")


def _dedent(comment: str) -> str:
    lines = [line[1:] if line.startswith(" ") else line for line in comment.strip("\n").splitlines()]
    return "\n".join(lines).strip()


def descriptor_set() -> descriptor_pb2.FileDescriptorSet:
    """Parse every proto of the package, with source comments, into a FileDescriptorSet."""
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PACKAGE_DIR.glob("*.proto"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "api.binpb"
        command = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"--proto_path={PROTO_ROOT}",
            f"--proto_path={_well_known_root()}",
            "--include_source_info",
            f"--descriptor_set_out={out}",
            *protos,
        ]
        subprocess.run(command, check=True, cwd=PROTO_ROOT)
        return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


class File:
    """One .proto file with its comments indexed by source path."""

    def __init__(self, proto: descriptor_pb2.FileDescriptorProto) -> None:
        self.proto = proto
        self.comments: dict[tuple[int, ...], Comments] = {
            tuple(loc.path): Comments(loc.leading_comments, loc.trailing_comments)
            for loc in proto.source_code_info.location
        }

    def at(self, *path: int) -> Comments:
        return self.comments.get(tuple(path), Comments("", ""))


def anchor(name: str) -> str:
    """The GitHub anchor of a `### name` heading."""
    return "#" + name.lower()


def short(type_name: str) -> str:
    """`.memevo.v1.Memory` -> `Memory`; other packages keep their full name."""
    name = type_name.lstrip(".")
    prefix = PACKAGE + "."
    return name[len(prefix) :] if name.startswith(prefix) else name


def type_link(type_name: str) -> str:
    name = short(type_name)
    if type_name.lstrip(".").startswith(PACKAGE + "."):
        return f"[{name}]({anchor(name.replace('.', ''))})"
    return f"`{name}`"


def field_type(field: descriptor_pb2.FieldDescriptorProto, maps: dict[str, descriptor_pb2.DescriptorProto]) -> str:
    if field.type in (F.TYPE_MESSAGE, F.TYPE_ENUM):
        entry = maps.get(field.type_name)
        if entry is not None:
            key, value = entry.field[0], entry.field[1]
            return f"map<{field_type(key, maps)}, {field_type(value, maps)}>"
        return type_link(field.type_name)
    return f"`{SCALAR_NAMES[field.type]}`"


def field_label(field: descriptor_pb2.FieldDescriptorProto, message: descriptor_pb2.DescriptorProto) -> str:
    if field.proto3_optional:
        return "optional"
    if field.label == F.LABEL_REPEATED:
        return "repeated"
    if field.HasField("oneof_index"):
        return f"oneof `{message.oneof_decl[field.oneof_index].name}`"
    return ""


def method_cell(method: descriptor_pb2.MethodDescriptorProto, which: str) -> str:
    if which == "input":
        streaming, type_name = method.client_streaming, method.input_type
    else:
        streaming, type_name = method.server_streaming, method.output_type
    link = type_link(type_name)
    return f"stream {link}" if streaming else link


def map_entries(files: list[File]) -> dict[str, descriptor_pb2.DescriptorProto]:
    """Every synthetic map-entry message by its full type name (rendered as map<K, V>)."""
    out: dict[str, descriptor_pb2.DescriptorProto] = {}

    def walk(prefix: str, messages: Iterator[descriptor_pb2.DescriptorProto]) -> None:
        for message in messages:
            name = f"{prefix}.{message.name}"
            if message.options.map_entry:
                out[name] = message
            walk(name, iter(message.nested_type))

    for f in files:
        walk("." + f.proto.package, iter(f.proto.message_type))
    return out


def render(files: list[File]) -> str:
    maps = map_entries(files)
    lines: list[str] = [
        "# memevo.v1 API reference",
        "",
        GENERATED_NOTE,
        "",
        "The wire contract of the memevo sidecar: one gRPC service, `memevo.v1.MemoryService`, plus the",
        "standard `grpc.health.v1.Health` service and server reflection. Vectors travel as packed",
        "little-endian float32 `bytes`; every timestamp says whether it is world time (when it was true)",
        "or system time (when the sidecar learned it). Field comments give each field's unit and default.",
        "",
    ]
    # Contents.
    lines.append("## Contents")
    lines.append("")
    for f in files:
        for service in f.proto.service:
            lines.append(f"- [{service.name}]({anchor(service.name)}) (service)")
    for f in files:
        entries = [m.name for m in f.proto.message_type] + [e.name for e in f.proto.enum_type]
        if entries:
            lines.append(f"- `{f.proto.name}`: " + ", ".join(f"[{n}]({anchor(n)})" for n in entries))
    lines.append("")

    for f in files:
        for s_index, service in enumerate(f.proto.service):
            lines += [f"## {service.name}", ""]
            about = f.at(FILE_SERVICE, s_index).text()
            if about:
                lines += [about, ""]
            lines += ["| RPC | Request | Response | Description |", "|---|---|---|---|"]
            for m_index, method in enumerate(service.method):
                comment = f.at(FILE_SERVICE, s_index, SERVICE_METHOD, m_index).one_line()
                request, response = method_cell(method, "input"), method_cell(method, "output")
                lines.append(f"| `{method.name}` | {request} | {response} | {comment} |")
            lines.append("")

    for f in files:
        if not f.proto.message_type and not f.proto.enum_type:
            continue
        lines += [f"## {f.proto.name}", ""]
        for e_index, enum in enumerate(f.proto.enum_type):
            lines += render_enum(f, enum, (FILE_ENUM, e_index))
        for m_index, message in enumerate(f.proto.message_type):
            lines += render_message(f, message, (FILE_MESSAGE, m_index), maps, message.name)
    return "\n".join(lines).rstrip() + "\n"


def render_enum(f: File, enum: descriptor_pb2.EnumDescriptorProto, path: tuple[int, ...]) -> list[str]:
    lines = [f"### {enum.name}", ""]
    about = f.at(*path).text()
    if about:
        lines += [about, ""]
    lines += ["| Value | Number | Description |", "|---|---|---|"]
    for v_index, value in enumerate(enum.value):
        lines.append(f"| `{value.name}` | {value.number} | {f.at(*path, ENUM_VALUE, v_index).one_line()} |")
    return [*lines, ""]


def render_message(
    f: File,
    message: descriptor_pb2.DescriptorProto,
    path: tuple[int, ...],
    maps: dict[str, descriptor_pb2.DescriptorProto],
    title: str,
) -> list[str]:
    if message.options.map_entry:
        return []
    lines = [f"### {title}", ""]
    about = f.at(*path).text()
    if about:
        lines += [about, ""]
    if message.field:
        lines += ["| Field | Type | Label | Description |", "|---|---|---|---|"]
        for index, field in enumerate(message.field):
            comment = f.at(*path, MESSAGE_FIELD, index).one_line()
            label = "" if field.type_name in maps else field_label(field, message)
            lines.append(f"| `{field.name}` | {field_type(field, maps)} | {label} | {comment} |")
    else:
        lines.append("No fields.")
    lines.append("")
    for n_index, nested in enumerate(message.nested_type):
        lines += render_message(f, nested, (*path, MESSAGE_NESTED, n_index), maps, f"{title}.{nested.name}")
    for e_index, enum in enumerate(message.enum_type):
        lines += render_enum(f, enum, (*path, MESSAGE_ENUM, e_index))
    return lines


def ordered(files: list[File]) -> list[File]:
    """The service's file first, then the others by name."""
    return sorted(files, key=lambda f: (not f.proto.service, f.proto.name))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/api.md is out of date; write nothing")
    args = parser.parse_args()
    files = ordered([File(p) for p in descriptor_set().file if p.package == PACKAGE])
    text = render(files)
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT.relative_to(ROOT)} is out of date: run python scripts/gen_docs.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
