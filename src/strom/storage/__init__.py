"""strom.storage: each partition's durable log (segments, indexes, checkpoints, snapshots, cleaner).

Synchronous and loop-agnostic; the broker decides where fsync runs. log.py is the entry point
(`PartitionLog`), log_manager.py owns every log of a broker.

Durability (Kafka's default trade-off): appends land in the OS page cache and are acknowledged
without fsync. That survives a killed broker process (the kernel still has the pages) but not a power
loss or kernel crash; Kafka relies on replication instead. A log fsyncs when a segment rolls, on
`flush`/`close`, and when ``flush.messages`` or ``flush.ms`` are set below their "never" defaults
(``flush.messages=1`` fsyncs every append: durable on one machine, but every produce then waits for
the disk). A clean shutdown makes every log durable with one ``syncfs`` per file system instead of
fsyncs per log (shutdown.py). After an unclean stop, recovery re-validates everything above the
recovery point.

Write failures, and why a single log dir stays online for a refused write. When a write fails (ENOSPC
on a full disk, or any other OSError), Kafka's ``LogDirFailureChannel`` marks the whole log directory
offline: every partition in it stops serving until the broker restarts. Strom does the same with
several log dirs (log_dirs.py); with a single one it makes each append all or nothing and keeps
serving:

* a partial batch is cut off the segment (``ftruncate`` back to the previous size) and half-written
  index entries are cut off their file, so no partial record ever sits inside the log;
* if the batches were written but a later step of the append failed (the leader-epoch checkpoint),
  the log is truncated back to the offset it had before, with its indexes, epochs and producer state
  (nothing of the append is acknowledged);
* the append answers KAFKA_STORAGE_ERROR, reads go on, and the next append is simply tried again,
  so the partition takes writes as soon as space returns, without a restart.

The reason: a single node (Strom's embedded mode, and any partition whose other replicas are gone)
has no replica to fail over to, so "offline until restart" means "down until someone restarts it",
while a full disk is the common case and usually transient (retention frees space, an operator
deletes files). A failed **sync** is different: the kernel may have marked the pages of earlier,
acknowledged appends clean though they never reached the disk, and a later fsync would report
success for them, so no sync is retried: with no other log dir online the broker halts and its
restart recovers from the recovery point (log_dirs.py), as Kafka's does.
"""
