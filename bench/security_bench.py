"""Security's cost: 10 KB produce and consume over PLAINTEXT, SSL and SASL_SSL in the same run, and
the SASL login rate. Run by hand; never part of the test suite.

One broker (a fresh data dir) listens on all three listeners at once; each round runs librdkafka's
`rdkafka_performance` (`--tool`, see bench/c_bench.py for building it) against each listener in turn,
in a rotating order (the only fair comparison on a shared machine): produce `--count` 10 KB messages
with acks=1 to a 6-partition topic of its own, then consume them from the beginning, then delete the
topic (so that every case writes into page cache freed by the one before, not into memory the
machine touches for the first time, which costs a virtual machine far more). Each row reports the
tool's MB/s, the broker's CPU seconds per GB (utime + stime from /proc) and the tool's own (the
client's share of the same cores). SASL_SSL logs in with SCRAM-SHA-256. The last table gives medians
and each protocol's share of PLAINTEXT's throughput in the same variant.

Variants (`--src NAME=DIR`, a `src` directory holding the `strom` package; default: this checkout's)
each get a broker of their own, all started at once; every round runs them in alternating order
(A B, B A, ...), so that a change and its baseline are measured in the same minutes.

Login rate: `--logins` sequential connections to the SASL_PLAINTEXT listener, each doing SaslHandshake
+ SaslAuthenticate with PLAIN and with SCRAM-SHA-256 (4096 iterations: the client's PBKDF2 is part of
the cost, as it is for every real client) and closing; logins per second, and the broker's CPU per
login.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from c_bench import PARTITIONS, _run_tool
from tests.integration.certs import make_pki

from strom.broker.security.client import ClientSecurity
from strom.broker.security.scram import make_credential
from strom.protocol.codec import decode_response, encode_request
from strom.testing import BrokerProcess

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="bench" password="bench-secret" user_bench="bench-secret";'
)
SIZE = 10_240


def _security(protocol: str, ca: Path) -> list[str]:
    settings = {"security.protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        settings["ssl.ca.location"] = str(ca)
    if protocol.startswith("SASL"):
        settings |= {
            "sasl.mechanisms": "SCRAM-SHA-256",
            "sasl.username": "bench",
            "sasl.password": "bench-secret",
        }
    return [arg for key, value in settings.items() for arg in ("-X", f"{key}={value}")]


def _create_user(bootstrap: str) -> None:
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    upsert = UserScramCredentialUpsertion(
        "bench", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"bench-secret"
    )
    admin.alter_user_scram_credentials([upsert])["bench"].result(30)


def _create_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)


def _delete_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([name])[name].result(30)


def throughput(
    tool: str, broker: BrokerProcess, protocol: str, ca: Path, count: int, rnd: int
) -> list[dict[str, Any]]:
    topic = f"sec-{protocol.lower()}-{rnd}"
    _create_topic(broker.bootstrap, topic)
    base = [
        tool,
        "-t",
        topic,
        "-b",
        broker.listeners[protocol],
        "-u",
        "-c",
        str(count),
        *_security(protocol, ca),
    ]
    produce = [*base, "-P", "-s", str(SIZE), "-a", "1", "-X", "linger.ms=5"]
    consume = [*base, "-C", "-o", "beginning", *[a for p in range(PARTITIONS) for a in ("-p", str(p))]]
    rows = []
    for mode, cmd in (("produce", produce), ("consume", consume)):
        row, (user, system), tool_cpu, _wall = _run_tool(cmd, broker, timeout_s=600)
        msgs = row["dr"] if mode == "produce" else row["msgs"]
        nbytes = msgs * SIZE
        rows.append(
            {
                "case": f"{mode} 10 KB {protocol}",
                "mb_per_s": nbytes / (row["elapsed"] / 1000) / 1e6,
                "cpu_s_per_gb": (user + system) / (nbytes / 1e9),
                "tool_cpu_s_per_gb": tool_cpu / (nbytes / 1e9),
            }
        )
    _delete_topic(broker.bootstrap, topic)
    return rows


async def _login(host: str, port: int, security: ClientSecurity) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    correlation = 0

    async def exchange(key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        nonlocal correlation
        correlation += 1
        writer.write(encode_request(key, version, correlation, "bench", body))
        size = int.from_bytes(await reader.readexactly(4), "big")
        _cid, answer = decode_response(key, version, await reader.readexactly(size))
        return answer

    try:
        await security.authenticate(exchange)
    finally:
        writer.close()


def login_rate(broker: BrokerProcess, mechanism: str, logins: int) -> dict[str, Any]:
    host, port = broker.listeners["SASL_PLAINTEXT"].rsplit(":", 1)
    security = ClientSecurity(None, mechanism, "bench", "bench-secret")
    user0, sys0 = broker.cpu_times()
    start = time.perf_counter()

    async def run() -> None:
        for _ in range(logins):
            await _login(host, int(port), security)

    asyncio.run(run())
    wall = time.perf_counter() - start
    user1, sys1 = broker.cpu_times()
    return {
        "case": f"login {mechanism}",
        "logins_per_s": logins / wall,
        "broker_ms_per_login": (user1 - user0 + sys1 - sys0) * 1000 / logins,
    }


def _start_broker(work: Path, src: str, overrides: dict[str, str]) -> BrokerProcess:
    env_before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = src  # the broker child inherits it
    try:
        broker = BrokerProcess(work, overrides)
        broker.start()
    finally:
        if env_before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = env_before
    return broker


def _print_tables(rows: list[dict[str, Any]]) -> None:
    print("\n| case | variant | MB/s (median) | vs PLAINTEXT | broker CPU s/GB | client CPU s/GB |")
    print("|---|---|---|---|---|---|")
    medians: dict[tuple[str, str], dict[str, float]] = {}
    for key in dict.fromkeys((r["case"], r["variant"]) for r in rows if "mb_per_s" in r):
        picked = [r for r in rows if (r["case"], r["variant"]) == key]
        fields = ("mb_per_s", "cpu_s_per_gb", "tool_cpu_s_per_gb")
        medians[key] = {k: statistics.median(r[k] for r in picked) for k in fields}
    for (case, variant), m in sorted(medians.items(), key=lambda item: (item[0][0].split()[0], item[0])):
        base = medians[(f"{case.split()[0]} 10 KB PLAINTEXT", variant)]["mb_per_s"]
        print(
            f"| {case} | {variant} | {m['mb_per_s']:.0f} | {100 * m['mb_per_s'] / base:.0f} % "
            f"| {m['cpu_s_per_gb']:.2f} | {m['tool_cpu_s_per_gb']:.2f} |"
        )
    print("\n| login | variant | logins/s (median) | broker ms per login |")
    print("|---|---|---|---|")
    for key in dict.fromkeys((r["case"], r["variant"]) for r in rows if "logins_per_s" in r):
        picked = [r for r in rows if (r["case"], r["variant"]) == key]
        rate = statistics.median(r["logins_per_s"] for r in picked)
        cost = statistics.median(r["broker_ms_per_login"] for r in picked)
        print(f"| {key[0]} | {key[1]} | {rate:.0f} | {cost:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tool", required=True, help="path of rdkafka_performance")
    parser.add_argument("--count", type=int, default=100_000, help="10 KB messages per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--logins", type=int, default=300)
    parser.add_argument(
        "--src",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="a broker variant: a src directory holding the strom package (repeatable)",
    )
    args = parser.parse_args()
    variants = dict(v.split("=", 1) for v in args.src) or {
        "this": str(Path(__file__).resolve().parents[1] / "src")
    }
    make_credential("SCRAM-SHA-256", "warm-up")
    work = Path(tempfile.mkdtemp(prefix="security-bench-"))
    pki = make_pki(work / "pki")
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.location": str(pki.broker),
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "connection.failed.authentication.delay.ms": "0",
    }
    print(f"load average at start: {os.getloadavg()}", flush=True)
    brokers: dict[str, BrokerProcess] = {}
    rows: list[dict[str, Any]] = []
    try:
        for name, src in variants.items():
            brokers[name] = _start_broker(work / f"broker-{name}", src, overrides)
            _create_user(brokers[name].bootstrap)
        protocols = ["PLAINTEXT", "SSL", "SASL_SSL"]
        names = list(brokers)
        for rnd in range(args.rounds):
            order = protocols[rnd % 3 :] + protocols[: rnd % 3]
            for protocol in order:
                for name in names if rnd % 2 == 0 else names[::-1]:
                    for row in throughput(args.tool, brokers[name], protocol, pki.ca, args.count, rnd):
                        row["variant"] = name
                        print(row, flush=True)
                        rows.append(row)
            for name in names:
                for mechanism in ("PLAIN", "SCRAM-SHA-256"):
                    row = login_rate(brokers[name], mechanism, args.logins)
                    row["variant"] = name
                    print(row, flush=True)
                    rows.append(row)
    finally:
        for broker in brokers.values():
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"load average at end: {os.getloadavg()}")
    _print_tables(rows)


if __name__ == "__main__":
    main()
