"""Several `crank serve` processes behind nginx (tests/cluster.py, deploy/nginx/crank.conf), sharing one
PostgreSQL registry and one Redis: what docs/deployment.md describes."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from tests.cluster import StartCluster, mcp, publish_user_agent, serves_tool, until
from tests.gateway import upstream


def test_three_replicas_behind_nginx_serve_what_the_admin_api_published(
    start_cluster: StartCluster, serve: Callable[..., str]
) -> None:
    users = serve(upstream.app)
    cluster = start_cluster(3)
    key = publish_user_agent(cluster.url, users)  # through nginx: any replica may take each admin request
    for replica in cluster.replicas:  # each one sees the publish at its next registry poll
        until(partial(serves_tool, replica.url, key, "user_get"), what=f"the publish on {replica.url}")

    listed = mcp(cluster.url, key, "tools/list")
    assert listed.status_code == 200
    assert [tool["name"] for tool in listed.json()["result"]["tools"]] == ["user_get"]
    for replica in cluster.replicas:  # every replica serves it, not just the one that took the publish
        called = mcp(replica.url, key, "tools/call", {"name": "user_get", "arguments": {"id": 2}})
        assert called.json()["result"]["structuredContent"]["name"] == "user2"
