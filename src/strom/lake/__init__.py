"""Iceberg topics: a topic's committed records written into an Apache Iceberg table (docs/iceberg.md).

A topic whose ``strom.iceberg.mode`` is not ``disabled`` has a table ``strom.<topic>`` and a dead-letter
table ``strom.<topic>~dlq`` in the catalog the broker's ``strom.iceberg.*`` settings name. Each
partition's leader translates the records below its last stable offset (aborted transactions left out)
into rows and appends them, at most every ``strom.iceberg.target.lag.ms``, recording the partition's
next offset in the snapshot summary; a new leader, or the same broker after a crash, resumes from the
table, so every record lands exactly once.

This package is the part without the broker: `config_defs.py` (the broker settings and the catalog's
properties), `records.py` (committed records out of stored batches; pure), `columns.py` (the table
layouts), `avro_arrow.py`, `json_arrow.py` and `protobuf_arrow.py` (Avro, JSON and Protobuf schemas as
Arrow types; pure), `protobuf_wire.py` (Protobuf values of Confluent's wire format read into rows,
shared with strom.spark; pure),
`translate.py` (records to rows per mode, the dead letters and their reasons; pure), `offsets.py` (the
next offsets a table records; pure), `tables.py` (pyiceberg: the catalog, schema evolution, the
exactly-once commit, the tables' lifecycle), `compaction.py` (which files to rewrite, which snapshots
to expire; pure), `maintenance.py` (pyiceberg: compaction and expiry) and `history.py` (reading a
pinned snapshot's rows for a range of offsets, for strom.spark). Everything in `tables.py`,
`maintenance.py` and `history.py` blocks: the broker runs it on worker threads (strom.broker.lake),
never on its event loop.
Only this package imports pyiceberg.
"""
