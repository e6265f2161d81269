"""The schema registry in a 3-broker cluster: every broker serves reads, writes go to one writer (the
leader of ``_schemas``-0), and after that writer is killed with SIGKILL the new one continues the ids
without giving any id twice. ``_schemas`` has 2 replicas (offsets.topic.replication.factor=2), so one
broker holds none and follows the topic by fetching it from the leader."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from strom.testing.cluster import LocalCluster
from tests.cluster.conftest import partitions_of, wait_until
from tests.integration.registry_http import call


def schema(i: int) -> str:
    return json.dumps({"type": "record", "name": f"R{i}", "fields": [{"name": f"f{i}", "type": "int"}]})


def register(url: str, subject: str, text: str) -> int | None:
    status, _, body = call(url, "POST", f"/subjects/{subject}/versions", {"schema": text})
    return int(body["id"]) if status == 200 else None


def registered_everywhere(urls: list[str], ids: dict[int, str]) -> bool:
    for url in urls:
        for schema_id, text in ids.items():
            status, _, body = call(url, "GET", f"/schemas/ids/{schema_id}")
            if status != 200 or body["schema"] != text:
                return False
    return True


def everything(url: str) -> dict[tuple[str, int], tuple[int, str]]:
    out: dict[tuple[str, int], tuple[int, str]] = {}
    for subject in call(url, "GET", "/subjects")[2]:
        for version in call(url, "GET", f"/subjects/{subject}/versions")[2]:
            body: Any = call(url, "GET", f"/subjects/{subject}/versions/{version}")[2]
            out[(subject, version)] = (body["id"], body["schema"])
    return out


def test_register_on_one_read_on_others_kill_the_writer_ids_continue(make_cluster: Any) -> None:
    cluster: LocalCluster = make_cluster(3, offsets_topic_replication_factor="2")
    urls = {i: b.http_url for i, b in cluster.brokers.items()}
    assert all(urls.values())
    given: dict[int, str] = {}  # id -> canonical schema text, as first answered

    for i in range(4):  # through every broker in turn: most of them forward to the writer
        url = str(urls[i % 3])
        schema_id = wait_until(lambda url=url, i=i: register(url, f"s{i}", schema(i)), what=f"register s{i}")
        assert isinstance(schema_id, int)
        given[schema_id] = str(call(url, "GET", f"/subjects/s{i}/versions/1")[2]["schema"])
    assert sorted(given) == [1, 2, 3, 4]
    wait_until(
        lambda: registered_everywhere([str(u) for u in urls.values()], given), what="reads on every broker"
    )

    leader, replicas, _ = partitions_of(cluster.bootstrap, "_schemas")[0]
    assert leader in cluster.brokers and len(replicas) == 2
    cluster.brokers[leader].kill()
    survivors = [str(urls[i]) for i in cluster.brokers if i != leader]
    for i in range(4, 7):
        url = survivors[i % 2]
        schema_id = wait_until(
            lambda url=url, i=i: register(url, f"s{i}", schema(i)),
            timeout_s=60,
            what=f"register s{i} after the kill",
        )
        assert isinstance(schema_id, int)
        assert schema_id not in given, f"id {schema_id} given twice"
        given[schema_id] = str(call(url, "GET", f"/subjects/s{i}/versions/1")[2]["schema"])
    assert sorted(given) == list(range(1, 8)), "ids continue after the failover"
    # Registering a known schema again anywhere answers its id, never a new one.
    assert register(survivors[0], "s0", schema(0)) == 1

    cluster.brokers[leader].start()  # the old writer comes back as a follower and catches up
    all_urls = [str(u) for u in urls.values()]
    wait_until(
        lambda: registered_everywhere(all_urls, given), timeout_s=60, what="the restarted broker's reads"
    )
    views = [everything(u) for u in all_urls]
    assert views[0] == views[1] == views[2]
    assert {schema_id for schema_id, _ in views[0].values()} == set(given)


def test_registrations_racing_a_writer_kill_never_share_an_id(make_cluster: Any) -> None:
    """Three clients register distinct schemas through the two brokers that stay up while the writer
    is killed with SIGKILL; every acknowledged registration keeps its id, and no id names two schemas."""
    cluster: LocalCluster = make_cluster(3)
    urls = {i: str(b.http_url) for i, b in cluster.brokers.items()}
    assert register(urls[0], "warmup", schema(1000)) == 1
    leader = partitions_of(cluster.bootstrap, "_schemas")[0][0]
    survivors = [u for i, u in urls.items() if i != leader]
    acknowledged: dict[str, tuple[int, str]] = {}  # subject -> (id, schema text)
    acknowledged_at: list[float] = []
    lock = threading.Lock()
    stop = time.monotonic() + 12

    def client(slot: int) -> None:
        n = 0
        while time.monotonic() < stop:
            # Distinct schemas per registration (an identical schema under another subject shares its id).
            subject, text = f"race-{slot}-{n}", schema(1_000_000 * (slot + 1) + n)
            url = survivors[n % 2]
            try:
                schema_id = register(url, subject, text)
            except OSError:
                schema_id = None
            if schema_id is None:
                time.sleep(0.1)
                continue  # not acknowledged: try the same registration again
            with lock:
                acknowledged[subject] = (schema_id, text)
                acknowledged_at.append(time.monotonic())
            n += 1

    threads = [threading.Thread(target=client, args=(slot,)) for slot in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(3)
    cluster.brokers[leader].kill()
    killed_at = time.monotonic()
    for thread in threads:
        thread.join()
    assert sum(t < killed_at for t in acknowledged_at) > 10
    assert sum(t > killed_at for t in acknowledged_at) > 10, "no registration acknowledged after the kill"
    assert partitions_of(cluster.bootstrap, "_schemas")[0][0] != leader
    ids = [schema_id for schema_id, _ in acknowledged.values()]
    assert len(set(ids)) == len(ids), "an id was given to two schemas"
    assert 1 not in ids
    for subject, (schema_id, _) in acknowledged.items():
        status, _, body = call(survivors[0], "GET", f"/subjects/{subject}/versions/1")
        assert (status, body["id"]) == (200, schema_id), subject
