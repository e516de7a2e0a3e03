"""A tool that takes exactly the arguments it declares.

The SDK's argument model ignores an argument it does not know (pydantic's default
`extra="ignore"`; modelcontextprotocol/python-sdk#3067), so a misspelt or made-up
argument (`ttl_secs`, or one the tool lacks) would be dropped and the call would
do something other than what was asked, answered as a success. Here such a call
is a tool error naming the argument, and the input schema says so
(`additionalProperties: false`) for a client that checks before calling.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.types import ToolAnnotations
from pydantic import ConfigDict


def strict_tool(fn: Callable[..., Any], name: str, annotations: ToolAnnotations) -> Tool:
    """The SDK's tool of `fn`, refusing any argument `fn` does not take."""
    tool = Tool.from_function(fn, name=name, annotations=annotations)
    loose = tool.fn_metadata.arg_model
    # Same fields and name (its name titles the schema and the error); extras refused.
    strict = cast(
        type[ArgModelBase],
        type(
            loose.__name__,
            (loose,),
            {"model_config": ConfigDict(extra="forbid"), "__module__": loose.__module__},
        ),
    )
    tool.fn_metadata.arg_model = strict
    tool.parameters = strict.model_json_schema(by_alias=True)
    return tool
