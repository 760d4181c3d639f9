from .mapping import InputMapping, OutputMapping, RequestParts
from .operation import RemoteOperation

__all__ = ["InputMapping", "OutputMapping", "RemoteOperation", "RequestParts"]
