import crank.exceptions as _exceptions  # an absolute import: `attach_stub` reads only the `from .x` ones

from .after_response import call_after_response
from .calls import InvalidArgumentsMode
from .catalog import Catalog, estimate_tokens
from .endpoint_options import EndpointAccess, EndpointOptions
from .formats import FORMATS
from .http import CatalogProvider, MCPEndpoint
from .input_required import InputRequired, elicitation, roots_listing, sampling
from .prompts import Prompt, PromptArgument, PromptMessage, PromptResult
from .resources import Resource, ResourceContents, ResourceTemplate
from .routing import EndpointRouter, mount
from .server import ServerInfo
from .tools import CallContext, Icon, Invoker, NotedResult, Tool, ToolAnnotations, ToolResult
from .translations import Translations

CatalogNotFoundError = _exceptions.CatalogNotFoundError
CatalogUnauthorizedError = _exceptions.CatalogUnauthorizedError

__all__ = [
    "CallContext",
    "Catalog",
    "CatalogNotFoundError",
    "CatalogProvider",
    "CatalogUnauthorizedError",
    "EndpointAccess",
    "EndpointOptions",
    "EndpointRouter",
    "FORMATS",
    "Icon",
    "InputRequired",
    "InvalidArgumentsMode",
    "Invoker",
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
    "mount",
    "roots_listing",
    "sampling",
]
