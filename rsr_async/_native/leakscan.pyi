from collections.abc import Sequence

from rsr_async.schema import Leak

__all__ = ["LeakScanner", "scan_leaks"]

class LeakScanner:
    def __init__(self, instruction: str = "") -> None: ...
    def observe(self, text: str) -> None: ...
    def scan(self, action: str, turn: int = 0) -> list[Leak]: ...

def scan_leaks(
    actions: Sequence[str], context: Sequence[str], *, instruction: str = ""
) -> list[Leak]: ...
