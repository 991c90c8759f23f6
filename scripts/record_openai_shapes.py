"""Record the OpenAI API's reply and request shapes from the ``openai`` package's own types.

Runs on demand (the package is in the dev extra, but CI compares against the JSON):

    .venv/bin/python scripts/record_openai_shapes.py

For each reply model the official client parses (chat completion, its stream chunk,
text completion, usage and its details, model card) it records every field, whether it
is required, and the literal values it accepts (``object``, ``finish_reason`` ...); for
the request parameter TypedDicts, the parameter names. Writes
``tests/llm/fixtures/openai_shapes.json``; ``tests/llm/test_server_shapes.py`` checks
the simulator's ``/v1`` replies against it, and ``tests/llm/test_openai_client.py``
drives the simulator with the real client.
"""

from __future__ import annotations

import json
import sys
import typing
from importlib.metadata import version
from pathlib import Path
from typing import Any

from openai.types import Completion, CompletionChoice, CompletionUsage, Model
from openai.types import completion_create_params as completion_params
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionMessage,
    chat_completion,
    chat_completion_chunk,
)
from openai.types.chat import completion_create_params as chat_params
from openai.types.completion_usage import CompletionTokensDetails, PromptTokensDetails

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "llm" / "fixtures"

MODELS = {
    "ChatCompletion": ChatCompletion,
    "ChatCompletion.Choice": chat_completion.Choice,
    "ChatCompletionMessage": ChatCompletionMessage,
    "ChatCompletionChunk": ChatCompletionChunk,
    "ChatCompletionChunk.Choice": chat_completion_chunk.Choice,
    "ChatCompletionChunk.ChoiceDelta": chat_completion_chunk.ChoiceDelta,
    "Completion": Completion,
    "CompletionChoice": CompletionChoice,
    "CompletionUsage": CompletionUsage,
    "PromptTokensDetails": PromptTokensDetails,
    "CompletionTokensDetails": CompletionTokensDetails,
    "Model": Model,
}


def _literals(annotation: Any) -> list[Any]:
    """Literal values inside an annotation (``Optional[Literal[...]]`` included)."""
    if typing.get_origin(annotation) is typing.Literal:
        return list(typing.get_args(annotation))
    out: list[Any] = []
    for arg in typing.get_args(annotation):
        out += _literals(arg)
    return out


def _nullable(annotation: Any) -> bool:
    return type(None) in typing.get_args(annotation)


def record_model(model: Any) -> dict[str, Any]:
    fields = {}
    for name, info in model.model_fields.items():
        entry: dict[str, Any] = {"required": info.is_required(), "nullable": _nullable(info.annotation)}
        literals = _literals(info.annotation)
        if literals:
            entry["literals"] = literals
        fields[info.alias or name] = entry
    return fields


def record_params(typed_dict: Any) -> list[str]:
    return sorted(typing.get_type_hints(typed_dict))


def main() -> None:
    shapes = {
        "recorded_by": "scripts/record_openai_shapes.py",
        "openai_version": version("openai"),
        "models": {name: record_model(model) for name, model in MODELS.items()},
        "chat_params": record_params(chat_params.CompletionCreateParamsBase),
        "completion_params": record_params(completion_params.CompletionCreateParamsBase),
    }
    FIXTURES.mkdir(parents=True, exist_ok=True)
    out = FIXTURES / "openai_shapes.json"
    out.write_text(json.dumps(shapes, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out} (openai {shapes['openai_version']})", file=sys.stderr)


if __name__ == "__main__":
    main()
