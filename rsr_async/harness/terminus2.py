"""Terminus 2: the plain harness, the executor of the rewrite pipeline, and the seam
StateM and RSRT extend.

The loop (:meth:`Terminus2._loop`) is the whole protocol on one screen;
:class:`TerminusSession` holds the state it needs (the chat context, the trajectory, the
shell) and the things that take more than a line: asking the model, running commands,
handing off the context. Protocol text lives in ``templates/``, parsing in :mod:`.protocol`.

Extension point. A harness that is "Terminus 2 plus something" subclasses
:class:`Terminus2` (set ``name`` and ``session_class``, keep what it is handed, e.g. a
grader) and :class:`TerminusSession` (which reads those from :attr:`TerminusSession.harness`),
overriding only these hooks; each default does nothing, so plain Terminus 2 is unchanged:

- :meth:`TerminusSession.first_prompt_notes`: harness sections for the first prompt;
- :meth:`TerminusSession.before_turn`: before each agent turn (raise :class:`EpisodeEnd`
  to stop, e.g. on a harness wall clock);
- :meth:`TerminusSession.intercept`: a command before it reaches the shell (return the
  text to show instead of typing it);
- :meth:`TerminusSession.on_completion`: a confirmed completion claim (return a message
  to reject it and keep going, or None to end the episode);
- :meth:`TerminusSession.handoff_notes`: harness text for the first prompt after a
  context handoff.

Harness text (notes) reaches the model appended to the next prompt, and is recorded as
its own ``harness``-origin message, so export and compression drop it while the model
saw it in place.

Chat history is append-only, so the model server's prefix cache hits every turn; the
one exception is a context handoff, which starts a new context.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, ClassVar

import anyio

from ..errors import ContextLengthError, LLMServerError, ShellClosedError
from ..phases import phase
from ..schema import Command, EndReason, Message, Origin, Role, Trajectory
from . import protocol
from .base import AgentClock, EpisodeOutcome
from .protocol import Reply, render

if TYPE_CHECKING:  # the llm and sandbox packages pull in HTTP and Docker clients
    from ..config import HarnessConfig
    from ..llm.base import ChatMessage, ChatModel, Completion
    from ..sandbox.base import Sandbox, ShellSession
    from ..schema import EpisodeSpec
    from ..tasks.verifier import Verification
    from .base import Checkpoint

__all__ = ["EpisodeEnd", "Terminus2", "TerminusSession"]

SHELL_CLOSE_TIMEOUT_S = 10.0


class EpisodeEnd(Exception):
    """Control flow: the episode is over, for ``reason`` (hooks may raise it)."""

    def __init__(self, reason: EndReason, error: str | None = None) -> None:
        super().__init__(reason, error)
        self.reason: EndReason = reason
        self.error = error


class Terminus2:
    """The Terminus 2 harness (see ``/work/shared/REFERENCE.md``, "Terminus 2")."""

    name = "terminus2"
    session_class: ClassVar[type[TerminusSession]]
    """The class of an episode's session (set below :class:`TerminusSession`; a harness
    that extends Terminus 2 names its own subclass)."""

    def __init__(self, config: HarnessConfig) -> None:
        self.config = config

    def deadline_for(self, spec: EpisodeSpec) -> float:
        """The agent's wall clock for ``spec``, in seconds (the runner's backstop uses it)."""
        return spec.deadline_s if spec.deadline_s is not None else spec.task.agent_timeout_s

    def make_session(
        self,
        spec: EpisodeSpec,
        sandbox: Sandbox,
        model: ChatModel,
        shell: ShellSession,
        trajectory: Trajectory,
        checkpoint: Checkpoint | None,
    ) -> TerminusSession:
        """The session one episode runs in: a :attr:`session_class` made with this harness."""
        return self.session_class(self, spec, model, shell, trajectory, checkpoint, sandbox=sandbox)

    async def run(
        self,
        spec: EpisodeSpec,
        sandbox: Sandbox,
        model: ChatModel,
        *,
        checkpoint: Checkpoint | None = None,
        clock: AgentClock | None = None,
        shell: ShellSession | None = None,
        continued: bool = False,
    ) -> EpisodeOutcome:
        """Run one episode until completion, the turn cap, the deadline or an error.

        Does not run the verifier: the runner does, once the agent can no longer act.
        Infrastructure errors (model server, Docker) propagate for the engine to retry;
        ``checkpoint`` has the partial trajectory by then. The deadline runs on ``clock``
        (:class:`~rsr_async.harness.base.AgentClock`): a model call's time past the
        clock's per-call budget is not the agent's.

        A multi-step task (:mod:`rsr_async.rsr.steps`) runs each step as one such call, as
        Harbor runs Terminus 2 once per step: a fresh chat on the same terminal. It passes
        its ``shell`` (neither opened nor closed here) and, for steps after the first,
        ``continued``: the first prompt then shows what is new on the terminal since the
        previous step's last observation (Harbor's ``get_incremental_output``).
        """
        trajectory = Trajectory(task=spec.task.name, harness=self.name, model=model.model_name)
        deadline = self.deadline_for(spec)
        clock = clock or AgentClock()
        episode: TerminusSession | None = None
        reason: EndReason = "timeout"
        error: str | None = None
        owned = shell is None
        with clock.deadline(deadline):
            if shell is None:
                with phase("shell"):
                    shell = await sandbox.shell()
            try:
                episode = self.make_session(spec, sandbox, model, shell, trajectory, checkpoint)
                episode.clock = clock
                episode.continued = continued
                await self._loop(episode)
            except EpisodeEnd as end:
                reason, error = end.reason, end.error
            finally:
                if owned:
                    with anyio.CancelScope(shield=True), anyio.move_on_after(SHELL_CLOSE_TIMEOUT_S), phase(
                        "teardown"
                    ):
                        await shell.close()
        if reason == "timeout" and error is None:
            error = f"the episode's wall clock ({deadline:g} s) ran out"
            if clock.excused_s:
                error += (
                    f" ({clock.excused_s:.1f} s of model calls past the {clock.call_budget_s:g} s "
                    "per-call budget not counted)"
                )
        return EpisodeOutcome(
            trajectory=trajectory,
            end_reason=reason,
            turns=episode.turns if episode else 0,
            usage=trajectory.usage(),
            error=error,
            verification=episode.verification if episode else None,
        )

    async def _loop(self, ep: TerminusSession) -> None:
        """Prompt -> reply -> parse -> run commands or feed back the error -> observe."""
        prompt = ep.first_prompt()
        origin: Origin = "task"
        pending_completion = False
        retrying_cut_reply = False
        while ep.turns < ep.max_turns:
            await ep.before_turn()
            # Terminus re-asks after a cut reply at once, without its free-context check.
            completion = await ep.ask_turn(prompt, origin, may_hand_off=not retrying_cut_reply)
            retrying_cut_reply = completion.finish_reason == "length"
            if retrying_cut_reply:
                ep.record_reply(completion)
                prompt, origin = ep.output_limit_message(completion), "harness"
            elif protocol.refused(reply := protocol.parse_reply(completion.text, **ep.parse_options)):
                ep.record_reply(completion)
                prompt, origin = protocol.parse_error_message(reply), "harness"
            else:
                observation = await ep.execute(completion, reply)
                claim_rejected = False
                if reply.task_complete and pending_completion:
                    rejection = await ep.on_completion()
                    if rejection is None:
                        raise EpisodeEnd("completed")
                    ep.notes.append(rejection)
                    claim_rejected = True
                if not ep.shell.alive:
                    if ep.shell.error is not None:  # Docker broke, not bash: retry the episode
                        raise ShellClosedError(f"the shell's stream broke: {ep.shell.error}")
                    raise EpisodeEnd("error", "the shell exited (did the model type `exit`?)")
                pending_completion = reply.task_complete and not claim_rejected
                if pending_completion:
                    prompt, origin = protocol.confirm_message(observation), "harness"
                else:
                    prompt, origin = protocol.with_warnings(observation, reply), "env"
            ep.checkpoint()
        raise EpisodeEnd("max_turns", f"no confirmed completion within {ep.max_turns} turns")


class TerminusSession:
    """One running episode: contexts, trajectory, shell, the steps of the loop, and the
    hooks a harness overrides (see the module docstring)."""

    harness: Terminus2
    """The harness running this episode (its config, and what a subclass was handed)."""

    def __init__(
        self,
        harness: Terminus2,
        spec: EpisodeSpec,
        model: ChatModel,
        shell: ShellSession,
        trajectory: Trajectory,
        checkpoint: Checkpoint | None,
        *,
        sandbox: Sandbox | None = None,
    ) -> None:
        self.harness = harness
        self.config = config = harness.config
        self.sandbox = sandbox
        """The episode's sandbox, for hooks that run checks in it (None in some tests)."""
        self.spec = spec
        self.model = model
        self.shell = shell
        self.trajectory = trajectory
        self._checkpoint = checkpoint
        self.max_turns = min(spec.max_turns, config.max_turns)
        self.affinity = spec.affinity or str(spec.key)
        self.parse_options = {"default_duration": config.default_duration_s}
        self.turns = 0
        """Agent-loop model calls so far."""
        self.turn = 0
        """Index (from 0) of the turn in progress; every message carries it."""
        self.handoffs = 0
        self.verification: Verification | None = None
        """A verdict the harness reached itself (RSRT's last hidden run), else None."""
        self.notes: list[str] = []
        """Harness text for the next prompt (appended to it, recorded as ``harness``)."""
        self.context: list[ChatMessage] = []
        self.context_tokens = 0
        """Prompt + completion tokens of the last call in the current context."""
        self._started = time.monotonic()
        self.clock = AgentClock()
        """The agent's clock (the harness sets the one its deadline runs on): model calls
        run inside :meth:`AgentClock.model_call`."""
        self.continued = False
        """A later step of a multi-step task, on the previous step's terminal: the first
        prompt shows the terminal's new output since then, not a fresh screen."""

    # ------------------------------------------------------------ hooks (the seam)

    def first_prompt_notes(self) -> list[str]:
        """Harness sections appended to the first prompt (recorded as ``harness``)."""
        return []

    async def before_turn(self) -> None:
        """Called before every agent turn; raise :class:`EpisodeEnd` to end the episode."""

    async def intercept(self, command: Command) -> str | None:
        """Called before ``command`` is typed: return text to show the model instead of
        sending the keystrokes to the shell (it joins the next prompt as a harness note),
        or None to type them as usual."""
        return None

    async def on_completion(self) -> str | None:
        """A confirmed completion claim: None ends the episode as ``completed``; a message
        rejects the claim (it joins the next prompt as a harness note) and the loop goes on."""
        return None

    def handoff_notes(self) -> list[str]:
        """Harness text appended to the first prompt of a context after a handoff."""
        return []

    # ------------------------------------------------------------ bookkeeping

    def now(self) -> float:
        return time.monotonic() - self._started

    def checkpoint(self) -> None:
        if self._checkpoint is not None:
            self._checkpoint(self.trajectory)

    def record_harness(self, content: str, role: Role = "system") -> None:
        """A ``harness``-origin record in the trajectory that the model is not sent
        (a claim's verdict, say); text the model should see goes in :attr:`notes`."""
        self._note(role, content, "harness", self.now())

    def _note(self, role: Role, content: str, origin: Origin, at: float) -> None:
        self.trajectory.messages.append(
            Message(role=role, content=content, origin=origin, turn=self.turn, at=at)
        )

    def record_reply(
        self, completion: Completion, reply: Reply | None = None, ran: tuple[Command, ...] = ()
    ) -> None:
        """The model's message; ``ran`` holds the commands actually run (durations capped)."""
        self.trajectory.messages.append(
            Message(
                role="assistant",
                content=completion.text,
                origin="model",
                turn=self.turn,
                at=self.now(),
                usage=completion.usage,
                commands=ran,
                task_complete=reply.task_complete if reply else False,
            )
        )

    # ------------------------------------------------------------ the model

    def base_context(self) -> list[ChatMessage]:
        """Guidance and task prompt: what every context of this episode starts with."""
        return [
            {"role": m.role, "content": m.content}
            for m in self.trajectory.messages
            if m.origin in ("private", "task")
        ]

    def first_prompt(self) -> str:
        """The task prompt; guidance (if any) goes before it as a private system message."""
        if self.continued:  # as Harbor's next run() on the same TmuxSession
            state = protocol.observe(self.shell, self.config.max_observation_bytes)
        else:
            self.shell.observe(self.config.max_observation_bytes)  # start-up output: the screen shows it
            state = protocol.screen_text(self.shell, self.config.max_observation_bytes)
        if self.spec.guidance is not None:
            guidance = render("guidance", guidance=self.spec.guidance)
            self.context.append({"role": "system", "content": guidance})
            self._note("system", guidance, "private", self.now())
        self.notes.extend(self.first_prompt_notes())
        return protocol.first_prompt(
            self.spec.task.instruction,
            state,
            default_duration=self.config.default_duration_s,
            max_duration=self.config.max_duration_s,
        )

    async def ask(
        self,
        context: list[ChatMessage],
        content: str,
        origin: Origin,
        notes: tuple[str, ...] = (),
    ) -> Completion:
        """One model call on ``context`` + ``content``; both messages join ``context``.

        ``notes`` (harness text) are appended to ``content`` for the model, each after a
        blank line, and recorded as separate ``harness`` messages.
        """
        at = self.now()
        sent = content + "".join(f"\n\n{note}" for note in notes)
        user: ChatMessage = {"role": "user", "content": sent}
        with self.clock.model_call(), phase("model"):  # a stalled server's time is not the agent's
            completion = await self.model.chat(
                [*context, user],
                affinity=self.affinity,
                temperature=self.spec.temperature,
                seed=self.spec.seed,
            )
        if completion.finish_reason == "abort":
            raise LLMServerError(f"{self.model.model_name}: the server aborted the request")
        context.extend((user, {"role": "assistant", "content": completion.text}))
        self._note("user", content, origin, at)
        for note in notes:
            self._note("user", note, "harness", at)
        return completion

    def take_notes(self) -> tuple[str, ...]:
        notes, self.notes = tuple(self.notes), []
        return notes

    async def ask_turn(self, prompt: str, origin: Origin, *, may_hand_off: bool = True) -> Completion:
        """A turn's call; hands off first when free context is low or the prompt does not fit.

        A handoff replaces ``prompt`` (the pending observation) with the handoff prompt,
        as Terminus does: the new context learns the state from the answers instead.
        """
        self.turn = self.turns
        self.turns += 1
        free = self.model.context_length - self.context_tokens
        if may_hand_off and self.turn and free < self.config.handoff_free_tokens:
            prompt, origin = await self.handoff(), "harness"
        notes = self.take_notes()
        try:
            completion = await self.ask(self.context, prompt, origin, notes)
        except ContextLengthError as exc:
            if self.turn == 0:
                # Nothing of the model's is in the context yet: the task's instruction (or
                # the configured context) makes it unattemptable. That is a permanent error
                # of the task, stored apart and left out of pass@k, not the model's failure.
                raise ContextLengthError(
                    f"the task prompt does not fit the model's context before the model's first "
                    f"turn ({self.model.context_length} tokens): the task cannot be attempted "
                    f"with this model; shorten its instruction or use a longer context ({exc})",
                    status=exc.status,
                ).as_permanent() from exc
            self.notes[:0] = notes  # the refused prompt's notes follow the handoff prompt
            completion = await self.ask_after_handoff()
        self.context_tokens = completion.usage.prompt_tokens + completion.usage.completion_tokens
        return completion

    async def ask_after_handoff(self) -> Completion:
        prompt = await self.handoff()
        try:
            return await self.ask(self.context, prompt, "harness", self.take_notes())
        except ContextLengthError as exc:
            raise EpisodeEnd("context", f"the prompt does not fit after a handoff: {exc}") from exc

    def output_limit_message(self, completion: Completion) -> str:
        # Terminus names the limit LiteLLM knows for the model; it knows no self-served
        # model, so Terminus says "the maximum output length", and so do we. That also
        # keeps our max_new_tokens (SGLang needs one; Terminus sends none) unseen.
        return protocol.output_limit_message(
            completion.text, None, default_duration=self.config.default_duration_s
        )

    # ------------------------------------------------------------ the shell

    async def execute(self, completion: Completion, reply: Reply) -> str:
        """Run the reply's commands, each followed by its (capped) wait; return the observation."""
        cap = self.config.max_duration_s
        ran = tuple(
            Command(keystrokes=c.keystrokes, duration=max(0.0, min(c.duration, cap)))
            for c in reply.commands
        )
        self.record_reply(completion, reply, ran)
        try:
            for command in ran:
                if not self.shell.alive:
                    break
                shown = await self.intercept(command)
                if shown is not None:
                    self.notes.append(shown)
                    continue
                with phase("commands"):
                    if command.keystrokes:
                        await self.shell.send(command.keystrokes)
                    await self.shell.wait(command.duration)
        except ShellClosedError as exc:
            if self.shell.error is not None:  # infrastructure: the engine retries it
                raise
            raise EpisodeEnd("error", f"the shell exited: {exc}") from exc
        return protocol.observe(self.shell, self.config.max_observation_bytes)

    # ------------------------------------------------------------ context handoff

    async def handoff(self) -> str:
        """Summary (old context) -> questions (empty history) -> answers (old context).

        As in Terminus: the new context is the task prompt, the questions prompt and the
        questions; the returned handoff prompt (the answers) is its next message.
        """
        self.handoffs += 1
        instruction = self.spec.task.instruction
        old = self.context
        summary = await self._ask_unwinding(old, render("handoff_summary", instruction=instruction))
        asking = render(
            "handoff_questions", instruction=instruction, summary=summary, screen=self.shell.screen()
        )
        fresh: list[ChatMessage] = []
        try:
            questions = await self.ask(fresh, asking, "harness")
        except ContextLengthError as exc:
            raise EpisodeEnd("context", f"the handoff questions do not fit: {exc}") from exc
        self.record_reply(questions)
        answers = await self._ask_unwinding(old, render("handoff_answers", questions=questions.text))
        self.context = [*self.base_context(), *fresh]
        # The questions call did not carry the task prompt: a lower bound until the next call.
        self.context_tokens = questions.usage.prompt_tokens + questions.usage.completion_tokens
        free = self.model.context_length - self.context_tokens
        if free < self.config.handoff_free_tokens:
            raise EpisodeEnd("context", f"only {free} tokens free right after a handoff")
        self.notes.extend(self.handoff_notes())
        return render("handoff_resume", answers=answers)

    async def _ask_unwinding(self, context: list[ChatMessage], content: str) -> str:
        """Ask on the old context, dropping its latest exchanges while the prompt does not fit."""
        while True:
            try:
                completion = await self.ask(context, content, "harness")
            except ContextLengthError as exc:
                if len(context) < len(self.base_context()) + 2:
                    raise EpisodeEnd("context", f"the handoff does not fit: {exc}") from exc
                del context[-2:]
                continue
            self.record_reply(completion)
            return completion.text


Terminus2.session_class = TerminusSession
