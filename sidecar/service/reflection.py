"""Server reflection that also resolves method and field names (what ``grpcurl describe Service.Method`` asks).

grpcio-reflection answers ``file_containing_symbol`` from a descriptor pool. The default pool of the C-backed
protobuf runtime finds services, messages and enums by name but not the methods of a service nor the fields of a
message, so ``grpcurl describe memevo.v1.MemoryService.Recall`` and ghz by reflection failed with "Symbol not
found". The pool below looks such a name up through its parent.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pool
from google.protobuf.descriptor import FileDescriptor


class MemberAwarePool:
    """A descriptor pool whose ``FindFileContainingSymbol`` also finds service methods, message fields and enum
    values; every other lookup goes to the wrapped pool."""

    def __init__(self, pool: descriptor_pool.DescriptorPool | None = None) -> None:
        self._pool = pool or descriptor_pool.Default()

    def FindFileContainingSymbol(self, symbol: str) -> FileDescriptor:  # noqa: N802 - the pool's own method name
        try:
            return self._pool.FindFileContainingSymbol(symbol)
        except KeyError:
            parent, _, member = symbol.rpartition(".")
            if not parent:
                raise
            for find, members in (
                (self._pool.FindServiceByName, "methods_by_name"),
                (self._pool.FindMessageTypeByName, "fields_by_name"),
                (self._pool.FindEnumTypeByName, "values_by_name"),
            ):
                try:
                    found = find(parent)
                except KeyError:
                    continue
                if member in getattr(found, members):
                    file: FileDescriptor = found.file
                    return file
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)
