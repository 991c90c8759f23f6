"""Images: the offline base image (debootstrap + import) and task images (cached builds).

No registry is reachable, so nothing is ever pulled. The base image is a Debian root
filesystem made by ``debootstrap`` and imported; task images build from a task's
``environment/Dockerfile`` with ``--build-arg BASE_IMAGE=<base>`` and are tagged by a hash
of the directory's content and the base image's id, so an unchanged task never rebuilds.
A build context never holds the task's hidden tests or reference solution
(:func:`hidden_entries`), even when it is the task's root, nor what its ``.dockerignore``
leaves out (:func:`dockerignored`), as under ``docker build``.

What a task image holds beyond the base (:func:`list_image_paths`, :func:`beyond_base`,
:class:`ImageListings`) is listed once per image id for the leak audit.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import posixpath
import re
import shutil
import stat
import subprocess
import tarfile
import tempfile
import time
import unicodedata
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any, TypeVar

import aiodocker
import anyio
import anyio.abc
import msgspec
from yarl import URL

from ..config import SandboxConfig
from ..errors import DockerUnavailableError, ImageBuildError, ImageError, SandboxError
from ..lifeline import guarded_argv
from ..schema import ImageFiles, Task
from .docker_errors import DockerAnswer, docker_errors
from .hosts import open_client

__all__ = [
    "BASE_PACKAGES",
    "IMAGE_REFERENCE",
    "IMAGE_FILES_MAX",
    "IMAGE_FILES_TIMEOUT_S",
    "BuildOnce",
    "ImageListing",
    "ImageListings",
    "beyond_base",
    "bootstrap_base_image",
    "bootstrap_problem",
    "build_context_image",
    "build_task_image",
    "context_digest",
    "dockerignored",
    "hidden_entries",
    "image_id",
    "list_image_paths",
    "ship_between",
    "ship_image",
    "task_image_repository",
    "task_image_tag",
]

BASE_PACKAGES = (
    "bash coreutils procps python3 python3-pytest python3-yaml git make gcc libc6-dev tmux "
    "curl ca-certificates jq sqlite3 bc gawk file less patch diffutils xz-utils unzip zip"
).split()
"""What the task suite needs in every sandbox (the base image has exactly these)."""

_IMAGE_CHANGES = (
    'CMD ["/bin/bash"]',
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
)
_T = TypeVar("_T")
log = logging.getLogger(__name__)
_DEBOOTSTRAP_TIMEOUT_S = 1800.0
_LOG_TAIL = 4000


def _split_tag(name: str) -> tuple[str, str]:
    repo, sep, tag = name.rpartition(":")
    if not sep or "/" in tag:
        return name, "latest"
    return repo, tag


async def image_id(
    docker: aiodocker.Docker, name: str, *, timeout_s: float, url: str = "", where: str = ""
) -> str | None:
    """The image's id, or None when the host (``url``) does not have it. Docker's errors
    are mapped as ``where`` (default: ``inspect image NAME``); a 400 is a malformed
    reference (`UPPER/Case:bad tag`), which no attempt can fix: a permanent ImageError."""
    try:
        with docker_errors(where or f"inspect image {name}", url=url, permanent_4xx=True,
                           error=ImageError, expected={404}), anyio.fail_after(timeout_s):
            info = await docker.images.inspect(name)
    except DockerAnswer:
        return None  # 404: not on this host
    return str(info["Id"])


def bootstrap_problem(euid: int, debootstrap: str | None) -> str | None:
    """Why this process cannot bootstrap the base image, or None when it can."""
    if euid != 0:
        return (
            "bootstrapping the base image needs root (debootstrap creates device files "
            "and chroots); run `sudo python -m rsr_async images bootstrap`"
        )
    if debootstrap is None:
        return (
            "debootstrap is not installed; install it with `apt-get install debootstrap` "
            "(Debian/Ubuntu) or `dnf install debootstrap` (Fedora), then rerun"
        )
    return None


async def bootstrap_base_image(
    config: SandboxConfig,
    *,
    force: bool = False,
    tag: str | None = None,
    log: Callable[[str], None] | None = None,
) -> str:
    """Make the offline base image on every Docker host that lacks it; return its tag.

    Idempotent: hosts that already have ``tag`` (default ``config.base_image``) are
    skipped unless ``force``. Runs ``debootstrap --variant=minbase`` with
    :data:`BASE_PACKAGES` into a temporary directory, streams the root filesystem into
    ``docker import`` (the images/create API), and removes the directory. A host that
    does not answer is skipped while another does (the pool places around it and ships
    the image there once it answers); with none answering it raises
    :class:`~rsr_async.errors.DockerUnavailableError` naming each.
    """
    tag = tag or config.base_image
    say = log or (lambda _line: None)
    missing: list[str] = []
    down: dict[str, DockerUnavailableError] = {}
    for url in config.docker_urls:
        docker, connector = open_client(url)
        try:
            present = await image_id(docker, tag, timeout_s=config.api_timeout_s, url=url,
                                     where=f"bootstrap {tag} on {url}")
        except DockerUnavailableError as exc:
            # One host of several may be down at the start: the pool places around it and
            # ships the base image there when it answers (HostImages.ensure_present).
            down[url] = exc
            say(f"{url} does not answer: skipped ({exc})")
            continue
        finally:
            await docker.close()
            await connector.close()
        if present is None or force:
            missing.append(url)
        else:
            say(f"{tag} already on {url} ({present[:19]}): skipped")
    if len(down) == len(config.docker_urls):
        if len(down) == 1:
            raise down[config.docker_urls[0]]
        raise DockerUnavailableError(
            f"bootstrap {tag}: no Docker host answers: " + "; ".join(map(str, down.values()))
        )
    if not missing:
        return tag
    have = [url for url in config.docker_urls if url not in missing and url not in down]
    if have:
        # Shipping is a stream between daemons (no root, no mirror) and ~4x faster than
        # debootstrap + import here: see README "Sandboxes".
        for url in missing:
            say(f"shipping {tag} from {have[0]} to {url}")
            await ship_between(have[0], url, tag, timeout_s=_DEBOOTSTRAP_TIMEOUT_S)
        return tag
    problem = bootstrap_problem(os.geteuid(), shutil.which("debootstrap"))
    if problem:
        raise ImageError(f"cannot bootstrap base image {tag}: {problem}")
    workdir = Path(tempfile.mkdtemp(prefix="rsr-bootstrap-", dir="/var/tmp"))
    root = workdir / "root"
    try:
        say(f"debootstrap {config.debian_suite} from {config.debian_mirror} into {root}")
        await _debootstrap(config, root, say)
        for url in missing:
            say(f"importing {root} as {tag} on {url}")
            await _import_rootfs(url, root, tag, timeout_s=_DEBOOTSTRAP_TIMEOUT_S)
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_remove_tree, workdir)
    return tag


async def _debootstrap(config: SandboxConfig, root: Path, say: Callable[[str], None]) -> None:
    argv = [
        "debootstrap",
        "--variant=minbase",
        "--include=" + ",".join(BASE_PACKAGES),
        config.debian_suite,
        str(root),
        config.debian_mirror,
    ]
    lines: list[str] = []
    try:
        with anyio.fail_after(_DEBOOTSTRAP_TIMEOUT_S):
            # Behind the lifeline: a killed bootstrap takes debootstrap with it.
            async with await anyio.open_process(
                guarded_argv(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            ) as process:
                assert process.stdout is not None
                async for chunk in process.stdout:
                    text = chunk.decode("utf-8", errors="replace")
                    lines.append(text)
                    for line in text.splitlines():
                        if line.startswith(("I: Retrieving", "I: Extracting", "I: Installing")):
                            continue
                        say(line)
                code = await process.wait()
    except TimeoutError as exc:
        raise ImageBuildError(
            f"debootstrap did not finish in {_DEBOOTSTRAP_TIMEOUT_S:.0f} s", log="".join(lines)
        ) from exc
    if code != 0:
        log = "".join(lines)
        raise ImageBuildError(
            f"debootstrap failed (exit {code}); is {config.debian_mirror} reachable? "
            f"last output:\n{log[-_LOG_TAIL:]}",
            log=log,
        )


async def _import_rootfs(url: str, root: Path, tag: str, *, timeout_s: float) -> None:
    repo, version = _split_tag(tag)
    query = [("fromSrc", "-"), ("repo", repo), ("tag", version)]
    query += [("changes", change) for change in _IMAGE_CHANGES]
    path = URL("images/create").with_query(query)
    docker, connector = open_client(url)
    try:
        async with await anyio.open_process(
            guarded_argv(["tar", "--numeric-owner", "-C", str(root), "-c", "."]),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        ) as tar:
            assert tar.stdout is not None
            source = tar.stdout

            async def chunks() -> AsyncIterator[bytes]:
                async for chunk in source:
                    yield chunk

            with docker_errors(f"import {tag} on {url}", url=url), anyio.fail_after(timeout_s):
                async with docker._query(
                    path,
                    "POST",
                    data=chunks(),
                    headers={"Content-Type": "application/x-tar"},
                    timeout=None,
                ) as response:
                    body = (await response.read()).decode("utf-8", errors="replace")
            code = await tar.wait()
        if code != 0 or '"error"' in body:
            raise ImageBuildError(f"docker import of {tag} on {url} failed: {body[-_LOG_TAIL:]}", log=body)
    finally:
        await docker.close()
        await connector.close()


async def ship_image(
    source: aiodocker.Docker,
    target: aiodocker.Docker,
    name: str,
    *,
    timeout_s: float,
    source_url: str = "",
    target_url: str = "",
) -> str:
    """Copy image ``name`` (with its tags and layers) from one daemon to another; return
    its id on ``target``.

    ``GET /images/{name}/get`` is streamed straight into ``POST /images/load``: no
    temporary file, no registry. Image ids survive the trip, so a task image built on
    the copy is tagged as on the source (the tag hashes the base image's id).
    """
    where = f"ship image {name} from {source_url or 'one host'} to {target_url or 'another'}"
    with docker_errors(where, url=f"{source_url} or {target_url}", error=ImageError), anyio.fail_after(
        timeout_s
    ):
        async with source._query(f"images/{name}/get", timeout=None) as exported:
            stream = exported.content

            async def chunks() -> AsyncIterator[bytes]:
                async for chunk in stream.iter_chunked(1 << 20):
                    yield chunk

            async with target._query(
                "images/load",
                "POST",
                params={"quiet": "1"},
                data=chunks(),
                headers={"Content-Type": "application/x-tar"},
                timeout=None,
            ) as loaded:
                body = (await loaded.read()).decode("utf-8", errors="replace")
    if '"error"' in body:
        raise ImageError(f"{where}: docker load said: {body[-_LOG_TAIL:]}")
    present = await image_id(target, name, timeout_s=timeout_s, url=target_url, where=where)
    if present is None:
        raise ImageError(f"{where}: the load finished but {target_url or 'the target'} has no {name}")
    return present


async def ship_between(source_url: str, target_url: str, name: str, *, timeout_s: float) -> str:
    """:func:`ship_image` between two Docker URLs (opens and closes a client for each)."""
    source, source_connector = open_client(source_url)
    target, target_connector = open_client(target_url)
    try:
        return await ship_image(source, target, name, timeout_s=timeout_s,
                                source_url=source_url, target_url=target_url)
    finally:
        for docker, connector in ((source, source_connector), (target, target_connector)):
            await docker.close()
            await connector.close()


def _remove_tree(path: Path) -> None:
    # debootstrap mounts proc/sys inside the target; a failed run can leave them mounted,
    # and removing through a mount would reach the host's files.
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        mounts = []
    for line in reversed(mounts):
        point = line.split()[1] if len(line.split()) > 1 else ""
        if point.startswith(str(path) + "/"):
            subprocess.run(["umount", "-l", point], check=False, capture_output=True)
    shutil.rmtree(path, ignore_errors=True)


# ----------------------------------------------------------------------------- task images


# Docker's reference grammar (github.com/distribution/reference, regexp.go):
#   path-component := alphanumeric (separator alphanumeric)*
#   alphanumeric   := /[a-z0-9]+/
#   separator      := /[_.]|__|[-]+/
#   tag            := /[\w][\w.-]{0,127}/
# and a name of at most 255 characters. A task name can be anything a directory can be
# called ("009. tasks-x", "a..b", "x_-y", uppercase, unicode, 300 characters), so the
# repository is a slug of only [a-z0-9] runs joined by "-" (always a valid component),
# then a hash of the exact name, so "a b", "a-b" and "A_B" never share an image.
IMAGE_REFERENCE = re.compile(
    r"^(?P<name>[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?$"
)
"""A repository[:tag] reference without a registry host, as Docker's grammar has it."""
_SLUG_CHARS = 60
_NAME_HASH_CHARS = 12


def _slug(name: str) -> str:
    folded = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode().lower()
    return re.sub(r"[^a-z0-9]+", "-", folded).strip("-")[:_SLUG_CHARS].rstrip("-")


def task_image_repository(task_name: str) -> str:
    """``rsr-task-<slug>-<12 hex digits of sha256(task name)>``: a valid Docker repository
    for any task name, distinct for distinct names (the slug alone is only for people)."""
    digest = hashlib.sha256(task_name.encode("utf-8", "surrogatepass")).hexdigest()[:_NAME_HASH_CHARS]
    slug = _slug(task_name)
    return f"rsr-task-{slug}-{digest}" if slug else f"rsr-task-{digest}"


_HIDDEN_NAMES = ("tests", "solution", "solution.sh", "solution.yaml", "run-tests.sh")
"""Entries of a task's root that no image may hold: Harbor's ``tests/`` and ``solution/``,
legacy terminal-bench's ``tests/``, ``solution.sh``, ``solution.yaml`` (its keystroke
solution) and ``run-tests.sh``."""


def hidden_entries(task: Task, context: Path) -> frozenset[str]:
    """Paths (relative, POSIX) inside build context ``context`` that must stay out of it.

    The hidden tests and the reference solution are what grading and the oracle use; a
    build context that holds them (a legacy task builds from its root; a Harbor task
    whose ``environment`` is its root) would put them in the image for a Dockerfile that
    does ``COPY . /app``. Found by resolved path, so a symlinked context is covered too.
    """
    root = Path(task.path).resolve()
    candidates = [root / name for name in _HIDDEN_NAMES]
    candidates += [Path(p).resolve() for p in (task.tests_dir, task.solution_path) if p]
    if task.format == "harbor" and task.solution_path:
        candidates.append(Path(task.solution_path).resolve().parent)  # solution/ whole
    base = context.resolve()
    hidden: set[str] = set()
    for candidate in candidates:
        if candidate != base and candidate.is_relative_to(base) and os.path.lexists(candidate):
            hidden.add(candidate.relative_to(base).as_posix())
    return frozenset(hidden)


def dockerignored(context: Path, dockerfile: str = "Dockerfile") -> frozenset[str]:
    """Paths (relative, POSIX) of ``context`` that its ``.dockerignore`` keeps out of the
    build context, as ``docker build`` and ``docker compose build`` do (published
    terminal-bench tasks ship one beside their ``Dockerfile``).

    Read and matched as moby's ``ignorefile``/``patternmatcher`` do: ``#`` comments and
    blank lines skipped, each pattern cleaned with its leading ``/`` dropped, ``*`` and
    ``?`` within one path segment, ``**`` across any number of them, ``!`` re-including;
    a pattern that matches a parent directory covers what is under it, and the last
    matching line decides. The Dockerfile and ``.dockerignore`` are always sent, as the
    docker client sends them (the daemon itself then hides them from ``COPY`` when they
    are listed). A directory stays when something under it is re-included."""
    ignore_file = context / ".dockerignore"
    if not ignore_file.is_file():
        return frozenset()
    patterns = _ignore_patterns(ignore_file.read_text(encoding="utf-8", errors="replace"))
    if not patterns:
        return frozenset()
    always = {posixpath.normpath(dockerfile), ".dockerignore"}
    excluded: set[str] = set()
    holds_kept: set[str] = set()
    for path in context.rglob("*"):
        rel = path.relative_to(context).as_posix()
        if rel not in always and _ignored(rel, patterns):
            excluded.add(rel)
        else:
            parts = rel.split("/")
            holds_kept.update("/".join(parts[:n]) for n in range(1, len(parts)))
    return frozenset(excluded - holds_kept)


def _ignore_patterns(text: str) -> list[tuple[re.Pattern[str], bool]]:
    """``.dockerignore`` lines as (regex, re-includes) pairs, in file order."""
    patterns: list[tuple[re.Pattern[str], bool]] = []
    for raw in text.removeprefix("\ufeff").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        line = posixpath.normpath(line[1:].strip() if negated else line).lstrip("/")
        if line and line != ".":
            patterns.append((re.compile(_ignore_regex(line)), negated))
    return patterns


def _ignore_regex(pattern: str) -> str:
    """patternmatcher's translation of one pattern into an anchored regular expression."""
    out = ["^"]
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        i += 1
        if ch == "*" and pattern[i:i + 1] == "*":
            i += 1
            if pattern[i:i + 1] == "/":
                i += 1
            out.append(".*" if i >= len(pattern) else "(.*/)?")
        elif ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "\\" and i < len(pattern):
            out.append(re.escape(pattern[i]))
            i += 1
        elif ch in "[]^-":
            out.append(ch)  # character classes, as filepath.Match reads them
        else:
            out.append(re.escape(ch))
    return "".join(out) + "$"


def _ignored(rel: str, patterns: list[tuple[re.Pattern[str], bool]]) -> bool:
    """patternmatcher's ``MatchesOrParentMatches``: the last pattern matching ``rel`` or
    one of its parent directories decides."""
    parts = rel.split("/")
    candidates = ["/".join(parts[:n]) for n in range(len(parts), 0, -1)]
    ignored = False
    for regex, negated in patterns:
        if any(regex.match(candidate) for candidate in candidates):
            ignored = not negated
    return ignored


def _is_hidden(rel: str, hidden: frozenset[str]) -> bool:
    return any(rel == h or rel.startswith(h + "/") for h in hidden)


def context_digest(directory: Path, *, base_id: str, exclude: frozenset[str] = frozenset()) -> str:
    """Hash of a build context (paths, modes, link targets, contents) and the base image id.

    Entries in ``exclude`` (relative paths, see :func:`hidden_entries`) and everything
    under them are not part of the context, so they are not hashed either."""
    digest = hashlib.sha256(f"base={base_id}\n".encode())
    for path in sorted(directory.rglob("*"), key=lambda p: p.relative_to(directory).as_posix()):
        rel = path.relative_to(directory).as_posix()
        if _is_hidden(rel, exclude):
            continue
        info = path.lstat()
        digest.update(f"{rel}\0{stat.S_IMODE(info.st_mode) & 0o111:o}\0".encode())
        if stat.S_ISLNK(info.st_mode):
            digest.update(b"L" + os.readlink(path).encode())
        elif stat.S_ISREG(info.st_mode):
            digest.update(b"F")
            with open(path, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
        elif stat.S_ISDIR(info.st_mode):
            digest.update(b"D")
        digest.update(b"\n")
    return digest.hexdigest()


def task_image_tag(task_name: str, digest: str) -> str:
    """:func:`task_image_repository` ``:<first 20 hex digits of the content hash>``."""
    return f"{task_image_repository(task_name)}:{digest[:20]}"


def _context_tar(directory: Path, exclude: frozenset[str] = frozenset()) -> bytes:
    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if _is_hidden(info.name, exclude) else info  # None: not added, not recursed

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path in sorted(directory.iterdir()):
            archive.add(str(path), arcname=path.name, filter=keep)
    return buffer.getvalue()


async def build_task_image(
    docker: aiodocker.Docker,
    task: Task,
    *,
    base_image: str,
    url: str,
    api_timeout_s: float,
    log_dir: Path | None = None,
) -> tuple[str, bool]:
    """Build ``task``'s image on this host unless its content-hash tag exists.

    Returns the tag and whether a build ran (False: the cached image was there).
    """
    env_dir = Path(task.environment_dir) if task.environment_dir else None
    if env_dir is None or not env_dir.is_dir():
        raise _not_retryable(
            ImageError(
                f"task {task.name!r}: no environment directory"
                + (f" at {env_dir}" if env_dir else "")
                + " and no docker_image: add environment/Dockerfile or set docker_image"
            )
        )
    dockerfile = env_dir / "Dockerfile"
    if not dockerfile.is_file():
        raise _not_retryable(
            ImageError(
                f"task {task.name!r}: {dockerfile} is missing; a task environment needs a "
                "Dockerfile (`ARG BASE_IMAGE` then `FROM ${BASE_IMAGE}`)"
            )
        )
    return await build_context_image(
        docker,
        task,
        context=env_dir,
        base_image=base_image,
        url=url,
        api_timeout_s=api_timeout_s,
        log_dir=log_dir,
    )


def _build(
    docker: aiodocker.Docker,
    archive: bytes,
    *,
    tag: str,
    buildargs: dict[str, str],
    dockerfile: str,
    target: str | None,
    labels: dict[str, str],
) -> Any:
    """``images.build``'s stream; with ``target``, the same ``POST /build`` with the
    Engine API's ``target`` parameter, which aiodocker 0.27's ``build`` does not pass."""
    if target is None:
        return docker.images.build(
            fileobj=io.BytesIO(archive), encoding="identity", tag=tag, buildargs=buildargs,
            path_dockerfile=dockerfile, rm=True, forcerm=True, labels=labels, stream=True,
        )
    params = {
        "t": tag, "rm": "1", "forcerm": "1", "dockerfile": dockerfile, "target": target,
        "buildargs": json.dumps(buildargs), "labels": json.dumps(labels),
    }
    response = docker._query(
        "build", "POST", params=params, data=archive,
        headers={"content-type": "application/x-tar", "Content-Encoding": "identity"},
        timeout=None,
    )
    return docker.images._handle_response(response, True)  # type: ignore[no-untyped-call]


async def build_context_image(
    docker: aiodocker.Docker,
    task: Task,
    *,
    context: Path,
    dockerfile: str = "Dockerfile",
    build_args: dict[str, str] | None = None,
    target: str | None = None,
    service: str | None = None,
    base_image: str,
    url: str,
    api_timeout_s: float,
    log_dir: Path | None = None,
) -> tuple[str, bool]:
    """Build one image of ``task`` from ``context`` (its ``dockerfile``, relative to it;
    ``target``: that stage, compose's ``build.target``)
    unless its content-hash tag exists: the task's own image, or with ``service`` one
    compose service's (its repository named from ``<task>/<service>``). ``BASE_IMAGE`` is always
    passed, so every image builds offline from the base; hidden tests and the solution
    never enter the context. Returns the tag and whether a build ran."""
    where = f"task {task.name!r}" + (f" service {service!r}" if service else "")
    env_dir = context
    dockerfile_path = env_dir / dockerfile
    args = {**(build_args or {}), "BASE_IMAGE": base_image}
    base_id = await image_id(docker, base_image, timeout_s=api_timeout_s, url=url,
                             where=f"{where}: base image")
    if base_id is None:
        raise ImageError(
            f"{where}: base image {base_image} is missing on {url}; "
            "run `python -m rsr_async images bootstrap`"
        )
    hidden = await anyio.to_thread.run_sync(
        lambda: hidden_entries(task, env_dir) | dockerignored(env_dir, dockerfile)
    )
    digest = await anyio.to_thread.run_sync(
        lambda: context_digest(env_dir, base_id=base_id, exclude=hidden)
    )
    if dockerfile != "Dockerfile" or build_args or target:
        # Only then: the tags of plain task images stay what they were.
        extra = f"{dockerfile}\0" + "\0".join(f"{k}={v}" for k, v in sorted(args.items()))
        if target:
            extra += f"\0target={target}"
        digest = hashlib.sha256(f"{digest}\0{extra}".encode()).hexdigest()
    # "/" never appears in a task name: task "a" service "b-c" and task "a-b" service "c"
    # get different repositories.
    tag = task_image_tag(f"{task.name}/{service}" if service else task.name, digest)
    if await image_id(docker, tag, timeout_s=api_timeout_s, url=url, where=f"{where}: image") is not None:
        return tag, False
    archive = await anyio.to_thread.run_sync(_context_tar, env_dir, hidden)
    lines: list[str] = []
    try:
        with anyio.fail_after(task.build_timeout_s), docker_errors(
            f"{where}: image build failed", url=url, permanent_4xx=True, error=ImageBuildError
        ):
            build = _build(
                docker,
                archive,
                tag=tag,
                buildargs=args,
                dockerfile=dockerfile,
                target=target,
                labels={"rsr_async.task": task.name, "rsr_async.content": digest}
                | ({"rsr_async.service": service} if service else {}),
            )
            async with aclosing(build) as items:
                async for item in items:
                    text = item.get("stream") or item.get("status") or ""
                    if text:
                        lines.append(str(text))
    except TimeoutError as exc:
        log = "".join(lines)
        await _save_log(log_dir, tag, log)
        raise ImageBuildError(
            f"{where}: image build timed out after {task.build_timeout_s:.0f} s "
            f"(build_timeout_sec); last output:\n{log[-_LOG_TAIL:]}",
            log=log,
        ) from exc
    except ImageBuildError as exc:
        # A failed step or a Dockerfile Docker refused is the task's fault (permanent); a
        # 5xx or the host's trouble may pass on another attempt (the table decides).
        lines.append(f"ERROR: {exc}\n")
        log = "".join(lines)
        await _save_log(log_dir, tag, log)
        hint = ""
        if "BASE_IMAGE" not in dockerfile_path.read_text(errors="replace"):
            hint = " (no registry here: the Dockerfile should start `ARG BASE_IMAGE` / `FROM ${BASE_IMAGE}`)"
        error = ImageBuildError(f"{exc}{hint}; last output:\n{log[-_LOG_TAIL:]}", log=log)
        error.permanent, error.retryable = exc.permanent, exc.retryable
        raise error from exc
    await _save_log(log_dir, tag, "".join(lines))
    return tag, True


def _not_retryable(error: ImageError) -> ImageError:
    return error.as_permanent()  # a missing file stays missing on the next attempt


async def _save_log(log_dir: Path | None, tag: str, log: str) -> None:
    if log_dir is None:
        return

    def write() -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / (tag.replace(":", "-").replace("/", "-") + ".log")).write_text(log)

    await anyio.to_thread.run_sync(write)


class BuildOnce:
    """Single flight: concurrent requests for one key run one build, others wait for it.

    If the builder is cancelled or fails, waiters do not hang: each retries (a failure
    is raised to every waiter of that attempt). A non-retryable failure (a build error)
    is remembered and raised at once to later requests.
    """

    def __init__(self) -> None:
        self._done: dict[str, str] = {}
        self._running: dict[str, anyio.Event] = {}
        self._failed: dict[str, BaseException] = {}

    async def get(self, key: str, build: Callable[[], Awaitable[str]]) -> str:
        while True:
            if key in self._done:
                return self._done[key]
            known = self._failed.get(key)
            if known is not None and not getattr(known, "retryable", True):
                # A Dockerfile that failed to build fails again: every later episode of
                # that task would hold a build slot for nothing.
                raise known
            event = self._running.get(key)
            if event is None:
                break
            await event.wait()
            error = self._failed.get(key)
            if error is not None and key not in self._running:
                raise error
        event = anyio.Event()
        self._running[key] = event
        self._failed.pop(key, None)
        try:
            result = await build()
        except Exception as exc:
            self._failed[key] = exc
            raise
        else:
            self._done[key] = result
            return result
        finally:
            del self._running[key]
            event.set()


# ----------------------------------------------------------------------------- image files

IMAGE_FILES_MAX = 5_000
"""Most paths :class:`~rsr_async.schema.ImageFiles` keeps of one image beyond the base.

Past it the deepest paths (then the last by name) are dropped and ``truncated`` says so:
the audit then flags a dropped path as it did before any listing (stricter, never
laxer). Every successful episode result carries the listing, so this caps its size
(about 60 bytes a path). A task's own files are shallow (``/app/...``); what a large
``pip install`` adds deep in ``site-packages`` is what goes first."""
IMAGE_FILES_TIMEOUT_S = 60.0
"""Deadline for one listing: the ``find`` is killed inside the container a little
earlier, and what it printed by then is kept (marked ``truncated``)."""
_LISTING_LINES_MAX = 200_000
"""Lines the container keeps of its whole filesystem, base included (the base image has
about 10,000): bounds what is copied out of a huge image."""
_LISTING_DIR = "/tmp/.rsr-image-files"
_LISTING_PRUNE = (
    "/proc", "/sys", "/dev", "/run", "/tmp", "/usr/share/doc", "/usr/share/man",
    "/usr/share/info", "/usr/share/locale", "/var/cache", "/var/lib/apt/lists",
    "/var/lib/dpkg/info",
)
"""Never listed: kernel views and run-time directories (the audit knows ``/proc``,
``/sys``, ``/dev``, ``/tmp``, ``/run`` whole), and package documentation and caches,
large and never typed by path."""
_BIN_DIRS = frozenset({"/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"})


def _listing_script(find_timeout_s: float) -> str:
    prunes = " -o ".join(f"-path {p}" for p in _LISTING_PRUNE)
    # find's exit status goes to its own file: sh has no pipefail. `head` bounds what is
    # kept (find dies of SIGPIPE past it, which the line count reveals).
    # git's object store is listed, not its thousands of objects.
    line = "-printf '%d\\t%y\\t%p\\n'"
    return (
        f"mkdir -p {_LISTING_DIR} && "
        f"{{ timeout -s KILL {find_timeout_s:.0f} find / -xdev "
        f"\\( {prunes} -o -name __pycache__ \\) -prune "
        f"-o -path '*/.git/objects' -prune {line} "
        f"-o \\( -type f -o -type d -o -type l \\) ! -name '*[[:cntrl:]]*' {line} 2>/dev/null; "
        f"echo $? > {_LISTING_DIR}/status; }} | head -n {_LISTING_LINES_MAX + 1} > {_LISTING_DIR}/found"
    )


class ImageListing(msgspec.Struct, frozen=True, kw_only=True):
    """One image's whole filesystem as ``find`` saw it (the pruned trees left out)."""

    paths: dict[str, int]
    """Path → depth (``/`` is 0, ``/app`` is 1)."""
    complete: bool
    """False when ``find`` hit its deadline or the listing its line cap."""
    seconds: float


def _read_listing(archive: tarfile.TarFile) -> tuple[dict[str, int], bool]:
    """Path → depth from the copied-out listing, and whether it is complete."""
    found = status = b""
    for member in archive.getmembers():
        handle = archive.extractfile(member) if member.isfile() else None
        if handle is not None:
            name = posixpath.basename(member.name)
            if name == "found":
                found = handle.read()
            elif name == "status":
                status = handle.read()
    paths: dict[str, int] = {}
    lines = found.decode("utf-8", errors="replace").splitlines()
    for line in lines[:_LISTING_LINES_MAX]:
        depth, _, rest = line.partition("\t")
        kind, _, path = rest.partition("\t")
        if depth.isdigit() and kind in ("f", "d", "l") and path.startswith("/") and path.isprintable():
            paths[path] = int(depth)
    # 1: find could not read some entry and listed the rest; 137 (killed at its deadline)
    # or 141 (SIGPIPE past the line cap): cut short.
    complete = status.strip() in (b"0", b"1") and len(lines) <= _LISTING_LINES_MAX
    return paths, complete


async def _remove_container(docker: aiodocker.Docker, container_id: str, *, timeout_s: float) -> None:
    # Best effort: the pool's sweeps take what Docker refused or could not be asked.
    with anyio.CancelScope(shield=True), anyio.move_on_after(timeout_s), contextlib.suppress(
        SandboxError
    ), docker_errors(f"remove listing container {container_id[:12]}"):
        await docker.containers.container(container_id).delete(force=True, v=True)


async def list_image_paths(
    docker: aiodocker.Docker,
    image: str,
    *,
    labels: dict[str, str],
    url: str = "",
    api_timeout_s: float,
    timeout_s: float = IMAGE_FILES_TIMEOUT_S,
    start_slot: Callable[[], Awaitable[anyio.Semaphore]] | None = None,
) -> ImageListing:
    """Every file, directory and link of ``image``, from one short-lived container.

    The container (labelled ``labels``: the pool's, so its sweeps cover it; no network,
    root, the pool's capabilities) runs ``find / -xdev`` with the prunes of
    :data:`_LISTING_PRUNE`, killed after ``timeout_s`` less a margin; the listing is
    copied out (``GET /containers/{id}/archive``, whatever the log driver) and the
    container removed, shielded, whatever happens. ``start_slot``: the host's start
    limiter (held from create to start, as for every container). Raises
    :class:`SandboxError` (its subclasses) when Docker fails or the deadline passes; an
    image with no ``sh`` or GNU ``find`` lists empty and incomplete.
    """
    started = time.monotonic()
    where = f"list the files of image {image}"
    config: dict[str, Any] = {
        "Image": image,
        "Entrypoint": ["/bin/sh", "-c"],
        "Cmd": [_listing_script(max(1.0, timeout_s - 10.0))],
        "User": "0:0",
        "WorkingDir": "/",
        "Labels": labels,
        "NetworkDisabled": True,
        "AttachStdout": False,
        "AttachStderr": False,
        "HostConfig": {
            "NetworkMode": "none",
            "Memory": 512 * 1024 * 1024,
            "MemorySwap": 512 * 1024 * 1024,
            "PidsLimit": 64,
            "CapDrop": ["ALL"],
            "CapAdd": ["DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER"],
            "SecurityOpt": ["no-new-privileges"],
            "AutoRemove": False,
        },
    }
    container_id: str | None = None
    try:
        with docker_errors(where, url=url, error=ImageError):
            slot = await start_slot() if start_slot is not None else None
            try:
                # Shielded: a create the daemon finishes after we stopped listening would
                # be a container nobody knows the id of (the sweeps would still find it).
                with anyio.CancelScope(shield=True), anyio.fail_after(api_timeout_s):
                    container = await docker.containers.create(config)
                container_id = str(container.id)
                with anyio.fail_after(api_timeout_s):
                    await container.start()
            finally:
                if slot is not None:
                    slot.release()
            with anyio.fail_after(timeout_s):
                await container.wait(timeout=timeout_s)
            with anyio.fail_after(api_timeout_s):
                archive = await container.get_archive(_LISTING_DIR)
        paths, complete = await anyio.to_thread.run_sync(_read_listing, archive)
    finally:
        if container_id is not None:
            await _remove_container(docker, container_id, timeout_s=api_timeout_s)
    if not paths:
        # Not Docker's trouble: the same image lists empty every time, so this is the
        # answer (kept per image id: nothing beyond the base is known, said as truncated).
        log.warning("%s: the listing came back empty (no /bin/sh, or no GNU find with "
                    "-printf, in the image?); the audit knows only the base image's paths", where)
        complete = False
    return ImageListing(paths=paths, complete=complete, seconds=time.monotonic() - started)


def beyond_base(
    listing: ImageListing,
    base: ImageListing | None,
    *,
    image: str,
    base_id: str = "",
    cap: int = IMAGE_FILES_MAX,
) -> ImageFiles:
    """The paths of ``listing`` that ``base`` lacks, shallowest first then by name, at most
    ``cap``; the commands are the names of those in ``bin`` directories.

    Every path kept is one ``find`` saw in the image, so an incomplete base listing can
    only add true paths, never invent one."""
    known = base.paths if base is not None else {}
    new = sorted((depth, path) for path, depth in listing.paths.items() if path not in known)
    kept = [path for _, path in new[:cap]]
    commands = sorted({posixpath.basename(p) for p in kept if posixpath.dirname(p) in _BIN_DIRS})
    return ImageFiles(
        image=image,
        base=base_id,
        paths=tuple(kept),
        commands=tuple(commands),
        truncated=len(new) > cap or not listing.complete,
        listed_s=round(listing.seconds, 3),
    )


_CACHE_VERSION = 1
"""Bumped whenever what a listing holds changes (prunes, fields): older entries are
then never read."""


class ImageListings:
    """:class:`~rsr_async.schema.ImageFiles` per image id, listed once (single flight),
    with the base image's own listing (once per base id) subtracted.

    Kept in memory by one :class:`~rsr_async.sandbox.SandboxPool`, and in ``cache_dir``
    (``sandbox.image_files_cache``) when given: an image id names its content, so its
    listing over a given base id never changes, and a later run (a rerun, the next
    stage, the next benchmark repetition) reads it instead of starting a container and
    walking the image again (about a second and a container's start, per image, per
    run, while the episode that asked waits). A failed listing is not remembered: the
    next request tries again.
    """

    def __init__(self, cache_dir: Path | None = None) -> None:
        self._bases: dict[str, ImageListing] = {}
        self._files: dict[str, ImageFiles] = {}
        self._running: dict[str, anyio.Event] = {}
        self._cache_dir = cache_dir

    async def _once(self, done: dict[str, _T], key: str, make: Callable[[], Awaitable[_T]]) -> _T:
        while key not in done:
            event = self._running.get(key)
            if event is not None:
                await event.wait()
                continue  # done, or failed: then this request tries itself
            event = self._running[key] = anyio.Event()
            try:
                done[key] = await make()
            finally:
                del self._running[key]
                event.set()
        return done[key]

    async def files(
        self,
        docker: aiodocker.Docker,
        image: str,
        *,
        base_image: str,
        labels: dict[str, str],
        url: str = "",
        api_timeout_s: float,
        timeout_s: float = IMAGE_FILES_TIMEOUT_S,
        start_slot: Callable[[], Awaitable[anyio.Semaphore]] | None = None,
    ) -> ImageFiles:
        """What ``image`` holds beyond ``base_image`` on this Docker host (the arguments
        are :func:`list_image_paths`'s)."""
        task_id = await image_id(docker, image, timeout_s=api_timeout_s, url=url, where=f"image {image}")
        base_id = await image_id(docker, base_image, timeout_s=api_timeout_s, url=url,
                                 where=f"image {image}: base image {base_image}")
        if task_id is None:
            raise ImageError(f"list the files of image {image}: it is not on {url or 'the host'}")
        if task_id == base_id:
            return ImageFiles(image=task_id, base=base_id)  # nothing beyond the base

        def lister(name: str) -> Callable[[], Awaitable[ImageListing]]:
            return lambda: list_image_paths(docker, name, labels=labels, url=url,
                                            api_timeout_s=api_timeout_s, timeout_s=timeout_s,
                                            start_slot=start_slot)

        async def diffed() -> ImageFiles:
            cached = await anyio.to_thread.run_sync(self._read_cached, task_id, base_id or "")
            if cached is not None:
                return cached
            base = None
            if base_id is not None:
                base = await self._once(self._bases, f"base\0{base_id}", lister(base_image))
            listing = await lister(image)()
            files = beyond_base(listing, base, image=task_id, base_id=base_id or "")
            await anyio.to_thread.run_sync(self._write_cached, files)
            return files

        return await self._once(self._files, task_id, diffed)

    def _cache_path(self, image: str, base: str) -> Path | None:
        if self._cache_dir is None:
            return None
        key = hashlib.sha256(f"{_CACHE_VERSION}\0{image}\0{base}\0{IMAGE_FILES_MAX}".encode())
        return self._cache_dir / f"{key.hexdigest()[:40]}.json"

    def _read_cached(self, image: str, base: str) -> ImageFiles | None:
        """The stored listing of ``image`` over ``base``; None when absent or unreadable."""
        path = self._cache_path(image, base)
        if path is None:
            return None
        try:
            files = msgspec.json.decode(path.read_bytes(), type=ImageFiles)
        except (OSError, msgspec.DecodeError):
            return None
        return files if (files.image, files.base) == (image, base) else None

    def _write_cached(self, files: ImageFiles) -> None:
        """Store ``files`` (atomically: a reader never sees half of it); best effort."""
        path = self._cache_path(files.image, files.base)
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_bytes(msgspec.json.encode(files))
            tmp.replace(path)
        except OSError as exc:
            log.warning("image listing of %s not kept in %s (%s): later runs list it again",
                        files.image, self._cache_dir, exc)
