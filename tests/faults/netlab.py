"""A private test network of Linux network namespaces: one namespace per server, all on one bridge.

Topology (every name carries a random tag of this run, so a leftover of a crashed run cannot collide)::

    root namespace (the test process, its clients)  --  bridge sf<tag>br  10.A.B.1/24
        |-- veth sf<tag>h<i> <-> eth sf<tag>p<i> in namespace sf<tag><node>   10.A.B.(10+i)/24

A, B are random (A in 100..250), chosen so that no route of the machine overlaps. Servers are started
with ``ip netns exec <ns> <cmd>`` (which execs in place: the PID is the server's own) and bind their
node's address; the test process reaches all of them through the bridge.

Faults are nftables rules inside a node's namespace (table ``inet strom_fault``): `cut` drops every
packet to or from the given peers, in both directions, while the node keeps talking to everyone else
(the test's clients included). `heal` deletes the table. Dropped, not rejected: TCP sees silence, as on a
real partition. `teardown` deletes the namespaces and the bridge and is safe to call more than once.
"""

from __future__ import annotations

import ipaddress
import random
import secrets
import shutil
import subprocess
from dataclasses import dataclass, field

from tests.prerequisites import require

TABLE = "strom_fault"


def _run(*cmd: str, input_text: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        list(cmd), input=input_text, capture_output=True, text=True, timeout=30, check=False
    )
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def require_netlab() -> None:
    """Root, iproute2 and nftables: a skip outside CI, a failure under CI (tests/prerequisites.py)."""
    import os

    require(os.geteuid() == 0, "root (network namespaces, nftables, tmpfs mounts)")
    require(shutil.which("ip") is not None, "ip (Debian package iproute2)")
    require(shutil.which("nft") is not None, "nft (Debian package nftables)")


@dataclass
class Node:
    name: str
    ns: str
    ip: str
    host_veth: str
    blocked: set[str] = field(default_factory=set)

    @property
    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.ns]


class NetLab:
    def __init__(self) -> None:
        self.tag = secrets.token_hex(3)
        self.base = f"sf{self.tag}"
        self.bridge = f"{self.base}br"
        # Not the chaos seed: two runs with the same seed at once must still get different subnets.
        self.subnet = _free_subnet(random.SystemRandom())
        self.gateway = str(self.subnet.network_address + 1)
        self.nodes: dict[str, Node] = {}
        self._up = False

    def setup(self) -> NetLab:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        self._up = True
        _run("ip", "addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        return self

    def add_node(self, name: str) -> Node:
        index = len(self.nodes)
        node = Node(
            name,
            ns=f"{self.base}{name}",
            ip=str(self.subnet.network_address + 10 + index),
            host_veth=f"{self.base}h{index}",
        )
        peer = f"{self.base}p{index}"
        _run("ip", "netns", "add", node.ns)
        self.nodes[name] = node
        _run("ip", "link", "add", node.host_veth, "type", "veth", "peer", "name", peer)
        _run("ip", "link", "set", peer, "netns", node.ns)
        _run("ip", "link", "set", node.host_veth, "master", self.bridge)
        _run("ip", "link", "set", node.host_veth, "up")
        inside = [*node.prefix, "ip"]
        _run(*inside, "addr", "add", f"{node.ip}/{self.subnet.prefixlen}", "dev", peer)
        _run(*inside, "link", "set", peer, "up")
        _run(*inside, "link", "set", "lo", "up")
        return node

    # faults ------------------------------------------------------------------------------------------
    def cut(self, node: Node, *peers: Node) -> None:
        """Drop all traffic between ``node`` and each of ``peers`` (rules in ``node``'s namespace)."""
        node.blocked.update(p.ip for p in peers)
        self._apply(node)

    def heal(self, node: Node | None = None) -> None:
        """Remove every cut of ``node`` (of every node if None)."""
        for target in [node] if node is not None else list(self.nodes.values()):
            target.blocked.clear()
            self._apply(target)

    def _apply(self, node: Node) -> None:
        # Re-create the whole table in one nft transaction (add + delete + add: works whether it exists).
        script = f"add table inet {TABLE}\ndelete table inet {TABLE}\n"
        if node.blocked:
            addrs = ", ".join(sorted(node.blocked))
            script += (
                f"table inet {TABLE} {{\n"
                f"  chain input {{ type filter hook input priority 0; ip saddr {{ {addrs} }} drop; }}\n"
                f"  chain output {{ type filter hook output priority 0; ip daddr {{ {addrs} }} drop; }}\n"
                "}\n"
            )
        _run(*node.prefix, "nft", "-f", "-", input_text=script)

    # teardown ----------------------------------------------------------------------------------------
    def teardown(self) -> None:
        """Delete every namespace (its veth end goes with it) and the bridge; idempotent, never raises."""
        for node in self.nodes.values():
            _run("ip", "netns", "delete", node.ns, check=False)
            _run("ip", "link", "delete", node.host_veth, check=False)
        self.nodes.clear()
        if self._up:
            _run("ip", "link", "delete", self.bridge, check=False)
            self._up = False

    def __enter__(self) -> NetLab:
        return self.setup()

    def __exit__(self, *exc: object) -> None:
        self.teardown()


def _free_subnet(rng: random.Random) -> ipaddress.IPv4Network:
    """A random 10.A.B.0/24 overlapping no address or route of the machine (bounded attempts)."""
    used = []
    for line in _run("ip", "-4", "route", "show", "table", "all").stdout.splitlines():
        word = line.split()[0] if line.split() else ""
        if word in {"broadcast", "local", "unreachable", "prohibit", "blackhole"}:
            word = line.split()[1]
        try:
            used.append(ipaddress.ip_network(word, strict=False))
        except ValueError:
            continue
    for _ in range(100):
        candidate = ipaddress.ip_network(f"10.{rng.randint(100, 250)}.{rng.randint(0, 255)}.0/24")
        if not any(candidate.overlaps(u) for u in used if u.prefixlen > 0):
            return candidate
    raise RuntimeError("no free 10.x.y.0/24 subnet found")
