"""Compose networks' small subnets (rsr_async.sandbox.subnets): the allocator's rules,
and real Docker networks past the ~31 that Docker's default address pools allow."""

from __future__ import annotations

import ipaddress
import random
import uuid

import aiodocker
import anyio
import pytest

from rsr_async.config import SandboxConfig, load_config
from rsr_async.errors import ConfigError, ContainerError
from rsr_async.sandbox.hosts import open_client
from rsr_async.sandbox.pool import LABEL_RUN
from rsr_async.sandbox.subnets import SubnetPool, create_network

URL = "unix:///var/run/docker.sock"


def test_subnets_are_distinct_small_and_inside_the_range() -> None:
    pool = SubnetPool("10.231.0.0/22", 28, seed=1)  # 64 blocks
    taken = [pool.take("h", 3) for _ in range(64)]
    assert all(s is not None and s.prefixlen == 28 for s in taken)
    nets = [s for s in taken if s is not None]
    assert all(s.subnet_of(pool.range) for s in nets)
    assert len({str(s) for s in nets}) == 64
    assert not any(a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1:])
    assert pool.take("h") is None  # the range is used up ...
    assert pool.take("other-host") is not None  # ... on that host only
    pool.give_back("h", nets[10])
    assert pool.take("h") == nets[10]  # a removed network's subnet is used again


def test_a_task_with_many_services_gets_an_aligned_larger_block() -> None:
    pool = SubnetPool("10.231.0.0/24", 28, seed=3)  # 16 blocks of 16 addresses
    small = pool.take("h", 13)  # 13 + network + gateway + broadcast = 16
    assert small is not None and small.prefixlen == 28
    big = pool.take("h", 14)
    assert big is not None and big.prefixlen == 27 and int(big.network_address) % 32 == 0
    assert not big.overlaps(small)
    assert pool.take("h", 300) is None  # more than the whole range
    pool.give_back("h", big)
    assert pool.in_use("h") == 1


@pytest.mark.parametrize(("cidr", "prefix"), [("10.0.0.0/30", 28), ("nonsense", 28), ("10.0.0.0/16", 30)])
def test_a_bad_range_is_refused(cidr: str, prefix: int) -> None:
    with pytest.raises(ValueError, match="sandbox.compose_subnet"):
        SubnetPool(cidr, prefix)


def test_the_config_names_a_bad_range() -> None:
    with pytest.raises(ConfigError, match="sandbox.compose_subnets: 'ten' is not an IPv4 network"):
        load_config((), ["sandbox.compose_subnets=ten"])
    with pytest.raises(ConfigError, match="compose_subnet_prefix: /20 blocks do not fit"):
        load_config((), ["sandbox.compose_subnets=10.1.0.0/24", "sandbox.compose_subnet_prefix=20"])
    assert SandboxConfig(compose_subnets="").compose_subnets == ""  # Docker's default pools


async def _networks(docker: aiodocker.Docker, run_id: str) -> list[dict[str, object]]:
    with anyio.fail_after(30):
        return list(await docker.networks.list(filters={"label": [f"{LABEL_RUN}={run_id}"]}))


async def test_thirty_six_networks_at_once_past_dockers_default_pools_and_around_a_foreign_one() -> None:
    """Docker's default pools hold about 31 bridge networks per host; 36 at once through
    the pool all get a subnet, stepping around one someone else made in the range."""
    run_id = f"test-{uuid.uuid4().hex[:10]}"
    labels = {LABEL_RUN: run_id}
    # A range of our own per test run: a concurrent test run uses another.
    base = 10 << 24 | 232 << 16 | random.randrange(64) << 10
    cidr = str(ipaddress.IPv4Network((base, 22)))  # 64 /28 blocks
    pool = SubnetPool(cidr, 28, seed=0)
    foreign_subnet = ipaddress.IPv4Network((base + 16, 28))  # block 1, which comes early
    docker, connector = open_client(URL)
    created: list[str] = []
    try:
        with anyio.fail_after(30):
            foreign = await docker.networks.create({
                "Name": f"rsr-foreign-{run_id}", "Internal": True, "Labels": labels,
                "IPAM": {"Config": [{"Subnet": str(foreign_subnet)}]},
            })
        created.append(foreign.id)
        subnets: list[ipaddress.IPv4Network] = []

        async def one(index: int) -> None:
            with anyio.fail_after(60):
                network, subnet = await create_network(
                    docker.networks.create,
                    {"Name": f"rsr-{run_id}-{index}", "Driver": "bridge", "Internal": True,
                     "Labels": labels},
                    pool=pool, host=URL, containers=3, where=f"network {index}",
                )
            created.append(network.id)
            assert subnet is not None
            subnets.append(subnet)

        async with anyio.create_task_group() as tg:
            for index in range(36):
                tg.start_soon(one, index)
        assert len({str(s) for s in subnets}) == 36
        assert foreign_subnet not in subnets
        # Docker agrees: each network has the subnet the pool gave it.
        ours = [n for n in await _networks(docker, run_id) if n["Id"] != foreign.id]
        configs = {n["IPAM"]["Config"][0]["Subnet"] for n in ours}  # type: ignore[index]
        assert configs == {str(s) for s in subnets}
        assert pool.in_use(URL) == 37  # the foreign block stays out of use
    finally:
        with anyio.CancelScope(shield=True), anyio.fail_after(120):
            for network_id in created:
                await (await docker.networks.get(network_id)).delete()
            assert await _networks(docker, run_id) == []
            await docker.close()
            await connector.close()


async def test_a_used_up_range_is_a_clear_error() -> None:
    run_id = f"test-{uuid.uuid4().hex[:10]}"
    pool = SubnetPool("10.233.7.0/28", 28)  # one block
    docker, connector = open_client(URL)
    try:
        body = {"Driver": "bridge", "Internal": True, "Labels": {LABEL_RUN: run_id}}
        with anyio.fail_after(30):
            first, _ = await create_network(docker.networks.create, {**body, "Name": f"a-{run_id}"},
                                            pool=pool, host=URL, containers=2, where="first")
        try:
            with pytest.raises(ContainerError, match="no free subnet for 2 containers in "
                               r"sandbox.compose_subnets 10.233.7.0/28 \(/28 blocks: 1 of 1"):
                await create_network(docker.networks.create, {**body, "Name": f"b-{run_id}"},
                                     pool=pool, host=URL, containers=2, where="second")
        finally:
            with anyio.fail_after(30):
                await first.delete()
        assert await _networks(docker, run_id) == []
    finally:
        await docker.close()
        await connector.close()
