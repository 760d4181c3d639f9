"""The MCP layer: tools, resources, prompts, catalogs and the Streamable HTTP endpoint every source plugs into."""

from __future__ import annotations

from crank.exceptions import CatalogNotFoundError, CatalogUnauthorizedError
from crank.mcp.after_response import call_after_response
from crank.mcp.calls import InvalidArgumentsMode
from crank.mcp.catalog import Catalog, estimate_tokens
from crank.mcp.endpoint_options import EndpointAccess, EndpointOptions
from crank.mcp.formats import FORMATS
from crank.mcp.http import CatalogProvider, MCPEndpoint
from crank.mcp.input_required import InputRequired, elicitation, roots_listing, sampling
from crank.mcp.prompts import Prompt, PromptArgument, PromptMessage, PromptResult
from crank.mcp.resources import Resource, ResourceContents, ResourceTemplate
from crank.mcp.routing import EndpointRouter, mount
from crank.mcp.server import ServerInfo
from crank.mcp.tools import CallContext, Icon, Invoker, NotedResult, Tool, ToolAnnotations, ToolResult
from crank.mcp.translations import Translations

__all__ = [
    "FORMATS",
    "CallContext",
    "Catalog",
    "CatalogNotFoundError",
    "CatalogProvider",
    "CatalogUnauthorizedError",
    "Icon",
    "InputRequired",
    "InvalidArgumentsMode",
    "Invoker",
    "EndpointAccess",
    "EndpointOptions",
    "MCPEndpoint",
    "NotedResult",
    "Prompt",
    "PromptArgument",
    "PromptMessage",
    "PromptResult",
    "Resource",
    "ResourceContents",
    "ResourceTemplate",
    "ServerInfo",
    "Tool",
    "ToolAnnotations",
    "ToolResult",
    "Translations",
    "call_after_response",
    "elicitation",
    "estimate_tokens",
    "EndpointRouter",
    "mount",
    "roots_listing",
    "sampling",
]
