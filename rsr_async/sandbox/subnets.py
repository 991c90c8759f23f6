"""Small subnets for compose episodes' private networks, from an address range we manage.

Every compose episode gets its own bridge network. Left to Docker, each takes a whole
block of its default address pools (172.17-31.0.0/16 as /16s, 192.168.0.0/16 as /20s):
about 31 networks per host, after which ``network create`` fails with "could not find
an available, non-overlapping IPv4 address pool" (Harbor fails 2 of 32 trials at 32
at once this way). An episode's network holds a handful of containers, so
:class:`SubnetPool` hands each one a small subnet (a /28 by default: 13 containers
beside the gateway) from ``sandbox.compose_subnets`` (10.231.0.0/16 by default: 4,096
of them), and takes it back when the network is removed.

Nothing is shared between processes but the Docker daemon, which refuses a subnet that
overlaps one of its networks (403, "Pool overlaps with other one on this address
space"): another run on the same host, or a network someone made by hand, is found that
way and stepped around (:meth:`SubnetPool.refused`). Each pool starts at a random place
in the range, so two runs rarely collide at all.
"""

from __future__ import annotations

import ipaddress
import math
import random
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import ContainerError
from .docker_errors import DockerAnswer, docker_errors

__all__ = ["DEFAULT_RANGE", "DEFAULT_PREFIX", "SubnetPool", "create_network", "overlap_refusal"]

DEFAULT_RANGE = "10.231.0.0/16"
"""Outside Docker's default pools (172.17-31.0.0/16, 192.168.0.0/16) and private."""
DEFAULT_PREFIX = 28
"""16 addresses: the network, the gateway and the broadcast leave 13 containers."""
_TRIES = 64
"""Subnets tried for one network before giving up (each refused one is stepped around)."""


def overlap_refusal(status: int, message: str) -> bool:
    """Whether Docker refused a network because its subnet overlaps one it has."""
    return status == 403 and "overlap" in message.lower()


class SubnetPool:
    """Subnets of ``cidr`` (blocks of ``prefix`` bits or larger), per Docker host.

    Not thread-safe; used from the pool's event loop only (no await inside).
    """

    def __init__(self, cidr: str = DEFAULT_RANGE, prefix: int = DEFAULT_PREFIX, *, seed: int | None = None) -> None:
        try:
            self.range = ipaddress.IPv4Network(cidr)
        except ValueError as exc:
            raise ValueError(f"sandbox.compose_subnets: {cidr!r} is not an IPv4 network: {exc}") from exc
        if not self.range.prefixlen <= prefix <= 29:
            raise ValueError(
                f"sandbox.compose_subnet_prefix: {prefix} must lie between the range's "
                f"/{self.range.prefixlen} and /29 (the smallest block holding a container)"
            )
        self.prefix = prefix
        self.blocks = 1 << (prefix - self.range.prefixlen)
        """How many subnets of the configured size the range holds."""
        self._used: dict[str, set[int]] = {}
        """Host → indexes (in blocks of ``prefix``) taken by this pool or found taken."""
        self._cursor = random.Random(seed).randrange(self.blocks)

    def in_use(self, host: str) -> int:
        """Blocks of ``host`` taken now (by this pool's networks, or found taken)."""
        return len(self._used.get(host, ()))

    def take(self, host: str, containers: int = 1) -> ipaddress.IPv4Network | None:
        """A free subnet on ``host`` with room for ``containers`` beside the gateway;
        None when the range has no free block that large."""
        addresses = containers + 3  # network, gateway, broadcast
        span = 1 << max(0, math.ceil(math.log2(addresses)) - (32 - self.prefix))
        if span > self.blocks:
            return None
        used = self._used.setdefault(host, set())
        slots = self.blocks // span
        start = (self._cursor // span) % slots
        for step in range(slots):
            first = ((start + step) % slots) * span
            if not any(first + i in used for i in range(span)):
                used.update(range(first, first + span))
                self._cursor = (first + span) % self.blocks
                return self._subnet(first, span)
        return None

    def give_back(self, host: str, subnet: ipaddress.IPv4Network) -> None:
        """``subnet``'s network is gone: its blocks are free again."""
        used = self._used.get(host)
        if used is not None:
            used.difference_update(self._indexes(subnet))

    def refused(self, host: str, subnet: ipaddress.IPv4Network) -> None:
        """Docker refused ``subnet`` (it overlaps a network of someone else's): kept out
        of use on ``host`` for this pool's life; the pool still holds its blocks."""
        # Nothing to do: take() marked its blocks used, and they are never given back.
        del host, subnet

    def _subnet(self, first: int, span: int) -> ipaddress.IPv4Network:
        size = 1 << (32 - self.prefix)
        address = int(self.range.network_address) + first * size
        return ipaddress.IPv4Network((address, 32 - (span * size).bit_length() + 1))

    def _indexes(self, subnet: ipaddress.IPv4Network) -> range:
        size = 1 << (32 - self.prefix)
        first = (int(subnet.network_address) - int(self.range.network_address)) // size
        return range(first, first + max(1, subnet.num_addresses // size))


async def create_network(
    create: Callable[[dict[str, Any]], Awaitable[Any]],
    body: dict[str, Any],
    *,
    pool: SubnetPool | None,
    host: str,
    containers: int,
    where: str,
) -> tuple[Any, ipaddress.IPv4Network | None]:
    """``create(body)`` (Docker's ``networks.create``) with a subnet from ``pool`` in
    its IPAM config, stepping around subnets Docker says overlap another network's;
    returns (the network, its subnet). ``pool`` None: Docker's default pools decide.
    Docker's errors are mapped (:func:`.docker_errors`) as ``where`` on ``host``."""
    if pool is None:
        with docker_errors(where, url=host):
            return await create(body), None
    for _ in range(_TRIES):
        subnet = pool.take(host, containers)
        if subnet is None:
            break
        try:
            with docker_errors(where, url=host, expected=overlap_refusal):
                network = await create({**body, "IPAM": {"Driver": "default",
                                                         "Config": [{"Subnet": str(subnet)}]}})
        except DockerAnswer:  # 403, the subnet overlaps another network's: step around it
            pool.refused(host, subnet)
            continue
        except BaseException:
            pool.give_back(host, subnet)
            raise
        return network, subnet
    raise ContainerError(
        f"{where}: no free subnet for {containers} containers in sandbox.compose_subnets "
        f"{pool.range} (/{pool.prefix} blocks: {pool.in_use(host)} of {pool.blocks} in use or "
        "taken by other networks on the host); widen the range or end other runs"
    )
