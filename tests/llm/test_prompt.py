from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsr_async.errors import ConfigError
from rsr_async.llm.base import ChatMessage
from rsr_async.llm.prompt import ChatTemplate, check_append_only, parse_chatml, render_chatml
from rsr_async.llm.tokenizer import SimTokenizer

roles = st.sampled_from(["system", "user", "assistant"])
texts = st.text(alphabet=st.characters(blacklist_characters="<|"), max_size=60)
conversations = st.lists(st.fixed_dictionaries({"role": roles, "content": texts}), min_size=1, max_size=8)


@settings(max_examples=150, deadline=None)
@given(conversations)
def test_chatml_rendering_is_append_only_and_parses_back(messages: list[ChatMessage]) -> None:
    check_append_only(ChatTemplate(), messages)
    for n in range(len(messages)):
        assert render_chatml(messages[: n + 1]).startswith(
            render_chatml(messages[:n], add_generation_prompt=False))
    assert parse_chatml(render_chatml(messages)) == messages


@settings(max_examples=100, deadline=None)
@given(conversations, texts)
def test_tokens_of_a_turn_prefix_the_next_turn(messages: list[ChatMessage], reply: str) -> None:
    # The cache only helps if turn n's prompt tokens are a prefix of turn n+1's.
    tok = SimTokenizer()
    prompt = render_chatml(messages)
    follow = render_chatml([*messages, {"role": "assistant", "content": reply},
                            {"role": "user", "content": "next"}])
    a, b = tok.encode(prompt), tok.encode(follow)
    assert b[: len(a)] == a


LLAMA_LIKE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def test_jinja_template_from_tokenizer_config(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer_config.json"
    path.write_text(json.dumps({"chat_template": LLAMA_LIKE, "bos_token": "<|begin_of_text|>",
                                "eos_token": "<|eot_id|>"}))
    template = ChatTemplate(str(path))
    messages: list[ChatMessage] = [{"role": "user", "content": "hi"},
                                   {"role": "assistant", "content": "yo"},
                                   {"role": "user", "content": "ls"}]
    text = template.render(messages)
    assert text.startswith("<|begin_of_text|><|start_header_id|>user")
    assert text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert template.stop == ("<|eot_id|>",)
    check_append_only(template, messages)


def test_inline_template_and_a_non_append_only_template_is_refused() -> None:
    messages: list[ChatMessage] = [{"role": "user", "content": "a"},
                                   {"role": "assistant", "content": "b"},
                                   {"role": "user", "content": "c"}]
    assert "<|eot_id|>" in ChatTemplate(LLAMA_LIKE).render(messages)
    # Puts the message count in a header: every earlier turn's bytes change.
    shifting = ChatTemplate(
        "n={{ messages|length }}\n{% for m in messages %}{{ m['content'] }}\n{% endfor %}")
    with pytest.raises(ConfigError, match="not append-only"):
        check_append_only(shifting, messages)


def test_missing_template_file_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="neither a file nor a Jinja template"):
        ChatTemplate("/nonexistent/tokenizer_config.json")
