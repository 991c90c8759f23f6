"""The RSR pipeline: discover (now), then plan, critique, execute, verify (later issues)."""
