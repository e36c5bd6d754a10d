"""The routing matrix: every exchange type, through a real server, checked by browsing the queues."""

from __future__ import annotations

import httpx

from tests.api.client import bind, bodies, error, exchange, ok, publish, queue


def queues(api: httpx.Client, name: str, *suffixes: str) -> list[str]:
    names = [f"{name}-{s}" for s in suffixes]
    for q in names:
        queue(api, q)
    return names


def test_direct(api: httpx.Client, name: str) -> None:
    exchange(api, name, "direct")
    a, b = queues(api, name, "a", "b")
    bind(api, name, a, "red")
    bind(api, name, b, "red")
    bind(api, name, b, "blue")
    publish(api, name, {"body": "r", "routing_key": "red"}, {"body": "b", "routing_key": "blue"},
            {"body": "g", "routing_key": "green"})
    assert bodies(api, a) == ["r"]
    assert bodies(api, b) == ["r", "b"]


def test_fanout_ignores_keys(api: httpx.Client, name: str) -> None:
    exchange(api, name, "fanout")
    a, b = queues(api, name, "a", "b")
    bind(api, name, a, "x")
    bind(api, name, b)
    result = publish(api, name, {"body": "1", "routing_key": "anything"})
    assert sorted(r["queue"] for r in result["results"][0]["routed"]) == sorted([a, b])
    assert bodies(api, a) == bodies(api, b) == ["1"]


def test_topic_wildcards(api: httpx.Client, name: str) -> None:
    exchange(api, name, "topic")
    star, hash_, exact, tail = queues(api, name, "star", "hash", "exact", "tail")
    bind(api, name, star, "orders.*")
    bind(api, name, hash_, "orders.#")
    bind(api, name, exact, "orders.eu")
    bind(api, name, tail, "#.paid")
    keys = ["orders", "orders.eu", "orders.eu.paid", "invoices.paid", "orders.us"]
    publish(api, name, *({"body": k, "routing_key": k} for k in keys))
    assert bodies(api, star) == ["orders.eu", "orders.us"]
    assert bodies(api, hash_) == ["orders", "orders.eu", "orders.eu.paid", "orders.us"]  # a.# matches a
    assert bodies(api, exact) == ["orders.eu"]
    assert bodies(api, tail) == ["orders.eu.paid", "invoices.paid"]


def test_headers_all_and_any(api: httpx.Client, name: str) -> None:
    exchange(api, name, "headers")
    all_, any_ = queues(api, name, "all", "any")
    bind(api, name, all_, **{"x-match": "all", "kind": "order", "region": "eu"})
    bind(api, name, any_, **{"x-match": "any", "kind": "order", "region": "eu"})
    publish(
        api, name,
        {"body": "both", "headers": {"kind": "order", "region": "eu"}},
        {"body": "kind", "headers": {"kind": "order", "region": "us"}},
        {"body": "none", "headers": {"kind": "invoice"}},
    )
    assert bodies(api, all_) == ["both"]
    assert bodies(api, any_) == ["both", "kind"]


def test_hash_is_stable_and_spreads(api: httpx.Client, name: str) -> None:
    exchange(api, name, "hash")
    names = queues(api, name, "0", "1", "2")
    for q in names:
        bind(api, name, q)
    keys = [f"customer-{i}" for i in range(60)]
    first = publish(api, name, *({"body": k, "routing_key": k} for k in keys))
    second = publish(api, name, *({"body": k, "routing_key": k} for k in keys))
    placement = [r["routed"][0]["queue"] for r in first["results"]]
    assert placement == [r["routed"][0]["queue"] for r in second["results"]]  # same key, same queue
    assert set(placement) == set(names)  # and every queue gets some keys
    assert all(len(r["routed"]) == 1 for r in first["results"])


def test_default_exchange_routes_by_queue_name(api: httpx.Client, name: str) -> None:
    queue(api, name)
    result = publish(api, "amq.default", {"body": "hi", "routing_key": name}, {"body": "lost", "routing_key": "nope"})
    assert result["results"][0]["routed"] == [{"queue": name, "offset": 0}]
    assert result["results"][1]["routed"] == []
    assert bodies(api, name) == ["hi"]


def test_alternate_exchange_takes_unroutable(api: httpx.Client, name: str) -> None:
    alt = f"{name}-alt"
    exchange(api, alt, "fanout")
    exchange(api, name, "direct", alternate_exchange=alt)
    main_q, alt_q = queues(api, name, "main", "alt")
    bind(api, name, main_q, "k")
    bind(api, alt, alt_q)
    publish(api, name, {"body": "routed", "routing_key": "k"}, {"body": "stray", "routing_key": "other"})
    assert bodies(api, main_q) == ["routed"]
    assert bodies(api, alt_q) == ["stray"]


def test_mandatory_unroutable_stores_nothing(api: httpx.Client, name: str) -> None:
    exchange(api, name, "direct")
    (q,) = queues(api, name, "q")
    bind(api, name, q, "k")
    response = api.post(
        f"/api/v1/exchanges/{name}/publish",
        json={"messages": [{"body": "a", "routing_key": "k"}, {"body": "b", "routing_key": "zzz"}], "mandatory": True},
    )
    error(response, 422, "unroutable")
    assert bodies(api, q) == []
    info = ok(api.get(f"/api/v1/exchanges/{name}"))
    assert info["messages_unroutable"] >= 1


def test_unbind_stops_routing(api: httpx.Client, name: str) -> None:
    exchange(api, name, "fanout")
    (q,) = queues(api, name, "q")
    binding = bind(api, name, q)
    assert bind(api, name, q)["id"] == binding["id"]  # identical binding: same one, 200
    listed = ok(api.get("/api/v1/bindings", params={"exchange": name}))
    assert [b["id"] for b in listed] == [binding["id"]]
    ok(api.delete(f"/api/v1/bindings/{binding['id']}"), 204)
    publish(api, name, {"body": "x"})
    assert bodies(api, q) == []
    error(api.delete(f"/api/v1/bindings/{binding['id']}"), 404, "binding_not_found")
