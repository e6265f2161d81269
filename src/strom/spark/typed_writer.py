"""Sink writers for typed (Avro, Protobuf, JSON Schema) key/value struct columns: encode each Arrow batch,
then produce as usual."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from strom.spark.options import SinkOptions
from strom.spark.typed_plan import TypedWrite
from strom.spark.writer import ProducedRecords, StromBatchWriter, StromStreamWriter


class TypedBatchWriter(StromBatchWriter):
    """`df.write.format("strom").option("valueFormat", ...)`."""

    def __init__(self, options: SinkOptions, typed: TypedWrite) -> None:
        super().__init__(options)
        self._typed = typed

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ProducedRecords:
        return super().write(self._typed.apply(iterator))


class TypedStreamWriter(StromStreamWriter):
    """`df.writeStream.format("strom").option("valueFormat", ...)`."""

    def __init__(self, options: SinkOptions, typed: TypedWrite) -> None:
        super().__init__(options)
        self._typed = typed

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ProducedRecords:
        return super().write(self._typed.apply(iterator))
