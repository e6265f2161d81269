"""Sink writers for Avro key/value struct columns: encode each Arrow batch, then produce as usual."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from strom.spark.avro_plan import AvroWrite
from strom.spark.options import SinkOptions
from strom.spark.writer import ProducedRecords, StromBatchWriter, StromStreamWriter


class AvroBatchWriter(StromBatchWriter):
    """`df.write.format("strom").option("valueFormat", "avro")`."""

    def __init__(self, options: SinkOptions, avro: AvroWrite) -> None:
        super().__init__(options)
        self._avro = avro

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ProducedRecords:
        return super().write(self._avro.apply(iterator))


class AvroStreamWriter(StromStreamWriter):
    """`df.writeStream.format("strom").option("valueFormat", "avro")`."""

    def __init__(self, options: SinkOptions, avro: AvroWrite) -> None:
        super().__init__(options)
        self._avro = avro

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ProducedRecords:
        return super().write(self._avro.apply(iterator))
