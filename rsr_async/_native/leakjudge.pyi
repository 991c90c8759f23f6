from rsr_async._native.leakrules import SandboxKnowledge
from rsr_async.schema import Leak

__all__ = ["Judge"]

class Judge:
    def __init__(
        self, texts: list[str], sandbox: SandboxKnowledge | None, derive: bool = True
    ) -> None: ...
    def note(self, action: str) -> None: ...
    def judge(self, action: str, turn: int, found: list[tuple[int, str, str]]) -> list[Leak]: ...
