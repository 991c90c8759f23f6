from rsr_async._native.records import CompressionReport
from rsr_async.schema import Trajectory

__all__ = ["CompressionReport", "clean_observation", "compress_trajectory"]

def clean_observation(text: str, *, max_bytes: int = 4096, strip_ansi: bool = True) -> str: ...
def compress_trajectory(
    trajectory: Trajectory,
    *,
    max_observation_bytes: int = 4096,
    strip_ansi: bool = True,
    collapse_repeats: bool = True,
) -> tuple[Trajectory, CompressionReport]: ...
