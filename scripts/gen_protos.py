"""Regenerate the Python code of the wire contract from proto/.

Run ``python scripts/gen_protos.py`` after editing a .proto file. The code
generators are pinned in pyproject's ``codegen`` extra so that the output is
byte-for-byte reproducible; CI regenerates and fails on any difference.
Output goes beside the protos (proto/memevo/v1), which is the Python package
``memevo.v1``: proto path and import path agree, so nothing is rewritten.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PACKAGE_DIR = PROTO_ROOT / "memevo" / "v1"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")


def main() -> int:
    """Delete the old generated files and run protoc once over every proto."""
    for path in PACKAGE_DIR.iterdir():
        if path.name.endswith(GENERATED_SUFFIXES):
            path.unlink()
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PACKAGE_DIR.glob("*.proto"))
    mypy_plugin = shutil.which("protoc-gen-mypy")
    mypy_grpc_plugin = shutil.which("protoc-gen-mypy_grpc")
    if mypy_plugin is None or mypy_grpc_plugin is None:
        print("mypy-protobuf is missing: pip install -e '.[test]'", file=sys.stderr)
        return 1
    protoc = [sys.executable, "-m", "grpc_tools.protoc", f"--proto_path={PROTO_ROOT}"]
    messages = [
        *protoc,
        f"--python_out={PROTO_ROOT}",
        f"--plugin=protoc-gen-mypy={mypy_plugin}",
        f"--mypy_out={PROTO_ROOT}",
        *protos,
    ]
    # Only files that declare a service get gRPC stubs; the others would be empty modules.
    services = [p for p in protos if "\nservice " in (PROTO_ROOT / p).read_text()]
    stubs = [
        *protoc,
        f"--grpc_python_out={PROTO_ROOT}",
        f"--plugin=protoc-gen-mypy_grpc={mypy_grpc_plugin}",
        f"--mypy_grpc_out={PROTO_ROOT}",
        *services,
    ]
    for command in (messages, stubs):
        result = subprocess.run(command, cwd=PROTO_ROOT, check=False)
        if result.returncode != 0:
            return result.returncode
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
