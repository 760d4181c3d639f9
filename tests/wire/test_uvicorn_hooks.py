"""The contract between `crank.wire.protocol` and uvicorn's private surface: every hook of uvicorn's httptools
protocol and request cycle that Crank overrides, calls or reads, by name. An upgrade of uvicorn that renames,
removes or reshapes one fails here, by name, before tests/wire/test_listen.py and test_protocol.py fail by
behaviour. pyproject.toml pins uvicorn to the minor versions this test passes on; import-linter keeps uvicorn out
of every other module but `crank.wire.listen` (its public server) and `crank.cli.common` (its app importer)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from uvicorn.protocols.http import flow_control, httptools_impl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

import crank.wire.protocol as protocol_module
from crank.wire.protocol import CrankHTTPProtocol, _Cycle

OVERRIDDEN = {
    HttpToolsProtocol: {
        "__init__", "connection_made", "connection_lost", "data_received", "pause_writing", "resume_writing",
        "on_message_begin", "on_url", "on_header", "on_headers_complete", "on_message_complete",
        "on_response_complete", "shutdown", "_start_asgi_task", "_unsupported_upgrade_warning",
    },
    RequestResponseCycle: {"send"},
}  # fmt: skip
"""Methods Crank's classes define in place of uvicorn's (each calls uvicorn's, or does its whole job)."""

CALLED = {HttpToolsProtocol: {"send_400_response"}}
"""uvicorn's private methods Crank's protocol calls."""

READ = {
    HttpToolsProtocol: {
        "access_log", "access_logger", "app", "config", "connections", "cycle", "expect_100_continue", "flow",
        "headers", "limit_concurrency", "logger", "loop", "parser", "pipeline", "root_path", "scope",
        "server_state", "tasks", "timeout_keep_alive", "transport", "url",
    },
    RequestResponseCycle: {
        "chunked_encoding", "default_headers", "disconnected", "expected_content_length", "keep_alive",
        "message_event", "on_response", "response_complete", "response_started", "waiting_for_100_continue",
    },
}  # fmt: skip
"""uvicorn's attributes Crank's classes read or set (instance attributes its own code assigns)."""

MODULE_NAMES = {httptools_impl: {"STATUS_LINE", "HttpToolsProtocol", "RequestResponseCycle"},
                flow_control: {"service_unavailable"}}  # fmt: skip
"""Names of uvicorn's modules Crank's protocol imports."""


def _assigned(cls: type) -> set[str]:
    """The attributes `cls`'s own code (and its bases') assigns or reads on `self`."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass.__module__.startswith("uvicorn"):
            names |= set(re.findall(r"self\.([A-Za-z_]\w*)", inspect.getsource(klass)))
    return names | set(dir(cls))


@pytest.mark.parametrize("base", [HttpToolsProtocol, RequestResponseCycle], ids=lambda base: base.__name__)
def test_each_hook_crank_relies_on_is_uvicorns(base: type) -> None:
    present = _assigned(base)
    for name in OVERRIDDEN.get(base, set()) | CALLED.get(base, set()):
        assert callable(getattr(base, name, None)), f"uvicorn's {base.__name__}.{name} is gone"
    missing = sorted(READ.get(base, set()) - present)
    assert missing == [], f"uvicorn's {base.__name__} no longer has {missing}"


@pytest.mark.parametrize(("ours", "base"), [(CrankHTTPProtocol, HttpToolsProtocol), (_Cycle, RequestResponseCycle)])
def test_each_method_crank_overrides_takes_uvicorns_parameters(ours: type, base: type) -> None:
    overridden = {name for name, member in vars(ours).items() if callable(member) and hasattr(base, name)}
    assert overridden == OVERRIDDEN[base] - {"__init__"} | ({"__init__"} if "__init__" in vars(ours) else set())
    for name in overridden - {"__init__"}:
        theirs = list(inspect.signature(getattr(base, name)).parameters)
        mine = list(inspect.signature(getattr(ours, name)).parameters)
        assert mine == theirs, f"{ours.__name__}.{name}{mine} no longer matches uvicorn's {theirs}"


def test_the_names_listed_here_are_all_that_crank_uses() -> None:
    """A new use of uvicorn's surface in crank.wire.protocol must be named above (and so checked on upgrade)."""
    source = Path(protocol_module.__file__).read_text()
    used = set(re.findall(r"self\.([A-Za-z_]\w*)", source)) | set(re.findall(r"super\(\)\.([A-Za-z_]\w*)", source))
    own = {name for cls in (CrankHTTPProtocol, _Cycle) for name in vars(cls)}
    theirs = {name for name in used - own if name in _assigned(HttpToolsProtocol) | _assigned(RequestResponseCycle)}
    listed = set().union(*OVERRIDDEN.values(), *CALLED.values(), *READ.values())
    assert theirs - listed == set()  # used, not named
    assert listed - theirs - own == set()  # named, no longer used
    for module, names in MODULE_NAMES.items():
        assert all(hasattr(module, name) for name in names), module.__name__
        assert all(name in source for name in names)
