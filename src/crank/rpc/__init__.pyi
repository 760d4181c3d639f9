from .app import RPCApp
from .auth import BearerTokenRoles, RoleResolver
from .context import Context
from .events import Event
from .executor import fencing_token
from .method import MCP, RateLimit

__all__ = ["BearerTokenRoles", "Context", "Event", "MCP", "RPCApp", "RateLimit", "RoleResolver", "fencing_token"]
