"""Object storage: the port tiered storage writes remote log segments through, and its backends.

`store.py` is the port (`ObjectStore`: put, ranged get, delete, list) and its errors; `local.py` keeps
objects as files under a directory (the embedded default, ``rsm.config.storage.root``); `s3.py` talks
to any S3-compatible server through botocore (the only importer of boto3/botocore in Strom);
`config.py` chooses and builds a backend from the ``rsm.config.*`` settings. Both backends run their
blocking calls on threads of their own, so that the event loop never waits for a disk or a network.
"""
