"""Compose tasks: the supported subset, refusals by name, and real multi-container episodes
(private network, no route out, everything labelled and removed)."""

from __future__ import annotations

import shutil
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from rsr_async.config import SandboxConfig
from rsr_async.errors import ContainerError, TaskError
from rsr_async.sandbox import SandboxPool, sweep
from rsr_async.sandbox.compose import MAIN_SERVICE, task_compose
from rsr_async.sandbox.hosts import open_client
from rsr_async.sandbox.pool import LABEL_EPISODE, LABEL_RUN, LABEL_SERVICE
from rsr_async.tasks.loader import load_task
from rsr_async.tasks.oracle import validate_task
from rsr_async.tasks.verifier import try_verify
from tests.conftest import run_cli_env

from .conftest import FIXTURES, containers_of, new_run_id

URL = "unix:///var/run/docker.sock"
COMPOSE_WEB = FIXTURES / "compose-web"


async def networks_of(run_id: str) -> list[dict[str, object]]:
    """Networks labelled with ``run_id``, asked of Docker directly."""
    docker, connector = open_client(URL)
    try:
        with anyio.fail_after(30):
            return list(await docker.networks.list(filters={"label": [f"{LABEL_RUN}={run_id}"]}))
    finally:
        await docker.close()
        await connector.close()


async def inspect(container_id: str) -> dict[str, object]:
    docker, connector = open_client(URL)
    try:
        with anyio.fail_after(30):
            return dict(await docker.containers.container(container_id).show())
    finally:
        await docker.close()
        await connector.close()


def compose_task(tmp_path: Path, compose: str, *, dockerfile: bool = True, name: str = "compose-x") -> Path:
    """A Harbor task directory in ``tmp_path`` with this ``docker-compose.yaml``."""
    root = tmp_path / name
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "task.toml").write_text(f'[task]\nname = "{name}"\n[environment]\nenv = {{ PORT = "9000" }}\n')
    (root / "instruction.md").write_text("Do the thing.\n")
    (root / "tests" / "test.sh").write_text("#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n")
    if dockerfile:
        (root / "environment" / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n")
    (root / "environment" / "docker-compose.yaml").write_text(textwrap.dedent(compose))
    return root


# ----------------------------------------------------------------------------- parsing


def test_the_fixture_parses_into_start_order_with_variables_filled() -> None:
    task = load_task(COMPOSE_WEB)
    spec = task_compose(task)
    assert spec is not None
    assert [s.name for s in spec.services] == ["store", "seed", MAIN_SERVICE]
    store = spec.service("store")
    assert store.command == ("python3", "/srv/store.py", "8000")  # ${STORE_PORT} from task.toml
    assert store.healthcheck is not None and store.healthcheck.interval_s == 0.5
    assert store.aliases == ("store",)
    seed = spec.service("seed")
    assert seed.command is not None and "$(head -c 12" in seed.command[0]  # $$ is a literal $
    assert [(d.service, d.condition) for d in spec.main.depends_on] == [
        ("seed", "service_completed_successfully")
    ]
    # main has no build of its own: Harbor builds it from environment/ (its Dockerfile).
    assert spec.main.build_context == str(COMPOSE_WEB / "environment")
    assert spec.main.environment == {"STORE_URL": "http://store:8000"}


def test_a_file_without_main_gets_harbors_main(tmp_path: Path) -> None:
    root = compose_task(tmp_path, """
        services:
          db:
            image: rsr-base:bookworm
            command: sleep infinity
            ports: ["5432:5432"]
            container_name: fixed
            x-note: ignored
    """)
    spec = task_compose(load_task(root))
    assert spec is not None
    assert [s.name for s in spec.services] == ["db", MAIN_SERVICE]
    assert spec.main.build_context == str(root / "environment")
    assert spec.service("db").command == ("sleep", "infinity")


REFUSALS = {
    "service volumes": ("""
        services:
          db: {image: x, volumes: ["/etc:/host-etc"]}
    """, "services.db.volumes[0]: '/etc:/host-etc': not supported"),
    "log mount on a sidecar": ("""
        services:
          db: {image: x, volumes: ["${HOST_VERIFIER_LOGS_PATH}:${ENV_VERIFIER_LOGS_PATH}"]}
    """, "services.db.volumes[0]"),
    "a main mount of another host path": ("""
        services:
          main: {volumes: ["${HOST_VERIFIER_LOGS_PATH}:/etc"]}
    """, "services.main.volumes[0]"),
    "deploy reservations": ("""
        services:
          db: {image: x, deploy: {resources: {reservations: {cpus: "1"}}}}
    """, "services.db.deploy.resources.reservations: not supported"),
    "deploy replicas": ("""
        services:
          db: {image: x, deploy: {replicas: 2}}
    """, "services.db.deploy.replicas: not supported"),
    "bad memory limit": ("""
        services:
          db: {image: x, deploy: {resources: {limits: {memory: lots}}}}
    """, "services.db.deploy.resources.limits.memory: 'lots' is not a size"),
    "main that serves": ("""
        services:
          main: {command: ["sh", "-c", "sleep infinity; python3 -m http.server"]}
    """, "services.main.command: not supported"),
    "missing build target": ("""
        services:
          main: {build: {context: ., target: nope}}
    """, "services.main.build.target: Dockerfile has no stage named 'nope'"),
    "top-level volumes": ("""
        services: {db: {image: x}}
        volumes: {data: {}}
    """, "volumes: not supported"),
    "privileged": ("""
        services:
          db: {image: x, privileged: true}
    """, "services.db.privileged: not supported"),
    "network_mode": ("""
        services:
          db: {image: x, network_mode: host}
    """, "services.db.network_mode: 'host' is not supported"),
    "main command": ("""
        services:
          main: {command: ["python3", "-m", "http.server"]}
    """, "services.main.command: not supported"),
    "unknown dependency": ("""
        services:
          main: {depends_on: [cache]}
    """, "services.main.depends_on.cache: no such service"),
    "healthy without healthcheck": ("""
        services:
          db: {image: x}
          main: {depends_on: {db: {condition: service_healthy}}}
    """, "service_healthy, but db has no healthcheck"),
    "cycle": ("""
        services:
          a: {image: x, depends_on: [b]}
          b: {image: x, depends_on: [a]}
    """, "a cycle"),
    "context outside the task": ("""
        services:
          db: {build: ../../..}
    """, "services.db.build.context: '../../..' leaves the task directory"),
    "required variable": ("""
        services:
          db: {image: x, command: "serve ${NOT_SET:?give NOT_SET}"}
    """, "${NOT_SET}: give NOT_SET"),
    "external network": ("""
        services: {db: {image: x}}
        networks: {outside: {external: true}}
    """, "networks.outside.external: not supported"),
    "bad duration": ("""
        services:
          db: {image: x, healthcheck: {test: "true", interval: 5}}
    """, "services.db.healthcheck.interval: 5 is not a duration"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_unsupported_compose_is_refused_at_load_by_name(tmp_path: Path, case: str) -> None:
    compose, expected = REFUSALS[case]
    root = compose_task(tmp_path, compose)
    with pytest.raises(TaskError) as caught:
        load_task(root)
    message = str(caught.value)
    assert expected in message
    assert "task 'compose-x'" in message and "docker-compose.yaml" in message
    assert "\n" not in message


def test_main_without_anything_to_build_from_is_refused(tmp_path: Path) -> None:
    root = compose_task(tmp_path, "services:\n  db: {image: x}\n", dockerfile=False)
    with pytest.raises(TaskError, match="services.main: no build or image"):
        load_task(root)


# ----------------------------------------------------------------------------- episodes


@pytest.fixture
def web_task(tmp_path: Path) -> Path:
    """The fixture copied, so a test's task directory is its own."""
    target = tmp_path / "compose-web"
    shutil.copytree(COMPOSE_WEB, target)
    return target


async def test_a_compose_episode_reaches_its_services_by_name_and_leaves_nothing(
    config: SandboxConfig, tmp_path: Path, web_task: Path
) -> None:
    task = load_task(web_task)
    run_id = new_run_id()
    async with SandboxPool(config, run_id=run_id, run_dir=tmp_path / "run") as pool:
        async with pool.sandbox(task, key="episode-1") as sandbox:
            seeded = await sandbox.run("curl -fsS http://store:8000/answer", time_limit=20)
            assert seeded.exit_code == 0 and len(seeded.output) == 24  # the seed's random hex
            assert (await sandbox.run("echo $STORE_URL; pwd", time_limit=10)).output.split() == [
                "http://store:8000", "/app"
            ]
            # Every container and the network carry the run and episode; services say which.
            ids = await containers_of(run_id)
            services = {}
            for container_id in ids:
                labels = (await inspect(container_id))["Config"]["Labels"]  # type: ignore[index]
                assert labels[LABEL_EPISODE] == "episode-1"
                services[labels[LABEL_SERVICE]] = container_id
            assert sorted(services) == ["main", "seed", "store"]
            assert services["main"] == sandbox.id
            (network,) = await networks_of(run_id)
            assert network["Internal"] is True
            assert network["Labels"][LABEL_EPISODE] == "episode-1"  # type: ignore[index]
            # The seed ran to completion before main started; the store still serves.
            seed_state = (await inspect(services["seed"]))["State"]
            assert seed_state["Status"] == "exited" and seed_state["ExitCode"] == 0  # type: ignore[index]
            # `sandbox ls` sees the services and the network.
            listed = await sweep([URL], dry_run=True)
            mine = [item for item in listed if item.run == run_id]
            assert sorted((i.kind, i.service) for i in mine) == [
                ("container", "main"), ("container", "seed"), ("container", "store"), ("network", "")
            ]
            assert not any(item.removable for item in mine)  # our owner is alive
            with anyio.fail_after(60):
                listing = await anyio.run_process(
                    [sys.executable, "-m", "rsr_async", "sandbox", "ls"], env=run_cli_env()
                )
            lines = [x for x in listing.stdout.decode().splitlines() if f"run={run_id}" in x]
            assert sum("service=" in x for x in lines) == 3
            assert [x for x in lines if f"network={network['Name']}" in x]
            # The hidden tests see the service too; the untouched environment fails them.
            verdict = await try_verify(sandbox, task)
            assert verdict.error is None and verdict.reward == 0.0
            await sandbox.run("curl -fsS http://store:8000/answer > /app/answer.txt", time_limit=20)
            assert (await try_verify(sandbox, task)).reward == 1.0
        assert await pool.containers() == []  # the pool's verifier station lives on with it
        assert await networks_of(run_id) == []
    assert await containers_of(run_id) == []


async def test_a_compose_episode_has_no_route_out(
    config: SandboxConfig, tmp_path: Path, web_task: Path
) -> None:
    task = load_task(web_task)
    connect = (
        "python3 -c 'import socket,sys; s=socket.socket(); s.settimeout(3); "
        "s.connect((sys.argv[1], int(sys.argv[2]))); print(\"connected\")' "
    )
    async with SandboxPool(config, run_id=new_run_id(), run_dir=tmp_path / "run") as pool:
        async with pool.sandbox(task, key="no-route") as sandbox:
            inside = await sandbox.run(connect + "store 8000", time_limit=10)
            assert inside.exit_code == 0 and "connected" in inside.output
            for address in ("1.1.1.1 53", "8.8.8.8 443"):
                outside = await sandbox.run(connect + address, time_limit=10)
                assert outside.exit_code != 0 and "connected" not in outside.output
                assert "unreachable" in outside.output.lower() or "timed out" in outside.output


async def test_tasks_validate_passes_the_compose_fixture(
    config: SandboxConfig, tmp_path: Path, web_task: Path
) -> None:
    task = load_task(web_task)
    run_id = new_run_id()
    async with SandboxPool(config, run_id=run_id, run_dir=tmp_path / "run") as pool:
        row = await validate_task(task, pool)
    assert row.problems == [], row
    assert row.oracle_reward == 1.0 and row.nop_reward == 0.0
    assert await containers_of(run_id) == [] and await networks_of(run_id) == []


async def test_a_failing_service_is_an_error_naming_it_and_is_cleaned_up(
    config: SandboxConfig, tmp_path: Path
) -> None:
    root = compose_task(tmp_path, """
        services:
          main:
            depends_on:
              migrate: {condition: service_completed_successfully}
          migrate:
            build: .
            command: ["sh", "-c", "echo schema missing >&2; exit 3"]
    """)
    task = load_task(root)
    run_id = new_run_id()
    async with SandboxPool(config, run_id=run_id, run_dir=tmp_path / "run") as pool:
        with pytest.raises(ContainerError) as caught:
            async with pool.sandbox(task, key="fails"):
                raise AssertionError("main must not start")
        message = str(caught.value)
        assert "service 'migrate'" in message and "exited with code 3" in message
        assert "schema missing" in message
        assert await containers_of(run_id) == [] and await networks_of(run_id) == []


async def test_sixteen_compose_episodes_at_once_leave_nothing(
    config: SandboxConfig, tmp_path: Path, web_task: Path
) -> None:
    task = load_task(web_task)
    run_id = new_run_id()
    answers: list[str] = []
    async with SandboxPool(config, run_id=run_id, run_dir=tmp_path / "run") as pool:
        await pool.ensure_image(task)

        async def episode(index: int) -> None:
            async with pool.sandbox(task, key=f"e{index}") as sandbox:
                result = await sandbox.run("curl -fsS http://store:8000/answer", time_limit=30)
                assert result.exit_code == 0
                answers.append(result.output)

        with anyio.fail_after(600):
            async with anyio.create_task_group() as tg:
                for index in range(16):
                    tg.start_soon(episode, index)
        stats = pool.statistics()
        assert stats.live == 0 and stats.remove_failures == 0
    # Each episode had its own store: 16 different random values.
    assert len(set(answers)) == 16
    assert await containers_of(run_id) == [] and await networks_of(run_id) == []


async def test_a_verification_copy_joins_the_episodes_network(
    config: SandboxConfig, tmp_path: Path, web_task: Path
) -> None:
    task = load_task(web_task)
    run_id = new_run_id()
    async with SandboxPool(config, run_id=run_id, run_dir=tmp_path / "run") as pool:
        async with pool.sandbox(task, key="rsrt") as sandbox:
            await sandbox.run("curl -fsS http://store:8000/answer > /app/answer.txt", time_limit=20)
            async with pool.snapshot(sandbox, task, key="rsrt") as copy:
                assert copy.id != sandbox.id
                # RSRT's hidden tests run in the copy: they see the services as the agent left them.
                assert (await try_verify(copy, task)).reward == 1.0
    assert await containers_of(run_id) == [] and await networks_of(run_id) == []


async def test_the_sweep_removes_a_dead_processs_compose_network(tmp_path: Path) -> None:
    run_id = new_run_id()
    docker, connector = open_client(URL)
    try:
        with anyio.fail_after(30):
            # What a killed run leaves: a labelled network whose owner is not this process.
            await docker.networks.create({
                "Name": f"rsr-leftover-{run_id}",
                "Internal": True,
                "Labels": {LABEL_RUN: run_id, LABEL_EPISODE: "e1", "rsr_async.owner": "elsewhere:1:1"},
            })
    finally:
        await docker.close()
        await connector.close()
    try:
        listed = [item for item in await sweep([URL], dry_run=True) if item.run == run_id]
        assert [(i.kind, i.episode, i.removable) for i in listed] == [("network", "e1", False)]
        removed = [item for item in await sweep([URL], run_id=run_id) if item.run == run_id]
        assert [(i.kind, i.removed) for i in removed] == [("network", True)]
        assert await networks_of(run_id) == []
    finally:
        await sweep([URL], run_id=run_id, everything_of_run=True)
