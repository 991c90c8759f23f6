from collections.abc import Sequence

from rsr_async._native.leakrules import SandboxKnowledge
from rsr_async.schema import Leak

__all__ = ["LeakScanner", "SandboxKnowledge", "scan_leaks"]

class LeakScanner:
    def __init__(
        self,
        instruction: str = "",
        *,
        sandbox: SandboxKnowledge | None = None,
        derive: bool = True,
    ) -> None: ...
    def observe(self, text: str) -> None: ...
    def scan(self, action: str, turn: int = 0) -> list[Leak]: ...

def scan_leaks(
    actions: Sequence[str],
    context: Sequence[str],
    *,
    instruction: str = "",
    sandbox: SandboxKnowledge | None = None,
) -> list[Leak]: ...
