"""Tiered storage (KIP-405): a partition's log continued in object storage.

`segment_metadata.py` is a remote segment's metadata and its life (Kafka's ``RemoteLogSegmentMetadata``
and ``RemoteLogSegmentState``) with their record layout in ``__remote_log_metadata``;
`metadata_cache.py` is what a broker knows of one partition's remote segments, replayed from those
records; `plan.py` holds the pure decisions (which segments to copy, which local segments local
retention may delete, which remote segments total retention deletes); `remote_storage.py` is Kafka's
``RemoteStorageManager`` over the `strom.objectstore` port: a segment's files as objects, ranged
reads of them, their deletion. The broker's ``RemoteLogManager`` drives them.
"""
