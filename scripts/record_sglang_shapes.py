"""Record what a real SGLang server and sglang-router accept and answer, from their code.

Runs on demand, not in CI (CI has neither package). The SGLang wheel is read, never
imported (importing it needs torch and a GPU): its sources are parsed with ``ast``.

    pip download --no-deps sglang==0.5.23 -d /tmp/sgl          # one wheel, ~40 MB
    .venv/bin/python scripts/record_sglang_shapes.py /tmp/sgl/sglang-0.5.23-*.whl

sglang-router (in the dev extra) is a Rust wheel with a Python launcher: its launch
flags come from its own argparse parser (``RouterArgs.add_cli_args``), and the
Prometheus metric names it exports from the compiled library, where each name is
stored next to its description (``describe_counter!(name, description)``).

Writes ``tests/llm/fixtures/sglang_shapes.json``; ``tests/llm/test_server_shapes.py``
checks the simulator, the client and ``serve`` against it. What each part records:

- ``api_types``: the generated HTTP JSON contract (``sglang/api/v1/api_types.py``,
  "the schema for both the Rust and the Python server"): every object's fields, their
  defaults, and whether unknown keys are ignored or rejected (``SamplingParams``
  rejects them with serde's ``unknown field`` text).
- ``routes``: path -> methods of ``srt/entrypoints/http_server.py``'s FastAPI app.
- ``meta_info``: the keys ``TokenizerManager`` always puts in ``/generate``'s
  ``meta_info`` (the dict literal and the unconditional update), and the conditional
  ones; ``finish_reasons``: each finish class's ``to_json`` shape.
- ``model_info_keys``, ``server_info``: what ``/model_info`` and ``/server_info`` add to
  the server arguments; ``server_info.context_length``: where a client finds the window.
- ``generate_stream``: the SSE framing of ``/generate`` and whether text is cumulative.
- ``openai_protocol``: SGLang's pydantic models for ``/v1/*`` (fields and defaults).
- ``usage``: when ``prompt_tokens_details`` is present.
- ``metrics``: the ``sglang:*`` metric names and kinds.
- ``server_args``: every ``launch_server`` flag (canonical, aliases, whether it takes a
  value), from the ``A[T, Arg(...)]`` fields of the input namespaces and the manual
  ``add_argument`` calls of ``ServerArgs.add_cli_args``.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "llm" / "fixtures"


class Wheel:
    """Source files of an unpacked-in-memory wheel."""

    def __init__(self, path: Path) -> None:
        self.zip = zipfile.ZipFile(path)
        self.names = set(self.zip.namelist())

    def text(self, name: str) -> str:
        return self.zip.read(name).decode("utf-8")

    def tree(self, name: str) -> ast.Module:
        return ast.parse(self.text(name), filename=name)

    def version(self) -> str:
        meta = next(n for n in self.names if n.endswith(".dist-info/METADATA"))
        match = re.search(r"^Version: (\S+)$", self.text(meta), re.MULTILINE)
        assert match, "no Version in METADATA"
        return match[1]


def _literal(node: ast.AST | None) -> Any:
    """A default's value when it is a literal, else its source text."""
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except ValueError:
        return {"expr": ast.unparse(node)}


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise KeyError(name)


def _fields(cls: ast.ClassDef) -> dict[str, Any]:
    """Annotated class attributes -> default (``"<required>"`` when none)."""
    out: dict[str, Any] = {}
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            if stmt.target.id.startswith("_"):
                continue
            value = stmt.value
            if (isinstance(value, ast.Call) and ast.unparse(value.func) in ("Field", "field")):
                default = next((k.value for k in value.keywords if k.arg == "default"), None)
                factory = next((k.value for k in value.keywords if k.arg == "default_factory"), None)
                if default is not None:
                    out[stmt.target.id] = _literal(default)
                elif factory is not None:
                    out[stmt.target.id] = {"factory": ast.unparse(factory)}
                else:
                    out[stmt.target.id] = "<required>"
            else:
                out[stmt.target.id] = "<required>" if value is None else _literal(value)
    return out


# -- api_types ----------------------------------------------------------------------------


def record_api_types(wheel: Wheel) -> dict[str, Any]:
    tree = wheel.tree("sglang/api/v1/api_types.py")
    out: dict[str, Any] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or not any(
                ast.unparse(b) == "msgspec.Struct" for b in node.bases):
            continue
        doc = ast.get_docstring(node) or ""
        policy = ("rejected" if "unknown keys rejected" in doc else
                  "ignored" if "unknown keys ignored" in doc else
                  "positional" if "positional array" in doc else "other")
        types = {s.target.id: ast.unparse(s.annotation) for s in node.body
                 if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
        # "order": the declared order, which serde's unknown-field message lists.
        out[node.name] = {"unknown_keys": policy, "fields": _fields(node), "types": types,
                          "order": list(types)}
    return out


def record_unknown_field_text(wheel: Wheel) -> list[str]:
    """The message templates of ``_unknown_field`` (serde's wording)."""
    tree = wheel.tree("sglang/api/v1/api_types.py")
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_unknown_field")
    return [ast.unparse(c.args[0]) for c in ast.walk(fn)
            if isinstance(c, ast.Call) and ast.unparse(c.func) == "JsonContractError"]


# -- routes -------------------------------------------------------------------------------


def _route_path(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    # os.environ.get("NAME", "/default")
    if isinstance(node, ast.Call) and len(node.args) == 2 and isinstance(node.args[1], ast.Constant):
        return str(node.args[1].value)
    return None


def record_routes(wheel: Wheel) -> dict[str, list[str]]:
    tree = wheel.tree("sglang/srt/entrypoints/http_server.py")
    routes: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for deco in node.decorator_list:
            if not (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute)
                    and ast.unparse(deco.func.value) == "app" and deco.args):
                continue
            path = _route_path(deco.args[0])
            if path is None:
                continue
            kind = deco.func.attr
            if kind == "api_route":
                methods = next(k.value for k in deco.keywords if k.arg == "methods")
                verbs = set(ast.literal_eval(methods))
            elif kind in ("get", "post", "put", "delete"):
                verbs = {kind.upper()}
            else:
                continue
            routes.setdefault(path, set()).update(verbs)
    return {path: sorted(verbs) for path, verbs in sorted(routes.items())}


# -- meta_info, finish reasons --------------------------------------------------------------


def record_meta_info(wheel: Wheel) -> dict[str, list[str]]:
    """Keys of ``meta_info`` in ``TokenizerManager``'s output handler.

    Always: the ``meta_info = {...}`` literal, the literal dict of the unconditional
    ``meta_info.update({...})`` for generation outputs, and ``e2e_latency`` (set when
    the request finishes, which every non-stream reply and every last stream event
    has). Conditional: keys assigned by subscript (logprobs, hidden states, ...)."""
    tree = wheel.tree("sglang/srt/managers/tokenizer_manager.py")
    handler = _function(tree, "_handle_batch_output")
    always: list[str] = []
    conditional: set[str] = set()
    for node in ast.walk(handler):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and ast.unparse(node.targets[0]) == "meta_info" and isinstance(node.value, ast.Dict)):
            always += [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
        if (isinstance(node, ast.Call) and ast.unparse(node.func) == "meta_info.update"
                and node.args and isinstance(node.args[0], ast.Dict)):
            always += [k.value for k in node.args[0].keys if isinstance(k, ast.Constant)]
    for node in ast.walk(tree):
        if (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store)
                and ast.unparse(node.value) == "meta_info" and isinstance(node.slice, ast.Constant)):
            conditional.add(node.slice.value)
    always.append("e2e_latency")
    return {"always": sorted(set(always)), "conditional": sorted(conditional - set(always))}


def record_finish_reasons(wheel: Wheel) -> dict[str, dict[str, Any]]:
    tree = wheel.tree("sglang/srt/managers/schedule_batch.py")
    out: dict[str, dict[str, Any]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        fn = next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "to_json"), None)
        ret = next((r for r in ast.walk(fn) if isinstance(r, ast.Return)), None) if fn else None
        if ret is None or not isinstance(ret.value, ast.Dict):
            continue
        keys = [k.value for k in ret.value.keys if isinstance(k, ast.Constant)]
        kind = next(v.value for k, v in zip(ret.value.keys, ret.value.values, strict=True)
                    if isinstance(k, ast.Constant) and k.value == "type")
        out[node.name] = {"type": kind, "keys": keys}
    return out


# -- /model_info, /server_info --------------------------------------------------------------


def _function(tree: ast.Module, name: str) -> ast.AsyncFunctionDef | ast.FunctionDef:
    return next(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                and n.name == name)


def _dict_keys(fn: ast.AST) -> list[str]:
    keys: list[str] = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Dict):
            keys += [k.value for k in node.keys if isinstance(k, ast.Constant)]
    return keys


def record_info(wheel: Wheel, flags: dict[str, Any]) -> dict[str, Any]:
    http = wheel.tree("sglang/srt/entrypoints/http_server.py")
    scheduler = wheel.tree("sglang/srt/managers/scheduler.py")
    server_info_extra = _dict_keys(_function(http, "server_info"))
    init_info = _dict_keys(_function(scheduler, "get_init_info"))
    model_info = _dict_keys(_function(http, "model_info"))
    models_src = ast.unparse(_function(http, "available_models"))
    return {
        "model_info_keys": model_info,
        "server_info": {
            "added_keys": server_info_extra,
            "scheduler_keys": init_info,
            "includes_server_args": "build_server_info" in ast.unparse(_function(http, "server_info")),
            "context_length": {
                "server_args_field": "context_length" if "context_length" in flags["fields"] else None,
                "server_args_default": flags["fields"].get("context_length", {}).get("default"),
                "v1_models_key": "max_model_len" if "max_model_len=" in models_src else None,
                "model_info_has_it": "context_length" in model_info,
            },
        },
    }


# -- /generate streaming ------------------------------------------------------------------


def record_generate_stream(wheel: Wheel, flags: dict[str, Any]) -> dict[str, Any]:
    http = wheel.tree("sglang/srt/entrypoints/http_server.py")
    fn = _function(http, "serve_generate_request")
    constants = [c.value for c in ast.walk(fn) if isinstance(c, ast.Constant) and isinstance(c.value, bytes)]
    error_keys = [k for k in _dict_keys(fn)]
    return {
        "event_prefix": "data: " if b"data: " in constants else None,
        "done": "data: [DONE]\n\n" if b"data: [DONE]\n\n" in constants else None,
        "error_event_keys": error_keys,
        "cumulative_text_by_default": flags["fields"]["incremental_streaming_output"]["default"] is False,
    }


# -- OpenAI protocol ----------------------------------------------------------------------

OPENAI_MODELS = (
    "ModelCard", "ModelList", "PromptTokensDetails", "UsageInfo", "StreamOptions",
    "CompletionResponseChoice", "CompletionResponse", "CompletionResponseStreamChoice",
    "CompletionStreamResponse", "ChatMessage", "ChatCompletionResponseChoice",
    "ChatCompletionResponse", "DeltaMessage", "ChatCompletionResponseStreamChoice",
    "ChatCompletionStreamResponse", "ErrorResponse",
)


def record_openai_protocol(wheel: Wheel) -> dict[str, Any]:
    tree = wheel.tree("sglang/srt/entrypoints/openai/protocol.py")
    return {name: _fields(_class(tree, name)) for name in OPENAI_MODELS}


def record_usage(wheel: Wheel) -> dict[str, Any]:
    """When ``usage.prompt_tokens_details`` appears: with ``--enable-cache-report``,
    for every reply (``cached_tokens`` may be 0); without it, only for multimodal input."""
    src = wheel.text("sglang/srt/entrypoints/openai/usage_processor.py")
    tree = ast.parse(src)
    fn = _function(tree, "calculate_response_usage")
    guarded = any(isinstance(n, ast.If) and ast.unparse(n.test) == "enable_cache_report"
                  and "PromptTokensDetails(cached_tokens=" in ast.unparse(n) for n in ast.walk(fn))
    zero_dropped = "if cached_total" in ast.unparse(fn)
    return {"details_with_cache_report": guarded, "details_dropped_when_zero": zero_dropped}


# -- metrics ------------------------------------------------------------------------------


def record_metrics(wheel: Wheel) -> dict[str, str]:
    out: dict[str, str] = {}
    for name in sorted(n for n in wheel.names if n.startswith("sglang/srt/") and n.endswith(".py")):
        text = wheel.text(name)
        if '"sglang:' not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.Call):
                continue
            kind = ast.unparse(node.func).rsplit(".", 1)[-1]
            if kind not in ("Counter", "Gauge", "Histogram", "Summary"):
                continue
            for kw in node.keywords:
                if (kw.arg == "name" and isinstance(kw.value, ast.Constant)
                        and str(kw.value.value).startswith("sglang:")):
                    out[kw.value.value] = kind.lower()
    return dict(sorted(out.items()))


# -- ServerArgs flags ---------------------------------------------------------------------


def _server_arg_namespaces(wheel: Wheel) -> list[str]:
    tree = wheel.tree("sglang/srt/server_args.py")
    for node in tree.body:
        if (isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "_INPUT_NAMESPACES"):
            assert isinstance(node.value, ast.List)
            return [ast.unparse(e) for e in node.value.elts]
    raise KeyError("_INPUT_NAMESPACES")


def record_server_args(wheel: Wheel) -> dict[str, Any]:
    wanted = set(_server_arg_namespaces(wheel))
    fields: dict[str, dict[str, Any]] = {}
    flags: dict[str, dict[str, Any]] = {}
    base = "sglang/srt/arg_groups/fields/"
    found: set[str] = set()
    for name in sorted(n for n in wheel.names if n.startswith(base) and n.endswith(".py")):
        for cls in wheel.tree(name).body:
            if not isinstance(cls, ast.ClassDef) or cls.name not in wanted:
                continue
            found.add(cls.name)
            for stmt in cls.body:
                if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                    continue
                field = stmt.target.id
                default = _literal(stmt.value) if stmt.value is not None else "<required>"
                ann = stmt.annotation
                entry: dict[str, Any] = {"default": default, "flag": None}
                fields[field] = entry
                if not (isinstance(ann, ast.Subscript) and ast.unparse(ann.value) == "A"):
                    continue  # no CLI metadata: not registered automatically
                assert isinstance(ann.slice, ast.Tuple)
                type_src = ast.unparse(ann.slice.elts[0])
                meta = ann.slice.elts[1]
                kw: dict[str, Any] = {}
                if isinstance(meta, ast.Call):
                    kw = {k.arg: k.value for k in meta.keywords if k.arg}
                if "no_cli" in kw and _literal(kw["no_cli"]) is True:
                    continue
                cli = _literal(kw["cli_name"]) if "cli_name" in kw else "--" + field.replace("_", "-")
                aliases = _literal(kw["aliases"]) if "aliases" in kw else []
                is_bool = re.fullmatch(r"(Optional\[)?bool\]?", type_src) is not None
                takes_value = not (is_bool and "action" not in kw)
                if "action" in kw:
                    takes_value = "store_true" not in ast.unparse(kw["action"]) and "StoreTrue" not in ast.unparse(kw["action"])
                entry["flag"] = cli
                for flag in [cli, *aliases]:
                    flags[flag] = {"field": field, "canonical": cli, "takes_value": takes_value}
    missing = wanted - found
    assert not missing, f"namespaces not found: {missing}"
    # Manual registrations in ServerArgs.add_cli_args (dynamic choices, deprecated flags).
    tree = wheel.tree("sglang/srt/server_args.py")
    add = _function(tree, "add_cli_args")
    for node in ast.walk(add):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "parser.add_argument":
            names = [a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
            action = next((ast.unparse(k.value) for k in node.keywords if k.arg == "action"), "")
            dest = next((_literal(k.value) for k in node.keywords if k.arg == "dest"), None)
            takes_value = "StoreTrue" not in action and "store_true" not in action
            for flag in names:
                field = dest or names[0][2:].replace("-", "_")
                flags[flag] = {"field": field, "canonical": names[0], "takes_value": takes_value,
                               "deprecated": "Deprecated" in action}
    parser_src = ast.unparse(_function(tree, "prepare_server_args"))
    abbrev = "allow_abbrev=False" not in parser_src
    return {"fields": dict(sorted(fields.items())), "flags": dict(sorted(flags.items())),
            "allow_abbrev": abbrev,
            "launch_module": "sglang.launch_server" if "sglang/launch_server.py" in wheel.names else None}


# -- sglang-router ------------------------------------------------------------------------


def record_router() -> dict[str, Any]:
    from importlib.metadata import version

    import sglang_router
    from sglang_router.router_args import RouterArgs

    parser = argparse.ArgumentParser(allow_abbrev=False)
    RouterArgs.add_cli_args(parser, use_router_prefix=False, exclude_host_port=False)
    flags: dict[str, dict[str, Any]] = {}
    for action in parser._actions:
        for flag in action.option_strings:
            if flag.startswith("--"):
                flags[flag] = {"dest": action.dest, "takes_value": action.nargs != 0,
                               "default": action.default if isinstance(
                                   action.default, (int, float, str, bool, type(None))) else repr(action.default)}
    lib = next(Path(sglang_router.__file__).parent.glob("sglang_router_rs*.so"))
    blob = lib.read_bytes()
    # describe_*!(name, description): the name is stored right before a description
    # that starts with a capital letter.
    names = sorted({m.decode() for m in re.findall(rb"(smg_[a-z0-9_]+?)(?=[A-Z])", blob)})
    return {"version": version("sglang-router"), "flags": dict(sorted(flags.items())),
            "metrics": names}


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("wheel", type=Path, help="the sglang wheel (.whl)")
    args = cli.parse_args()
    wheel = Wheel(args.wheel)
    server_args = record_server_args(wheel)
    shapes = {
        "recorded_by": "scripts/record_sglang_shapes.py",
        "sglang_version": wheel.version(),
        "routes": record_routes(wheel),
        "api_types": record_api_types(wheel),
        "unknown_field_messages": record_unknown_field_text(wheel),
        "meta_info": record_meta_info(wheel),
        "finish_reasons": record_finish_reasons(wheel),
        **record_info(wheel, server_args),
        "generate_stream": record_generate_stream(wheel, server_args),
        "openai_protocol": record_openai_protocol(wheel),
        "usage": record_usage(wheel),
        "metrics": record_metrics(wheel),
        "server_args": server_args,
        "router": record_router(),
    }
    FIXTURES.mkdir(parents=True, exist_ok=True)
    out = FIXTURES / "sglang_shapes.json"
    out.write_text(json.dumps(shapes, indent=1, sort_keys=True, default=str) + "\n")
    print(f"wrote {out} (sglang {shapes['sglang_version']}, sglang-router "
          f"{shapes['router']['version']}, {len(server_args['flags'])} server flags)", file=sys.stderr)


if __name__ == "__main__":
    main()
