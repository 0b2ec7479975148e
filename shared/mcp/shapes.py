"""What an MCP client sees of the mesh's tools: tools/list entries and tools/call results, in one of two shapes
(the `mcp.result_shape` setting).

- faithful (the default, docs/mcp.md): an MCP upstream's result goes on as the upstream sent it
  (`content`, `isError`, `structuredContent`, `_meta`) and its tool definition keeps its `title`,
  `annotations`, `inputSchema`, `outputSchema`. An OpenAPI or CLI tool answers one text block (JSON for a
  structured result) and, when the tool declares an output schema, `structuredContent`. Everything the mesh
  refuses or fails at (denial, halt, rate limit, refused or timed-out approval, backend error) is an
  `isError: true` result with the text CONTRACT 1.14 gives. So is a pending approval ("Approval required …"):
  the call has not run, and a success without structuredContent would break a tool's declared output schema.
- reference: the reference's shape, for clients written against it: every result is one text block with the
  indented JSON of the backend's result (an MCP upstream's result object wrapped twice), a policy denial is not
  `isError`, and tools/list entries are `{name, description, inputSchema}`.

A protocol failure (unknown tool, bad params) is never shaped here: it is a JSON-RPC error (server.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import jsonschema
import jsonschema.exceptions
import jsonschema.validators

from flux7.shared.gate.pipeline import Outcome
from flux7.shared.mcp import texts
from flux7.shared.upstreams.base import ToolDef

__all__ = ["ResultShape", "outcome_result", "output_mismatch", "tool_entry"]

ResultShape = Literal["faithful", "reference"]


def _local_schema(tool: ToolDef) -> dict[str, Any]:
    props = {p.name: {"type": p.type or "string", "description": f"{p.name} parameter ({p.in_})"} for p in tool.params}
    schema: dict[str, Any] = {"type": "object", "properties": props}
    required = [p.name for p in tool.params if p.required]
    if required:
        schema["required"] = required
    return schema


def tool_entry(tool: ToolDef, shape: ResultShape = "faithful") -> dict[str, Any]:
    """A tools/list entry: upstream schemas verbatim, local params as shallow `{type, description}`. Faithful
    entries carry what the upstream declared besides (an upstream's `execution` is left out: it would promise
    task support the mesh does not offer)."""
    schema = tool.input_schema if isinstance(tool.input_schema, dict) and tool.input_schema else _local_schema(tool)
    if schema.get("type") != "object":
        schema = {**schema, "type": "object"}
    entry: dict[str, Any] = {"name": tool.name}
    if shape == "reference":
        entry.update(description=tool.description, inputSchema=schema)
        return entry
    if tool.title is not None:
        entry["title"] = tool.title
    entry.update(description=tool.description, inputSchema=schema)
    if tool.output_schema is not None:
        entry["outputSchema"] = tool.output_schema
    if tool.annotations is not None:
        entry["annotations"] = tool.annotations
    if tool.icons is not None:
        entry["icons"] = tool.icons
    if tool.meta is not None:
        entry["_meta"] = tool.meta
    return entry


def output_mismatch(schema: dict[str, Any], value: Any) -> str:
    """Why `value` does not conform to the output schema ("" when it does)."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    error = jsonschema.exceptions.best_match(cls(schema).iter_errors(value))
    if error is None:
        return ""
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{error.message} (at /{where})" if where else error.message


def _verbatim(result: Any) -> dict[str, Any] | None:
    """An MCP upstream's result as it came, when it is one (a copy: transports add their own keys)."""
    if isinstance(result, dict) and isinstance(result.get("content"), list):
        return dict(result)
    return None


def _structured(tool: ToolDef | None, result: Any) -> dict[str, Any]:
    """An OpenAPI or CLI tool's result: one text block, plus structuredContent under a declared output schema."""
    text = result if isinstance(result, str) else texts.go_indent(result)
    if tool is None or tool.output_schema is None:
        return texts.text_result(text)
    if not isinstance(result, dict):
        why = "the result is not a JSON object"
    else:
        why = output_mismatch(tool.output_schema, result)
    if why:  # a client would refuse it; say so as the backend's failure, in the contract's words
        error = texts.backend_error(f"the result does not match the tool's output schema: {why}")
        return texts.text_result(error, is_error=True)
    shaped = texts.text_result(text)
    shaped["structuredContent"] = result
    return shaped


def outcome_result(
    out: Outcome, tool: ToolDef | None, name: str, valid_seconds: Callable[[], int], shape: ResultShape = "faithful"
) -> dict[str, Any]:
    """A pipeline Outcome as a tools/call result; the texts are CONTRACT 1.14's in both shapes."""
    if out.halted:
        return texts.text_result(out.halt_message or out.error, is_error=True)
    if out.policy == "rate_limited":
        return texts.text_result(texts.rate_limited(out.error), is_error=True)
    if out.policy == "deny":
        return texts.text_result(texts.policy_denied(out.reason), is_error=shape == "faithful")
    if out.policy == "human_approval" and not out.has_result:
        if out.approval_status == "pending":
            # The call did not run: an error result, or a client would hold a tool's declared output schema
            # against this text (the SDK clients refuse a success without structuredContent).
            text = texts.approval_required(out.approval_id, name, valid_seconds())
            return texts.text_result(text, is_error=shape == "faithful")
        if out.approval_status == "denied":
            return texts.text_result(
                texts.approval_denied(out.resolved_by, name, out.approval_id, out.reasoning), is_error=True
            )
        if out.approval_status == "timeout":
            return texts.text_result(texts.approval_timed_out(name, out.approval_id), is_error=True)
        if not out.error:
            return texts.text_result(texts.backend_error("no result"), is_error=True)
    if out.policy == "error":
        return texts.text_result(out.error or "error", is_error=True)
    if out.error:
        return texts.text_result(texts.backend_error(out.error), is_error=True)
    if shape == "reference":
        return texts.text_result(texts.go_indent(out.result))
    if tool is not None and tool.source == "mcp":
        verbatim = _verbatim(out.result)
        if verbatim is not None:
            return verbatim
    return _structured(tool, out.result)
