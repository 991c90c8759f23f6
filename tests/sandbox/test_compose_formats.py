"""The compose files tasks ship in the wild: Harbor's base file restated in a task's
``environment/docker-compose.yaml``, terminal-bench's template ``docker-compose.yaml``
(the plain ``client``, and ``client`` + a ``server`` with a healthcheck), variables
filled as each tool fills them (names recorded from their code), ``build.target``.

Sources of the two files below, copied as they are published: ``HARBOR_BASE`` is
``harbor/environments/docker/docker-compose-build.yaml`` of the harbor 0.26.0 wheel
(Apache-2.0) with its no-network overlay and the restated lines Harbor tasks carry;
``TB_TEMPLATE`` is ``terminal_bench/cli/template-task/docker-compose.yaml`` of the
terminal-bench 0.2.18 wheel (the laude-institute/terminal-bench repository: Apache-2.0),
and ``TB_CLIENT_SERVER`` that template grown the way terminal-bench's client/server tasks
grow it (a ``server`` with a healthcheck, ``depends_on: condition: service_healthy``)."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from rsr_async.config import SandboxConfig
from rsr_async.errors import ImageBuildError, TaskError
from rsr_async.sandbox import SandboxPool
from rsr_async.sandbox.compose import (
    HARBOR_UNSET_VARIABLES,
    HARBOR_VARIABLES,
    MAIN_SERVICE,
    TERMINAL_BENCH_VARIABLES,
    compose_variables,
    task_compose,
)
from rsr_async.tasks import BUNDLED_SUITE
from rsr_async.tasks.loader import load_task
from rsr_async.tasks.oracle import validate_task

from .conftest import containers_of, new_run_id
from .test_compose import networks_of

RECORDED = Path(__file__).resolve().parents[1] / "tasks" / "fixtures" / "harbor_task_keys.json"

# Harbor's base file (environments/docker/docker-compose-build.yaml) plus what Harbor
# tasks restate of it: the no-network overlay, the resources overlay, old log mounts.
HARBOR_BASE = """\
services:
  main:
    build:
      context: ${CONTEXT_DIR}
    image: ${MAIN_IMAGE_NAME}
    pull_policy: build
    command: ["sh", "-c", "sleep infinity"]
    environment:
      - TEST_DIR=${TEST_DIR}
    volumes:
      - ${HOST_VERIFIER_LOGS_PATH}:${ENV_VERIFIER_LOGS_PATH}
      - ${HOST_AGENT_LOGS_PATH}:${ENV_AGENT_LOGS_PATH}
    deploy:
      resources:
        limits:
          cpus: ${CPUS}
          memory: ${MEMORY}
    network_mode: "none"
"""

# terminal-bench 0.2.18's template (cli/template-task/docker-compose.yaml).
TB_TEMPLATE = """\
services:
  client:
    build:
      dockerfile: Dockerfile
    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}
    container_name: ${T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME}
    command: [ "sh", "-c", "sleep infinity" ]
    environment:
      - TEST_DIR=${T_BENCH_TEST_DIR}
    volumes:
      - ${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}
      - ${T_BENCH_TASK_AGENT_LOGS_PATH}:${T_BENCH_CONTAINER_AGENT_LOGS_PATH}
"""

TB_CLIENT_SERVER = """\
services:
  client:
    build:
      context: client
      dockerfile: Dockerfile
    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}
    container_name: ${T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME}
    command: [ "sh", "-c", "sleep infinity" ]
    environment:
      - TEST_DIR=${T_BENCH_TEST_DIR}
    volumes:
      - ${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}
      - ${T_BENCH_TASK_AGENT_LOGS_PATH}:${T_BENCH_CONTAINER_AGENT_LOGS_PATH}
    depends_on:
      server:
        condition: service_healthy
  server:
    build:
      context: server
    image: ${T_BENCH_TASK_DOCKER_NAME_PREFIX}__server
    container_name: ${T_BENCH_TASK_DOCKER_NAME_PREFIX}__server
    command: ["python3", "/srv/serve.py"]
    healthcheck:
      test: ["CMD", "python3", "/srv/serve.py", "--check"]
      interval: 1s
      retries: 30
"""


def harbor_task(tmp_path: Path, compose: str, toml: str = "") -> Path:
    root = tmp_path / "hb-compose"
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "task.toml").write_text(f'[task]\nname = "org/hb-compose"\n{toml}')
    (root / "instruction.md").write_text("Do the thing.\n")
    (root / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (root / "environment" / "Dockerfile").write_text(
        "ARG BASE_IMAGE\nFROM ${BASE_IMAGE} AS base\nFROM base AS final\n"
    )
    (root / "environment" / "docker-compose.yaml").write_text(textwrap.dedent(compose))
    return root


def tb_task(tmp_path: Path, compose: str, *, client_dir: bool = False) -> Path:
    root = tmp_path / "tb-compose"
    (root / "tests").mkdir(parents=True)
    (root / "task.yaml").write_text("instruction: Do the thing.\n")
    (root / "run-tests.sh").write_text("#!/bin/bash\npytest $TEST_DIR/test_outputs.py\n")
    dockerfile = "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n"
    if client_dir:
        for service in ("client", "server"):
            (root / service).mkdir()
            (root / service / "Dockerfile").write_text(dockerfile)
    else:
        (root / "Dockerfile").write_text(dockerfile)
    (root / "docker-compose.yaml").write_text(compose)
    return root


# ----------------------------------------------------------------------------- Harbor


def test_harbors_restated_base_file_loads_with_its_meaning_here(tmp_path: Path) -> None:
    task = load_task(harbor_task(tmp_path, HARBOR_BASE))
    spec = task_compose(task)
    assert spec is not None and [s.name for s in spec.services] == [MAIN_SERVICE]
    main = spec.main
    assert main.build_context == str(Path(task.path) / "environment")
    assert main.image is None  # `image:` beside `build:` only names the result
    assert main.command is None  # the keep-alive is ours
    assert main.environment == {"TEST_DIR": ""}  # unset under Harbor too: a blank string
    # ${CPUS}/${MEMORY} restate the task's limits: nothing is set from them.
    assert (main.cpus, main.memory_mb, task.cpus, task.memory_mb) == (None, None, None, None)


def test_literal_limits_on_main_become_the_tasks(tmp_path: Path) -> None:
    compose = HARBOR_BASE.replace("${CPUS}", '"1.5"').replace("${MEMORY}", "3G")
    task = load_task(harbor_task(tmp_path, compose))
    assert (task.cpus, task.memory_mb) == (1.5, 3072)


def test_literal_limits_that_disagree_with_task_toml_are_refused(tmp_path: Path) -> None:
    compose = HARBOR_BASE.replace("${CPUS}", '"4"')
    with pytest.raises(TaskError, match=r"services.main.deploy.resources.limits.cpus: 4 disagrees"):
        load_task(harbor_task(tmp_path, compose, "[environment]\ncpus = 2\n"))


def test_a_sidecars_limits_are_its_own(tmp_path: Path) -> None:
    spec = task_compose(load_task(harbor_task(tmp_path, """
        services:
          db:
            image: rsr-base:bookworm
            deploy: {resources: {limits: {cpus: "0.5", memory: 256M}}}
            network_mode: none
    """)))
    assert spec is not None
    assert (spec.service("db").cpus, spec.service("db").memory_mb) == (0.5, 256)


def test_build_target_is_parsed(tmp_path: Path) -> None:
    spec = task_compose(load_task(harbor_task(tmp_path, """
        services:
          main: {build: {context: ., target: base}}
    """)))
    assert spec is not None and spec.main.build_target == "base"


def test_harbors_names_win_over_the_tasks_env(tmp_path: Path) -> None:
    task = load_task(harbor_task(tmp_path, HARBOR_BASE, '[environment]\nenv = { CPUS = "64", MINE = "x" }\n'))
    variables = compose_variables(task)
    assert variables["CPUS"] == "1" and variables["MINE"] == "x"  # merge_compose_env


def test_the_variable_names_are_the_ones_recorded_from_harbor_and_terminal_bench() -> None:
    recorded = json.loads(RECORDED.read_text())["compose_variables"]
    assert set(HARBOR_VARIABLES) | set(HARBOR_UNSET_VARIABLES) == set(
        recorded["harbor"] + recorded["harbor_log_mounts"]
    )
    assert set(TERMINAL_BENCH_VARIABLES) == set(recorded["terminal_bench"])


def test_every_name_we_list_is_set_for_its_format(tmp_path: Path) -> None:
    harbor = compose_variables(load_task(harbor_task(tmp_path, HARBOR_BASE, '[environment]\ndocker_image = "img"\n')))
    assert set(HARBOR_VARIABLES) <= set(harbor) and not set(HARBOR_UNSET_VARIABLES) & set(harbor)
    tb = compose_variables(load_task(tb_task(tmp_path, TB_TEMPLATE)))
    assert set(tb) == set(TERMINAL_BENCH_VARIABLES)
    assert tb["T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME"] == "tb__tb-compose__client"
    assert tb["T_BENCH_TEST_DIR"] == "/tests"


# ----------------------------------------------------------------------------- terminal-bench


def test_terminal_benchs_template_is_a_plain_sandbox_with_its_environment(tmp_path: Path) -> None:
    task = load_task(tb_task(tmp_path, TB_TEMPLATE))
    assert task_compose(task) is None
    assert task.env == {"TEST_DIR": "/tests"}


def test_terminal_benchs_client_and_server_with_a_healthcheck(tmp_path: Path) -> None:
    task = load_task(tb_task(tmp_path, TB_CLIENT_SERVER, client_dir=True))
    spec = task_compose(task)
    assert spec is not None and spec.agent_service == "client"
    assert [s.name for s in spec.services] == ["server", MAIN_SERVICE]
    assert spec.main.aliases == ("client",)
    assert spec.main.build_context == str(Path(task.path) / "client")
    assert spec.main.environment == {"TEST_DIR": "/tests"}
    assert [(d.service, d.condition) for d in spec.main.depends_on] == [("server", "service_healthy")]
    server = spec.service("server")
    assert server.healthcheck is not None and server.healthcheck.interval_s == 1.0
    assert server.build_context == str(Path(task.path) / "server")


def test_terminal_bench_without_a_client_is_refused(tmp_path: Path) -> None:
    compose = "services:\n  server: {build: {context: server}}\n"
    with pytest.raises(TaskError, match="no 'client' service"):
        load_task(tb_task(tmp_path, compose, client_dir=True))


def test_terminal_bench_refusals_name_the_clients_key(tmp_path: Path) -> None:
    compose = TB_TEMPLATE.replace('[ "sh", "-c", "sleep infinity" ]', '["python3", "-m", "http.server"]')
    with pytest.raises(TaskError) as caught:
        load_task(tb_task(tmp_path, compose))
    assert "docker-compose.yaml: services.client.command: not supported" in str(caught.value)


# ----------------------------------------------------------------------------- real episodes


@pytest.mark.docker
@pytest.mark.parametrize("name", ["harbor-compose-error-count", "tb-inventory-total"])
async def test_the_bundled_compose_shapes_validate_and_leave_nothing(
    config: SandboxConfig, tmp_path: Path, name: str
) -> None:
    """Build (a build target; terminal-bench's client and server), start in order (the
    server healthy first), oracle passes, untouched fails, nothing left behind."""
    task = load_task(BUNDLED_SUITE / name)
    run_id = new_run_id()
    async with SandboxPool(config, run_id=run_id, run_dir=tmp_path / "run") as pool:
        row = await validate_task(task, pool)
    assert row.problems == [], row
    assert row.oracle_reward == 1.0 and row.nop_reward == 0.0
    assert await containers_of(run_id) == [] and await networks_of(run_id) == []


@pytest.mark.docker
async def test_an_ignored_build_target_would_fail_the_build(config: SandboxConfig, tmp_path: Path) -> None:
    """The bundled task's last stage fails on purpose: without its target it cannot build."""
    root = tmp_path / "no-target"
    shutil.copytree(BUNDLED_SUITE / "harbor-compose-error-count", root)
    compose = root / "environment" / "docker-compose.yaml"
    compose.write_text(compose.read_text().replace("      target: workspace\n", ""))
    task = load_task(root)
    async with SandboxPool(config, run_id=new_run_id(), run_dir=tmp_path / "run") as pool:
        with pytest.raises(ImageBuildError, match="build.target was ignored"):
            await pool.ensure_image(task)
