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


def lines():
    return [l.rstrip() for l in Path("/app/requirements.txt").read_text().splitlines()]


def norm(line):
    return line.replace(" ", "")


def test_line_count_and_comments():
    got = lines()
    while got and not got[-1]:
        got.pop()
    assert len(got) == len(WANT)
    assert [l for l in got if l.startswith("#") or not l] == [l for l in WANT if l.startswith("#") or not l]


def test_pins():
    got = [norm(l) for l in lines() if l and not l.startswith("#")]
    assert got == [norm(l) for l in WANT if l and not l.startswith("#")]
