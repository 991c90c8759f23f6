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
