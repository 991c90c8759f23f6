"""Hypothesis strategies for the differential tests: random and adversarial text."""

from __future__ import annotations

from hypothesis import strategies as st

# Characters that sit on the rules' edges: every whitespace str.split() knows, quotes,
# escape-sequence bytes, word punctuation, and one character of each string kind.
EDGES = (
    " \t\n\r\x0b\x0c\x1c\x1f\x85\xa0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000"
    "'\"\x1b\x07[]PX^_\\;0123456789abcdefxyzABCFZ_./+~-=:@%é€𝄞\ud800"
)

edge_text = st.text(alphabet=st.sampled_from(EDGES), max_size=80)
any_text = st.text(max_size=60)
text = st.one_of(edge_text, any_text)
# Long word-heavy text crosses the 64-byte blocks of the one-byte fast paths.
long_ascii = st.text(
    alphabet=st.sampled_from("ab0123/._-+~ \n'\"x9f\x1b[;m]\x07"), min_size=50, max_size=400
)

# The second pass: values broken across lines the way terminals and tables break them,
# numbers to combine, and shell syntax that creates paths.
_JOINS = st.sampled_from(["\n", " \n", "\\\n", " \\\n  ", "|\n| ", " │\n│ ", "\r\n", "\n> ",
                          "\t|\n|\t", "\n\n", " x\n", "\\ \r", "|"])
_VALUE_CHARS = "abcdef0123456789/_.-XYZ"
secret = st.text(alphabet=_VALUE_CHARS, min_size=8, max_size=40)


@st.composite
def wrapped_screen(draw: st.DrawFn) -> tuple[str, str]:
    """A value of 8+ characters, and a screen that shows it whole, broken, or not at all."""
    value = draw(secret)
    cuts = sorted(draw(st.lists(st.integers(1, len(value) - 1), max_size=3, unique=True)))
    pieces = [value[a:b] for a, b in zip([0, *cuts], [*cuts, len(value)], strict=True)]
    shown = pieces[0]
    for piece in pieces[1:]:
        shown += draw(_JOINS) + piece
    if draw(st.booleans()):
        shown = shown[: draw(st.integers(0, len(shown)))]  # a screen cut short
    noise = draw(st.text(alphabet="ab 09\n|é€-", max_size=30))
    return value, noise + " " + shown + " " + draw(st.sampled_from(["", "€", "é", noise]))


number_screen = st.lists(
    st.one_of(st.integers(0, 5000).map(str), st.floats(0, 500, allow_nan=False).map(
        lambda f: f"{f:.2f}"), st.sampled_from(["x1.5", "-12", "3.14.15", "a 7", "\n", "é12", "12µ", "²345", "7.5_", "-.5", "\n-3.25\n"])),
    max_size=30,
).map(" ".join)
number_action = st.one_of(st.integers(100, 20000).map(str), st.floats(0, 2000).map(
    lambda f: f"{f:.1f}"), st.sampled_from(["1.25", "0.333", "150", "4096", "12.5.1"]))
shell_action = st.lists(
    st.sampled_from(["mkdir -p out/raw_11", "cd /srv/data_7", "cd -", "cd", "touch a/b_123.txt",
                     "cp x.txt /opt/dest_42", "python3 gen.py > rep_2024.json", "tee -a log_9.txt",
                     "git clone https://h.io/r/proj_5.git", "python3 -m venv venv_3", "ls",
                     "cat out/raw_11/f_1.csv", "wc -l /srv/data_7/in_3.csv", "curl -o dl_8.bin u",
                     "sed -n '12,18p' f_77.txt", "echo 'p@ss!w0rd' | sha256sum", "&&", "|", ";",
                     "cat <<EOF > cfg_4.ini", "virtualenv env_6", "install -m 755 t_1 /usr/local/bin/t_1",
                     "curl http://127.0.0.1:8123/api_v2/items", "cat ~/notes_5.md", "--output=o_19.txt"]),
    min_size=1, max_size=8,
).map(" ".join)
