"""The egress policy (crank.gateway.egress): upstream targets at internal addresses or at the gateway's own
port are refused at publish and at call time, with real servers on loopback."""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
from collections.abc import Callable
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from crank.admin.actions import PublishReport, publish_agent
from crank.exceptions import ConfigurationError
from crank.gateway.client import UpstreamClient
from crank.gateway.egress import ALLOW_VARIABLE, DENIED, LOOPBACK, EgressPolicy
from crank.registry import Registry
from crank.server import GatewayService
from mcp import Client

pytestmark = pytest.mark.anyio

hits: list[str] = []


async def thing(request: Request) -> JSONResponse:
    hits.append(request.url.path)
    return JSONResponse({"ok": True})


upstream = Starlette(routes=[Route("/{rest:path}", thing)])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def publish(registry: Registry, targets: dict[str, str], *, egress: EgressPolicy | None = None) -> PublishReport:
    if "acme" not in {workspace["slug"] for workspace in registry.workspaces()}:
        registry.create_workspace("acme", "Acme")
    for name, url in targets.items():
        registry.put_operation("acme", name, {"protocol": "http", "target": {"method": "GET", "url": url},
                                              "description": "A thing."})  # fmt: skip
    registry.put_agent("acme", "desk", {"bindings": [{"operation": name} for name in targets]})
    return publish_agent(registry, "acme", "desk", egress=egress)


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",  # the cloud metadata service
        "http://10.1.2.3/internal",
        "http://192.168.0.1/router",
        "http://[fd00::1]/ula",
        "http://[::ffff:169.254.169.254]/mapped",
        "http://0.0.0.0:8080/x",
        "http://224.0.0.1/multicast",
        "http://127.0.0.1:9/loopback",
        "http://[64:ff9b::a9fe:a9fe]/nat64",  # the metadata service through NAT64
        "http://[64:ff9b:1::808:808]/local-nat64",  # local-use NAT64: refused whatever it carries
        "http://[2002:a9fe:a9fe::]/6to4",
        "http://[::7f00:1]/ipv4-compatible",
        "http://[2001:0:4136:e378:8000:63bf:5601:5601]/teredo",  # client 169.254.169.254
        "http://[fec0::1]/site-local",
        "http://[2001:db8::1]/documentation",
        "http://198.18.0.1/benchmarking",
    ],
)
def test_a_target_at_an_internal_address_is_refused_at_publish(
    sqlite_registry: Registry, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ALLOW_VARIABLE)  # the default policy: public addresses only
    refused = r"tool 'get_thing': target url: .* is not a public address; this server's egress policy refuses it"
    with pytest.raises(ConfigurationError, match=refused + r" \(CRANK_EGRESS_ALLOW"):
        publish(sqlite_registry, {"get_thing": url})
    assert sqlite_registry.versions("acme", "desk") == []


def test_an_ipv6_address_is_judged_by_the_ipv4_address_it_carries() -> None:
    public = EgressPolicy()
    for carrying in ("64:ff9b::808:808", "2002:808:808::1", "2001:0:4136:e378:8000:63bf:f7f7:f7f7", "::ffff:8.8.8.8"):
        assert public.refusal(carrying, ipaddress.ip_address(carrying), 443) is None, carrying  # 8.8.8.8
    assert public.target_refusal("https://[2606:4700:4700::1111]/") is None  # a plain public IPv6 address
    refused = public.refusal("64:ff9b::a9fe:a9fe", ipaddress.ip_address("64:ff9b::a9fe:a9fe"), 80)
    assert refused == "[64:ff9b::a9fe:a9fe]:80 (169.254.169.254) is not a public address"
    # An allowance of the IPv4 network covers the addresses that carry it, and so does the gateway's own port.
    private = EgressPolicy(["10.0.0.0/8"], listen=["127.0.0.1:8123"])
    assert private.target_refusal("http://[2002:a00:1::]/x") is None
    assert "own port" in str(
        EgressPolicy(LOOPBACK, listen=["127.0.0.1:8123"]).target_refusal("http://[::7f00:1]:8123/")
    )


def test_every_denied_range_is_refused_whatever_python_calls_global() -> None:
    policy = EgressPolicy()
    for network in DENIED:
        address = network[1] if network.num_addresses > 1 else network[0]
        assert policy.refusal(str(address), address, 443) is not None, network


def test_an_allowance_opens_exactly_what_it_names(sqlite_registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ALLOW_VARIABLE, "10.1.0.0/16, 192.168.0.1:8443")
    publish(sqlite_registry, {"get_thing": "http://10.1.2.3/internal"})
    publish(sqlite_registry, {"get_thing": "https://192.168.0.1:8443/x"})
    for refused in ("http://10.2.0.1/x", "http://192.168.0.1/x", "http://169.254.169.254/"):
        with pytest.raises(ConfigurationError, match="is not a public address"):
            publish(sqlite_registry, {"get_thing": refused})


def test_the_gateways_own_port_is_refused_where_loopback_is_allowed(sqlite_registry: Registry) -> None:
    loopback = EgressPolicy(LOOPBACK, listen=["0.0.0.0:8123"])
    for own in ("http://127.0.0.1:8123/admin/v1/workspaces", "http://[::1]:8123/x", "http://127.0.0.2:8123/x"):
        with pytest.raises(ConfigurationError, match=r"is the gateway's own port"):
            publish(sqlite_registry, {"get_thing": own}, egress=loopback)
    publish(sqlite_registry, {"get_thing": "http://127.0.0.1:8124/x"}, egress=loopback)  # another port of loopback
    # Named with its port, as the demo names the API it serves itself: allowed.
    demo = EgressPolicy([*LOOPBACK, "127.0.0.1:8123"], listen=["127.0.0.1:8123"])
    publish(sqlite_registry, {"get_thing": "http://127.0.0.1:8123/demo-api/books"}, egress=demo)


def _error(result: Any) -> dict[str, Any]:
    assert result.is_error is True
    payload: dict[str, Any] = json.loads(result.content[0].text)
    return payload


async def test_calls_to_refused_addresses_are_configuration_errors(
    sqlite_registry: Registry, serve: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    hits.clear()
    base = serve(upstream).replace("127.0.0.1", "localhost")  # names: checked only when the call connects
    port = free_port()
    # Published where more is allowed (another admin host); served by a replica that allows loopback only,
    # whose own port is `port`.
    publish(sqlite_registry, {
        "get_thing": base + "/thing",
        "get_own": f"http://localhost:{port}/healthz",
        "get_metadata": "http://169.254.169.254/latest/meta-data/",
    }, egress=EgressPolicy(["0.0.0.0/0", "::/0", f"localhost:{port}"]))  # fmt: skip
    replica = EgressPolicy(LOOPBACK, listen=[f"127.0.0.1:{port}"])
    gateway = GatewayService(sqlite_registry, client=UpstreamClient(egress=replica), require_api_keys=False)
    url = serve(gateway, port=port) + "/mcp/v1/acme/desk"
    with caplog.at_level(logging.INFO, logger="crank"):
        async with Client(url, mode="auto") as client:
            assert (await client.call_tool("get_thing", {})).structured_content == {"ok": True}
            own = _error(await client.call_tool("get_own", {}))
            metadata = _error(await client.call_tool("get_metadata", {}))
    for error in (own, metadata):
        assert (error["error_code"], error["error_class"]) == ("configuration_error", "configuration")
        assert "egress policy" in error["message"] and "169.254" not in error["message"]
    assert hits == ["/thing"]
    logged = [record.getMessage() for record in caplog.records if "egress policy refuses" in record.getMessage()]
    assert any(f":{port} is the gateway's own port" in line for line in logged)
    assert any("169.254.169.254:80 is not a public address" in line for line in logged)
    assert not [record for record in caplog.records if record.exc_info]


async def test_a_name_is_checked_on_the_addresses_it_resolves_to(
    serve: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    hits.clear()
    port = int(serve(upstream).rsplit(":", 1)[1])
    client = UpstreamClient(egress=EgressPolicy())  # public addresses only
    with pytest.raises(Exception, match="is not a public address") as refused:
        await client.request("GET", f"http://localhost:{port}/x", params=None, headers={}, body=None, timeout=5)
    assert type(refused.value).__name__ == "UpstreamRefusedError" and hits == []
    allowed = UpstreamClient(egress=EgressPolicy([f"localhost:{port}"]))  # the name, allowed by the operator
    response = await allowed.request("GET", f"http://localhost:{port}/y", params=None, headers={}, body=None,
                                     timeout=5)  # fmt: skip
    assert response.status == 200 and hits == ["/y"]
    await allowed.aclose()


def test_a_bad_allowance_is_a_settings_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from crank.settings import SettingsError, load_settings

    monkeypatch.setenv(ALLOW_VARIABLE, "10.0.0.0/8,nonsense")
    with pytest.raises(SettingsError, match=r"CRANK_EGRESS_ALLOW: .*'nonsense' is not a network"):
        load_settings()
