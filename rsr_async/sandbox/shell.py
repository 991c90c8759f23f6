"""The hot path: one episode's terminal, as Harbor's Terminus 2 runs it.

Harbor 0.25.0 (``agents/terminus_2/tmux_session.py``) starts ``bash --login`` in a
160x40 tmux pane inside the container, types with ``tmux send-keys``, sleeps the whole
duration the model asked for, and shows the model the difference between two
``tmux capture-pane -p -S -`` captures. :class:`DockerShell` runs that same tmux in the
sandbox, so what the model sees is tmux's own pane (wrapping, ``\\r`` progress bars,
alternate screen, history limit, the ``clear`` rule) byte for byte. It drives tmux over
one persistent exec stream in control mode (``tmux -C``): keystrokes and captures are
commands on that stream, not a process per call, and the pane's raw output arrives on
it as ``%output`` notifications.

What it adds is only *when* a wait may end early. The login bash's ``PROMPT_COMMAND``
(given in the environment) appends an invisible marker to ``PS1``/``PS2``: an OSC
string tmux discards, carrying the exit status and the job count. A wait ends early
only when every Enter typed at an idle prompt got its prompt back, the last is a PS1
with no job running and nothing printed after it: the moment after which waiting longer
could not show the model anything more. Everything else (an empty-keystrokes poll, a
background job, keys typed into a running program) waits the full duration, capped
at 60 s as Terminus 2 caps it.

An image without tmux gets :class:`PtyShell`: the same login bash and markers on a pty
exec stream, with an in-process terminal emulation (pyte) whose observations follow
the older, stream-based rules; it logs that the run is not at parity.
"""

from __future__ import annotations

import collections
import logging
import secrets
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import aiodocker
import anyio
import anyio.lowlevel

from ..errors import ContainerError, SandboxError, ShellClosedError
from .docker_errors import close_quietly, docker_errors
from .terminal import (
    HISTORY_LINES,
    SCREEN_COLUMNS,
    SCREEN_LINES,
    TerminalBuffer,
    decode_control_output,
    new_content,
    parse_keystrokes,
    tmux_quote,
    truncate_output,
)

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

__all__ = ["DockerShell", "PtyShell"]

log = logging.getLogger(__name__)

MAX_WAIT_S = 60.0
"""Terminus 2 runs a command for ``min(duration, 60)`` seconds."""

_SEND_KEYS_LIMIT = 16_000
"""Harbor pastes a key whose quoted ``send-keys`` command would exceed this (tmux's
message size); ``paste-buffer`` turns its newlines into carriage returns."""

_NO_TMUX = b"%rsr-no-tmux"

_SESSION_PROBE = (
    'read -r pane || exit 0; while read -r _; do n=0; for f in /proc/[0-9]*/stat; do l=; '
    'read -r l < "$f" 2>/dev/null || continue; set -- ${l##*) }; '
    '[ "$4" = "$pane" ] && n=$((n+1)); done; echo "rsr-session $n"; done'
)
"""Counts the processes in the pane's session (POSIX sh builtins only, any image): a
job bash does not track, ``( server & )``, still runs in it; a real daemon calls
``setsid`` and leaves, and its output does not reach the pane anyway. The pane's pid
is its first line of input: the probe starts alongside tmux, not after it (a fresh
container's first ``sh`` takes ~0.4 s to start under load, which used to come after
the first prompt: almost half of opening a shell)."""


def prompt_command(token: str) -> str:
    """The ``PROMPT_COMMAND`` that appends the marker to whatever PS1/PS2 the image's
    profile set (once: the suffix is removed before it is added again)."""
    primary = rf"\[\e]777;{token};P${{__rsr_s}};\j\a\]"
    secondary = rf"\[\e]777;{token};C\a\]"
    return (
        f"__rsr_s=$?;__rsr_m='{primary}';__rsr_c='{secondary}';"
        'PS1="${PS1%"$__rsr_m"}$__rsr_m";PS2="${PS2%"$__rsr_c"}$__rsr_c"'
    )


class _Reply:
    __slots__ = ("done", "error", "lines")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.lines: list[bytes] = []
        self.error = False


class _Stream:
    """One attached exec stream and the reader that pumps it (shared by both shells)."""

    def __init__(self, container: Any, name: str, api_timeout_s: float) -> None:
        self.container = container
        self.name = name
        self.api_timeout = api_timeout_s
        self.stream: Any = None
        self.alive = False
        self.error: BaseException | None = None
        self.changed = anyio.Event()
        self.reader_scope: anyio.CancelScope | None = None

    async def open(
        self, argv: list[str], *, tty: bool, env: dict[str, str], workdir: str | None
    ) -> None:
        try:
            with anyio.fail_after(self.api_timeout):
                with docker_errors(f"{self.name}: could not start the shell"):
                    execution = await self.container.exec(
                        argv, stdin=True, tty=tty, environment=env, workdir=workdir
                    )
                    self.stream = execution.start(detach=False)
                    await self.stream._init()  # connect now, so errors surface here
                    self.alive = True
                if tty:
                    try:
                        with docker_errors(f"{self.name}: shell resize"):
                            await execution.resize(h=SCREEN_LINES, w=SCREEN_COLUMNS)
                    except ContainerError:
                        pass  # refused: the exec may not have its pty yet; the size still holds
        except SandboxError as exc:  # a refusal, or the daemon: either way no shell
            raise ShellClosedError(str(exc)) from exc
        except TimeoutError as exc:
            raise ShellClosedError(
                f"{self.name}: the shell did not start within {self.api_timeout:.0f} s"
            ) from exc

    async def read_loop(self, feed: Any) -> None:
        # The one await here without a deadline is reading an idle shell: that may last
        # the whole episode. close() cancels this scope.
        stream = self.stream
        if stream is None:  # closed before the reader got to run
            return
        with anyio.CancelScope() as scope:
            self.reader_scope = scope
            try:
                while True:
                    message = await stream.read_out()
                    if message is None:
                        break
                    feed(message.stream, message.data)
                    self.notify()
            except Exception as exc:  # a broken stream ends the shell; it never ends the episode
                self.error = exc
            finally:
                self.alive = False
                self.notify()

    def notify(self) -> None:
        changed, self.changed = self.changed, anyio.Event()
        changed.set()

    async def wait_change(self, seconds: float) -> None:
        with anyio.move_on_after(max(seconds, 0.0)):
            await self.changed.wait()

    async def write(self, data: bytes) -> None:
        if not self.alive:
            raise ShellClosedError(f"{self.name}: the shell has exited")
        try:
            with anyio.fail_after(self.api_timeout), docker_errors(f"{self.name}: shell input"):
                await self.stream.write_in(data)
        except SandboxError as exc:
            self.alive = False
            self.error = exc
            raise ShellClosedError(f"{self.name}: the shell's stream closed: {exc}") from exc
        except TimeoutError as exc:
            self.error = exc
            raise ShellClosedError(
                f"{self.name}: the shell took no input for {self.api_timeout:.0f} s"
            ) from exc

    async def close(self) -> None:
        self.alive = False
        if self.reader_scope is not None:
            self.reader_scope.cancel()
        stream, self.stream = self.stream, None
        if stream is not None:
            await close_quietly(stream, what=f"{self.name}: shell close")


class _SessionProbe:
    """A persistent ``sh`` on its own exec stream that counts the pane session's
    processes on request (a process per check would cost a Docker exec each time)."""

    def __init__(self, container: Any, name: str, api_timeout_s: float) -> None:
        self._io = _Stream(container, name, api_timeout_s)
        self._partial = bytearray()
        self._counts: list[int] = []

    async def open(self, task_group: TaskGroup) -> None:
        """Start the probe; it counts nothing until :meth:`watch` names the pane."""
        await self._io.open(["sh", "-c", _SESSION_PROBE, "rsr-probe"], tty=False, env={}, workdir="/")
        task_group.start_soon(self._io.read_loop, self._feed)

    async def watch(self, pane_pid: str) -> None:
        """Count the processes of the session led by ``pane_pid`` from now on."""
        try:
            await self._io.write(f"{pane_pid}\n".encode())
        except ShellClosedError:
            pass  # count() says None: no early return

    def _feed(self, stream: int, data: bytes) -> None:
        if stream != 1:
            return
        self._partial += data
        *lines, rest = self._partial.split(b"\n")
        self._partial = bytearray(rest)
        for line in lines:
            if line.startswith(b"rsr-session "):
                self._counts.append(int(line.split()[1]))

    async def count(self) -> int | None:
        """Processes in the pane's session now; None when the probe is gone."""
        if not self._io.alive:
            return None
        seen = len(self._counts)
        try:
            await self._io.write(b"\n")
        except ShellClosedError:
            return None
        with anyio.move_on_after(self._io.api_timeout):
            while len(self._counts) == seen and self._io.alive:
                await self._io.wait_change(self._io.api_timeout)
        return self._counts[seen] if len(self._counts) > seen else None

    async def close(self) -> None:
        await self._io.close()


class _Waiter:
    """When a wait may end early: the rule both shells share, over prompt markers."""

    def __init__(self, buffer: TerminalBuffer) -> None:
        self.buffer = buffer
        self.expected: int | None = 0
        """Markers the last keys will bring (None: unknown, so the wait is never cut)."""
        self.markers_at_send = 0

    def _answered(self) -> bool:
        return (
            self.expected is not None
            and self.buffer.markers - self.markers_at_send >= self.expected
        )

    def sent(self, data: bytes) -> None:
        # At bash's prompt (a PS1 marker, every Enter sent so far answered) each Enter
        # gives one marker: PS1, or PS2 inside a heredoc or an open quote; so does C-c.
        # Typed into a running program, only keys without an Enter (C-c, q) can be
        # counted on: they end it or they do not, and bash has nothing typed ahead.
        at_prompt = self.buffer.last_kind == "P" and self._answered()
        newlines = data.count(b"\r") + data.count(b"\n")
        if at_prompt:
            self.expected = newlines + data.count(b"\x03")
        else:
            self.expected = 1 if data and not newlines else None
        self.markers_at_send = self.buffer.markers

    def done(self) -> bool:
        """Every key sent has its prompt back, nothing printed since, no job left.
        Keys that run nothing (text without Enter, an empty poll) are never done: the
        echo of typed text may still be on its way."""
        buffer = self.buffer
        return (
            bool(self.expected)
            and self._answered()
            and buffer.last_kind == "P"
            and not buffer.printed_since_marker
            and buffer.last_jobs == 0
        )


class DockerShell:
    """Harbor's tmux pane in the sandbox, over one control-mode exec stream (implements
    ShellSession; falls back to :class:`PtyShell` when the image has no tmux).

    Open it with :meth:`DockerSandbox.shell`. A reader task, owned by the sandbox's task
    group, keeps draining the stream while the model thinks.
    """

    def __init__(
        self,
        container: aiodocker.docker.DockerContainer,
        *,
        name: str,
        api_timeout_s: float,
        quiet_s: float = 0.05,
    ) -> None:
        self._container = container
        self._name = name
        self._api_timeout = api_timeout_s
        self._quiet = quiet_s
        self._token = "rsr" + secrets.token_hex(8)
        self._session = "rsr-" + secrets.token_hex(4)
        self._io = _Stream(container, name, api_timeout_s)
        self._buffer = TerminalBuffer(self._token, keep_text=False)
        self._waiter = _Waiter(self._buffer)
        self._partial = bytearray()
        self._block: bytes | None = None
        self._block_lines: list[bytes] = []
        self._pending: collections.deque[_Reply] = collections.deque()
        self._no_tmux = False
        self._capture = ""
        self._previous: str | None = None
        self._fallback: PtyShell | None = None
        self._probe = _SessionProbe(container, name, api_timeout_s)
        self._idle_processes: int | None = None

    @property
    def alive(self) -> bool:
        """False once the shell has exited (``exit``, C-d) or its stream broke."""
        if self._fallback is not None:
            return self._fallback.alive
        return self._io.alive

    @property
    def error(self) -> BaseException | None:
        """What ended the stream, when it was not the shell exiting."""
        if self._fallback is not None:
            return self._fallback.error
        return self._io.error

    @property
    def uses_tmux(self) -> bool:
        """Whether this is Harbor's tmux pane (False: the image has no tmux)."""
        return self._fallback is None

    @property
    def last_exit_status(self) -> int | None:
        """Exit status of the last command run at the prompt, when the prompt reported it."""
        if self._fallback is not None:
            return self._fallback.last_exit_status
        return self._buffer.last_status

    async def start(
        self, task_group: TaskGroup, *, env: dict[str, str] | None, workdir: str | None
    ) -> None:
        """Start tmux and its login bash as Harbor does, and wait for the first prompt."""
        environment = dict(env or {})
        environment.update(
            TERM="xterm-256color", SHELL="/bin/bash", PROMPT_COMMAND=prompt_command(self._token)
        )
        # A server per shell (-L): shells opened at once in one container would race to
        # start the default one. Inside the pane $TMUX names it, so `tmux ls` there works.
        script = (
            f"command -v tmux >/dev/null 2>&1 || {{ echo '{_NO_TMUX.decode()}'; exit 127; }}; "
            f'exec tmux -L "$1" -C new-session -x {SCREEN_COLUMNS} -y {SCREEN_LINES} -s "$1" '
            f"'bash --login' \\; set-option -g history-limit {HISTORY_LINES}"
        )
        await self._io.open(
            ["sh", "-c", script, "rsr-shell", self._session], tty=False, env=environment,
            workdir=workdir,
        )
        task_group.start_soon(self._io.read_loop, self._feed)
        await self._probe.open(task_group)  # starts in the container while bash logs in
        with anyio.move_on_after(self._api_timeout):
            while self._io.alive and self._buffer.prompts == 0 and not self._no_tmux:
                await self._io.wait_change(self._api_timeout)
        if self._no_tmux:
            await self._io.close()
            await self._probe.close()
            log.warning("%s: the image has no tmux; observations are emulated, not Harbor's", self._name)
            self._fallback = PtyShell(
                self._container, name=self._name, api_timeout_s=self._api_timeout, quiet_s=self._quiet
            )
            await self._fallback.start(task_group, env=env, workdir=workdir)
            return
        if self._buffer.prompts == 0:
            await self.close()
            raise ShellClosedError(
                f"{self._name}: bash in tmux gave no prompt within {self._api_timeout:.0f} s"
                + (f" ({self._io.error})" if self._io.error else "")
            )
        pane_pid = await self._command(f"display-message -p -t {self._session} '#{{pane_pid}}'")
        if pane_pid and pane_pid[0].strip().isdigit():
            await self._probe.watch(pane_pid[0].strip().decode())
            self._idle_processes = await self._probe.count()
        else:
            await self._probe.close()  # no pane to watch: waits are never cut short
        await self._capture_pane()

    # ------------------------------------------------------------ control mode

    def _feed(self, stream: int, data: bytes) -> None:
        if stream != 1:
            return  # tmux's own complaints; a failed command answers with %error
        self._partial += data
        start = 0
        while True:
            end = self._partial.find(b"\n", start)
            if end < 0:
                break
            self._line(bytes(self._partial[start:end]))
            start = end + 1
        del self._partial[:start]

    def _line(self, line: bytes) -> None:
        if self._block is not None:
            if line.startswith((b"%end ", b"%error ")) and line.split(b" ", 1)[1] == self._block:
                if self._block.endswith(b" 1") and self._pending:
                    reply = self._pending.popleft()
                    reply.lines = self._block_lines
                    reply.error = line.startswith(b"%error")
                    reply.done.set()
                self._block = None
                self._block_lines = []
            else:
                self._block_lines.append(line)
        elif line.startswith(b"%output "):
            payload = line.split(b" ", 2)[2] if line.count(b" ") >= 2 else b""
            self._buffer.feed(decode_control_output(payload))
        elif line.startswith(b"%begin "):
            self._block = line.split(b" ", 1)[1]
        elif line == _NO_TMUX:
            self._no_tmux = True

    async def _command(self, line: str) -> list[bytes]:
        reply = _Reply()
        self._pending.append(reply)
        await self._io.write(line.encode("utf-8") + b"\n")
        with anyio.move_on_after(self._api_timeout):
            while not reply.done.is_set() and self._io.alive:
                await self._io.wait_change(self._api_timeout)
        if not reply.done.is_set():
            raise ShellClosedError(
                f"{self._name}: tmux did not answer {line[:40]!r} within {self._api_timeout:.0f} s"
            )
        if reply.error:
            message = b" ".join(reply.lines).decode("utf-8", "replace")
            raise ShellClosedError(f"{self._name}: tmux refused {line[:40]!r}: {message}")
        return reply.lines

    async def _capture_pane(self) -> None:
        try:
            lines = await self._command(f"capture-pane -p -S - -t {self._session}")
        except ShellClosedError:
            if self._io.alive:
                raise
            return  # bash exited: the last capture is what the pane showed
        self._capture = "".join(line.decode("utf-8", "replace") + "\n" for line in lines)

    # ------------------------------------------------------------ ShellSession

    async def send(self, keys: str) -> None:
        """Type Terminus keystrokes as ``tmux send-keys`` does: one tmux key name
        (``C-c``, ``Enter``, ``Up`` ...) is that key, anything else is literal text."""
        if self._fallback is not None:
            return await self._fallback.send(keys)
        if not self._io.alive:
            raise ShellClosedError(f"{self._name}: the shell has exited")
        self._waiter.sent(parse_keystrokes(keys).replace(b"\r", b"\n") if keys else b"")
        if keys:
            await self._send_key(keys)

    async def _send_key(self, key: str) -> None:
        """One ``send-keys`` of ``key``: a key name is that key, other text literal; text
        over tmux's message size goes with ``-l``, its newlines as Enter."""
        prefix = f"tmux send-keys -t {self._session} -- "
        if len(prefix) + 1 + len(_shell_quoted(key).encode()) > _SEND_KEYS_LIMIT:
            await self._command(
                f"send-keys -l -t {self._session} -- {tmux_quote(key.replace(chr(10), chr(13)))}"
            )
        else:
            await self._command(f"send-keys -t {self._session} -- {tmux_quote(key)}")

    async def send_keys(self, keys: Sequence[str]) -> None:
        """One ``tmux send-keys`` with ``keys`` as its arguments, as terminal-bench's
        ``TmuxSession`` sends them: tmux itself takes an argument that is a key name
        (``Enter``, ``C-d``) as that key and any other as literal text (implements
        :class:`~rsr_async.sandbox.base.TmuxPane`)."""
        if self._fallback is not None:
            raise ShellClosedError(f"{self._name}: the image has no tmux: tmux keys cannot be sent")
        if not self._io.alive:
            raise ShellClosedError(f"{self._name}: the shell has exited")
        self._waiter.sent(b"".join(parse_keystrokes(key) for key in keys).replace(b"\r", b"\n"))
        if not keys:
            return
        prefix = f"send-keys -t {self._session} --"
        command = " ".join([prefix, *(tmux_quote(key) for key in keys)])
        if len(command.encode()) <= _SEND_KEYS_LIMIT:
            await self._command(command)
            return
        # Over tmux's message size: one key at a time, as :meth:`send` sends one.
        for key in keys:
            await self._send_key(key)

    async def wait_for(self, channel: str, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for ``tmux wait -S channel`` on this pane's tmux server;
        False when the time ran out. The waiting tmux client runs in its own exec (as
        terminal-bench runs ``timeout N tmux wait done``); one that timed out or was
        cancelled is woken by signalling the channel, so no client is left behind."""
        if self._fallback is not None:
            raise ShellClosedError(f"{self._name}: the image has no tmux: nothing to wait for")
        waiter = _Stream(self._container, f"{self._name}: wait-for", self._api_timeout)
        seen = bytearray()

        def feed(stream: int, data: bytes) -> None:
            if stream == 1:
                seen.extend(data)

        await waiter.open(
            ["sh", "-c", 'tmux -L "$1" wait-for "$2" && echo rsr-woken', "rsr-wait", self._session, channel],
            tty=False, env={}, workdir="/",
        )
        try:
            with anyio.move_on_after(max(timeout_s, 0.0)) as scope:
                await waiter.read_loop(feed)
            if b"rsr-woken" in seen:
                return True
            if not scope.cancelled_caught and waiter.error is None:
                raise ShellClosedError(
                    f"{self._name}: tmux wait-for {channel!r} ended without the signal "
                    f"({bytes(seen).decode('utf-8', 'replace').strip() or 'no output'})"
                )
            return False
        finally:
            if b"rsr-woken" not in seen and self._io.alive:
                with anyio.move_on_after(self._api_timeout, shield=True):
                    try:
                        await self._command(f"wait-for -S {tmux_quote(channel)}")
                    except ShellClosedError:
                        pass  # the server is gone, and its waiting client with it
            await waiter.close()

    async def capture_history(self) -> str:
        """The pane's whole scrollback and screen now (``capture-pane -p -S -``)."""
        if self._fallback is not None:
            return self._fallback.screen()
        await self._capture_pane()
        return self._capture

    async def wait(self, max_s: float) -> bool:
        """Wait up to ``min(max_s, 60)`` seconds; True as soon as nothing more can come
        (every Enter got its prompt, no job runs, nothing printed since) or bash exited.
        Then capture the pane, which is what :meth:`observe` and :meth:`screen` read."""
        if self._fallback is not None:
            return await self._fallback.wait(max_s)
        await anyio.lowlevel.checkpoint()  # a cancel point even when already done
        deadline = time.monotonic() + min(max_s, MAX_WAIT_S)
        finished = False
        busy = False  # something outside bash's job table runs: wait it out
        while True:
            if not self._io.alive:
                finished = True
                break
            if not busy and self._waiter.done():
                if await self._session_idle():
                    finished = True
                    break
                busy = True
            now = time.monotonic()
            if now >= deadline:
                break
            await self._io.wait_change(deadline - now)
        await self._capture_pane()
        return finished

    async def _session_idle(self) -> bool:
        if self._idle_processes is None:
            return False  # no probe: never end a wait early
        count = await self._probe.count()
        return count is not None and count <= self._idle_processes

    def observe(self, max_bytes: int | None = None) -> str:
        """Harbor's new content since the last observation (from the previous capture's
        last line on: the prompt line, the echoed command, the output); ``""`` when
        nothing is new or the previous capture is no longer found (the caller shows the
        screen then). Cut to ``max_bytes`` when given."""
        if self._fallback is not None:
            return self._fallback.observe(max_bytes)
        found = new_content(self._previous, self._capture)
        self._previous = self._capture
        if found is None or not found.strip():
            return ""
        return found if max_bytes is None else truncate_output(found, max_bytes)

    def screen(self) -> str:
        """The pane's visible 40 rows at the last capture, as ``capture-pane -p`` prints
        them (a newline after each row, blank rows kept)."""
        if self._fallback is not None:
            return self._fallback.screen()
        rows = self._capture.split("\n")[:-1]
        return "".join(row + "\n" for row in rows[-SCREEN_LINES:])

    async def close(self) -> None:
        """End the tmux session (bash gets a hang-up) and close the stream."""
        if self._fallback is not None:
            await self._fallback.close()
        if self._io.alive:
            with anyio.move_on_after(2, shield=True):
                try:
                    await self._io.write(f"kill-session -t {self._session}\n".encode())
                except ShellClosedError:
                    pass  # already gone
        await self._io.close()
        await self._probe.close()


def _shell_quoted(keys: str) -> str:
    """``shlex.quote``, which Harbor's command-length check measures."""
    import shlex

    return shlex.quote(keys)


class PtyShell:
    """A login ``bash`` on a pty exec stream with an in-process terminal (pyte): the
    fallback for images without tmux. Observations are the cleaned output stream, not
    tmux's pane diff."""

    def __init__(
        self,
        container: aiodocker.docker.DockerContainer,
        *,
        name: str,
        api_timeout_s: float,
        quiet_s: float = 0.05,
    ) -> None:
        self._name = name
        self._api_timeout = api_timeout_s
        self._token = "rsr" + secrets.token_hex(8)
        self._io = _Stream(container, name, api_timeout_s)
        self._buffer = TerminalBuffer(self._token)
        self._waiter = _Waiter(self._buffer)

    @property
    def alive(self) -> bool:
        """False once the shell has exited (``exit``, C-d) or its stream broke."""
        return self._io.alive

    @property
    def error(self) -> BaseException | None:
        """What ended the stream, when it was not the shell exiting."""
        return self._io.error

    @property
    def last_exit_status(self) -> int | None:
        """Exit status of the last command run at the prompt, when the prompt reported it."""
        return self._buffer.last_status

    async def start(
        self, task_group: TaskGroup, *, env: dict[str, str] | None, workdir: str | None
    ) -> None:
        """Start a login bash, begin reading, and wait for the first prompt."""
        environment = dict(env or {})
        environment.update(
            TERM="screen",
            COLUMNS=str(SCREEN_COLUMNS),
            LINES=str(SCREEN_LINES),
            SHELL="/bin/bash",
            PROMPT_COMMAND=prompt_command(self._token),
        )
        await self._io.open(["bash", "--login", "-i"], tty=True, env=environment, workdir=workdir)
        task_group.start_soon(self._io.read_loop, self._feed)
        with anyio.move_on_after(self._api_timeout):
            while self._io.alive and self._buffer.prompts == 0:
                await self._io.wait_change(self._api_timeout)
        if self._buffer.prompts == 0:
            await self.close()
            raise ShellClosedError(
                f"{self._name}: bash gave no prompt within {self._api_timeout:.0f} s"
                + (f" ({self._io.error})" if self._io.error else "")
            )
        self._buffer.take_text()  # start-up noise is not part of any observation

    def _feed(self, stream: int, data: bytes) -> None:
        self._buffer.feed(data)

    async def send(self, keys: str) -> None:
        """Type Terminus keystrokes: literal text (newline = LF), or one key name."""
        data = parse_keystrokes(keys)
        self._waiter.sent(data)
        if data:
            await self._io.write(data)

    async def wait(self, max_s: float) -> bool:
        """Wait up to ``min(max_s, 60)``; True as soon as nothing more can come."""
        await anyio.lowlevel.checkpoint()
        deadline = time.monotonic() + min(max_s, MAX_WAIT_S)
        while True:
            if not self._io.alive or self._waiter.done():
                return True
            now = time.monotonic()
            if now >= deadline:
                return False
            await self._io.wait_change(deadline - now)

    def observe(self, max_bytes: int | None = None) -> str:
        """New output since the last observation, cleaned; "" when none."""
        text = self._buffer.take_text() if self._buffer.has_text() else ""
        if not text.strip():
            return ""
        return text if max_bytes is None else truncate_output(text, max_bytes)

    def screen(self) -> str:
        """The emulated screen (pyte, 160x40)."""
        return self._buffer.screen()

    async def close(self) -> None:
        """Stop reading and close the stream (bash gets a hang-up and exits)."""
        await self._io.close()
