"""The hot path: one persistent bash per episode on one attached exec stream with a pty.

Keystrokes go in with ``write_in``; a reader task pumps the stream into a
:class:`~rsr_async.sandbox.terminal.TerminalBuffer`. The prompt ends with an invisible
marker, so :meth:`DockerShell.wait` can return as soon as bash is back at its prompt
instead of sleeping the whole duration the model asked for.
"""

from __future__ import annotations

import secrets
import time
from typing import TYPE_CHECKING, Any

import aiodocker
import aiohttp
import anyio
import anyio.lowlevel

from ..errors import ShellClosedError
from .terminal import (
    SCREEN_COLUMNS,
    SCREEN_LINES,
    TerminalBuffer,
    enter_count,
    parse_keystrokes,
    truncate_output,
)

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

__all__ = ["DockerShell"]

PROMPT = r"\u@\h:\w\$ "
"""What the model sees: a normal-looking ``root@sandbox:/app# ``."""


class DockerShell:
    """One interactive ``bash`` on a pty, driven like a terminal (implements ShellSession).

    Open it with :meth:`DockerSandbox.shell`. A reader task, owned by the sandbox's task
    group, keeps draining output while the model thinks, so programs never block on a
    full pty and the screen stays current.
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
        self._buffer = TerminalBuffer(self._token)
        self._stream: Any = None
        self._alive = False
        self._changed = anyio.Event()
        self._reader_scope: anyio.CancelScope | None = None
        self._reader_done = anyio.Event()
        self._prompts_at_send = 0
        self._expected: int | None = 0
        self.error: BaseException | None = None
        """What ended the stream, when it was not the shell exiting."""

    @property
    def alive(self) -> bool:
        """False once the shell has exited (``exit``, C-d) or its stream broke."""
        return self._alive

    @property
    def last_exit_status(self) -> int | None:
        """Exit status of the last command run at the prompt, when the prompt reported it."""
        return self._buffer.last_status

    async def start(
        self, task_group: TaskGroup, *, env: dict[str, str] | None, workdir: str | None
    ) -> None:
        """Start bash, begin reading, and wait for the first prompt."""
        marker = rf"\[\e]777;{self._token};%s\a\]"
        environment = dict(env or {})
        environment.update(
            TERM="xterm-256color",
            COLUMNS=str(SCREEN_COLUMNS),
            LINES=str(SCREEN_LINES),
            # PROMPT_COMMAND keeps $? for the marker; bash restores $? after it runs.
            PROMPT_COMMAND="__rsr_status=$?",
            PS1=PROMPT + marker % "P${__rsr_status}",
            PS2="> " + marker % "C",
            HISTFILE="/dev/null",
        )
        try:
            with anyio.fail_after(self._api_timeout):
                execution = await self._container.exec(
                    ["bash", "--noprofile", "--norc", "-i"],
                    stdin=True,
                    tty=True,
                    environment=environment,
                    workdir=workdir,
                )
                self._stream = execution.start(detach=False)
                await self._stream._init()  # connect now, so errors surface here
                self._alive = True
                try:
                    await execution.resize(h=SCREEN_LINES, w=SCREEN_COLUMNS)
                except aiodocker.DockerError:
                    pass  # the exec may not have its pty yet; the screen size still holds
        except (aiodocker.DockerError, aiohttp.ClientError, OSError) as exc:
            raise ShellClosedError(f"{self._name}: could not start bash: {exc}") from exc
        except TimeoutError as exc:
            raise ShellClosedError(
                f"{self._name}: bash did not start within {self._api_timeout:.0f} s"
            ) from exc
        task_group.start_soon(self._read_loop)
        with anyio.move_on_after(self._api_timeout):
            while self._alive and self._buffer.prompts == 0:
                await self._wait_change(self._api_timeout)
        if self._buffer.prompts == 0:
            await self.close()
            raise ShellClosedError(
                f"{self._name}: bash gave no prompt within {self._api_timeout:.0f} s"
                + (f" ({self.error})" if self.error else "")
            )
        self._buffer.take_text()  # start-up noise is not part of any observation

    async def _read_loop(self) -> None:
        # The one await here without a deadline is reading an idle shell: that may last
        # the whole episode. close() cancels this scope.
        stream = self._stream
        if stream is None:  # closed before the reader got to run
            self._reader_done.set()
            return
        with anyio.CancelScope() as scope:
            self._reader_scope = scope
            try:
                while True:
                    message = await stream.read_out()
                    if message is None:
                        break
                    self._buffer.feed(message.data)
                    self._notify()
            except Exception as exc:  # a broken stream ends the shell; it never ends the episode
                self.error = exc
            finally:
                self._alive = False
                self._notify()
                self._reader_done.set()

    def _notify(self) -> None:
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    async def _wait_change(self, seconds: float) -> None:
        with anyio.move_on_after(max(seconds, 0.0)):
            await self._changed.wait()

    def _at_prompt(self) -> bool:
        buffer = self._buffer
        return buffer.last_kind == "P" and not buffer.printed_since_marker

    async def send(self, keys: str) -> None:
        """Type Terminus keystrokes: literal text, or one key name such as ``C-c``."""
        if not self._alive:
            raise ShellClosedError(f"{self._name}: the shell has exited")
        data = parse_keystrokes(keys)
        # From an idle prompt each Enter gives exactly one prompt back, so wait() can
        # return the moment the last one arrives. Typed ahead into a running program,
        # nobody knows how many prompts will come: wait() needs a quiet period then.
        # Keys with no Enter run nothing: only a prompt arriving later ends the wait.
        enters = enter_count(data)
        self._expected = enters if self._at_prompt() and (enters or not data) else None
        self._prompts_at_send = self._buffer.prompts
        if not data:
            return
        try:
            with anyio.fail_after(self._api_timeout):
                await self._stream.write_in(data)
        except (RuntimeError, OSError, aiohttp.ClientError) as exc:
            self._alive = False
            self.error = exc
            raise ShellClosedError(f"{self._name}: the shell's stream closed: {exc}") from exc
        except TimeoutError as exc:
            self.error = exc
            raise ShellClosedError(
                f"{self._name}: the shell took no input for {self._api_timeout:.0f} s"
            ) from exc

    def _done(self) -> bool:
        if not self._at_prompt():
            return False
        since = self._buffer.prompts - self._prompts_at_send
        if self._expected is not None and since >= self._expected:
            return True
        return since >= 1 and time.monotonic() - self._buffer.last_output_at >= self._quiet

    async def wait(self, max_s: float) -> bool:
        """Wait up to ``max_s``; True as soon as the command is done (or the shell exited).

        Done means bash printed its prompt after the last keystrokes and nothing after
        it: at once when every Enter sent got its prompt, else after ``quiet_s`` of quiet.
        """
        await anyio.lowlevel.checkpoint()  # a cancel point even when already done
        deadline = time.monotonic() + max_s
        while True:
            if not self._alive or self._done():
                return True
            now = time.monotonic()
            if now >= deadline:
                return False
            timeout = deadline - now
            if self._at_prompt():
                quiet_left = self._quiet - (now - self._buffer.last_output_at)
                timeout = min(timeout, max(quiet_left, 0.001))
            await self._wait_change(timeout)

    def observe(self, max_bytes: int = 10000) -> str:
        """New output since the last observation, cleaned and truncated; "" when none."""
        text = self._buffer.take_text() if self._buffer.has_text() else ""
        return truncate_output(text, max_bytes) if text.strip() else ""

    def screen(self) -> str:
        """The terminal screen as a person would see it now (pyte emulation, 160×40)."""
        return self._buffer.screen()

    async def close(self) -> None:
        """Stop reading and close the stream (bash gets a hang-up and exits)."""
        self._alive = False
        if self._reader_scope is not None:
            self._reader_scope.cancel()
        stream, self._stream = self._stream, None
        if stream is not None:
            with anyio.move_on_after(5, shield=True):
                try:
                    await stream.close()
                except (OSError, RuntimeError, aiohttp.ClientError):
                    pass  # already broken: nothing left to close
