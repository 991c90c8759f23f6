"""Hidden tests: every requirement pinned, layout kept."""

from pathlib import Path

WANT = [
    "# web stack",
    "Flask==3.0.2",
    "requests[socks]==2.31.0",
    "SQLAlchemy==2.0.28",
    "",
    "# tooling",
    "python_dateutil==2.9.0.post0",
    "zope.interface==6.2",
    'typing-extensions==4.10.0; python_version < "3.11"',
]


def lines() -> list[str]:
    return [line.rstrip() for line in Path("/app/requirements.txt").read_text().splitlines()]


def norm(line: str) -> str:
    return line.replace(" ", "")


def layout(rows: list[str]) -> list[str]:
    return [row for row in rows if row.startswith("#") or not row]


def test_line_count_and_comments() -> None:
    got = lines()
    while got and not got[-1]:
        got.pop()
    assert len(got) == len(WANT)
    assert layout(got) == layout(WANT)


def test_pins() -> None:
    got = [norm(row) for row in lines() if row and not row.startswith("#")]
    assert got == [norm(row) for row in WANT if row and not row.startswith("#")]
