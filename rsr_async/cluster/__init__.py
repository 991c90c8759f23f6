"""One run across many machines: the head keeps the store, Ray actors run the episodes.

Shape (``run --ray ADDRESS``, or ``cluster.ray_address`` when embedding)::

    head process (one event loop)                     Ray node (one per machine)
    ├── Engine: the one store, exactly-once keys,     ├── EpisodeActor (its own event loop)
    │   deadlines, infra retries, the job graph       │   ├── episode_runtime: this node's
    ├── model side: planner, critic, auditor jobs     │   │   Docker host(s), its share of
    └── Dispatcher (the engine's episode runner) ───▶ │   │   the model servers
          batches of attempts ⇄ batches of outcomes   │   └── RemoteRunner: runs attempts
                                                      └── ...

Why this shape: the engine already is the scheduler that makes a rerun do each job
exactly once, and only it writes the store; a remote runner is just another runner to
it, so every guarantee (deadlines, retries of infrastructure errors, cancellation with
the partial trajectory, resume) holds unchanged. Ray brings what one box lacks: placing
a process on every node, and telling the head when an actor or node dies. Jobs cross in
batches (:mod:`.wire`), because a Ray call costs the head far more CPU than storing a
job does. A lost actor's in-flight attempts are infrastructure errors the engine retries
on the actors left (:mod:`.dispatch`); the survivors sweep its containers.

Model-only jobs (planner, critic, auditor) stay on the head: they hold no sandbox, and
the head reaches the model servers (or the router) itself.

This room is generic, like the engine: it never imports the pipeline. The head's side
is wired in :mod:`rsr_async.rsr.cluster_runtime`, which hands each actor the function
that opens a node's runtime (:class:`OpenRuntime`, the pipeline's ``episode_runtime``).
"""

from __future__ import annotations

from .actor import OpenRuntime
from .dispatch import Dispatcher, DispatchStats, Remote
from .worker import InProcessRemote, RemoteRunner, sleeping_runner, trivial_runner

__all__ = [
    "DispatchStats",
    "Dispatcher",
    "InProcessRemote",
    "OpenRuntime",
    "Remote",
    "RemoteRunner",
    "sleeping_runner",
    "trivial_runner",
]
