"""The RSR pipeline: it wires the runtime (model servers, sandboxes) onto the engine.

- :mod:`.pipeline`: the job graph, discover → plan → critique (→ regenerate) →
  execute × M → audit, each job's successors submitted when it finishes;
- :mod:`.discover`, :mod:`.planner`, :mod:`.critic`, :mod:`.audit`: one runner per job
  kind; :mod:`.episode`: one agent episode in a sandbox, graded by the task's verifier;
- :mod:`.runtime`: opens the model side, the sandbox backend and the engine together
  (:mod:`.cluster_runtime` for a Ray run); :mod:`.exporting`, :mod:`.figures`,
  :mod:`.summary`: what a run's store yields;
- :mod:`.commands`, :mod:`.stage_commands`, :mod:`.eval_commands`: ``run``, the single
  stages (``rewrite``, ``verify``, ``export``) and ``eval``.

This room is the top of the house: it may import every other room, and none imports it.
"""
