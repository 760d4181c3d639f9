from .agents import AgentSource, build_catalog
from .discovery import Discovery
from .rpc import MCPConfig, RPCSource, is_published
from .search import OperationIndex

__all__ = ["AgentSource", "Discovery", "MCPConfig", "OperationIndex", "RPCSource", "build_catalog", "is_published"]
