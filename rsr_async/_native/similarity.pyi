from collections.abc import Sequence

from rsr_async.schema import Trajectory

__all__ = [
    "command_jaccard",
    "command_order_similarity",
    "normalize_command",
    "pairwise_jaccard",
    "pairwise_order_similarity",
]

def normalize_command(command: str) -> str: ...
def command_jaccard(
    a: Trajectory | Sequence[str], b: Trajectory | Sequence[str], *, skip_first: int = 0
) -> float: ...
def command_order_similarity(
    a: Trajectory | Sequence[str], b: Trajectory | Sequence[str], *, skip_first: int = 0
) -> float: ...
def pairwise_jaccard(
    items: Sequence[Trajectory | Sequence[str]], *, skip_first: int = 0
) -> list[list[float]]: ...
def pairwise_order_similarity(
    items: Sequence[Trajectory | Sequence[str]], *, skip_first: int = 0
) -> list[list[float]]: ...
