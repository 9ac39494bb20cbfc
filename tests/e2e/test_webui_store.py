"""The chat page's conversation store on a real daemon: REST routes, scoping per API key, concurrent writers, a
restart, and a database that is corrupt or locked (clear error, chat goes on, nothing overwritten)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import httpx

from tests.e2e.read_only_sqlite import read_only_sqlite_env

KEY_A, KEY_B = "sk-store-key-a", "sk-store-key-b"


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def put(client: httpx.Client, cid: str, mid: str, parent: str | None, role: str, content: str,
        headers: dict[str, str] | None = None) -> httpx.Response:
    return client.put(f"/webui/conversations/{cid}/messages/{mid}", headers=headers,
                      json={"parent": parent, "role": role, "content": content})


def test_list_search_rename_delete_export_import(start_server, tmp_path: Path) -> None:
    server = start_server("--state-dir", str(tmp_path / "state"))
    with server.client() as client:
        assert client.get("/webui/store").json() == {"enabled": True, "error": None, "scoped": False}
        first = client.post("/webui/conversations", json={"title": "Rust lifetimes"}).json()
        second = client.post("/webui/conversations", json={"title": "Soup"}).json()
        assert put(client, first["id"], "m1", None, "user", "what is a borrow?").status_code == 200
        assert put(client, first["id"], "m2", "m1", "assistant", "a **reference**").status_code == 200
        assert [c["id"] for c in client.get("/webui/conversations").json()] == [first["id"], second["id"]]
        assert [c["id"] for c in client.get("/webui/conversations", params={"q": "borrow"}).json()] == [first["id"]]
        assert [c["id"] for c in client.get("/webui/conversations", params={"q": "sou"}).json()] == [second["id"]]
        assert client.get("/webui/conversations", params={"q": "%"}).json() == []  # LIKE wildcards are literal
        renamed = client.patch(f"/webui/conversations/{second['id']}", json={"title": "Leek soup"}).json()
        assert renamed["title"] == "Leek soup"
        full = client.get(f"/webui/conversations/{first['id']}").json()
        assert full["leaf"] == "m2"
        assert [(m["id"], m["parent"], m["role"], m["content"]) for m in full["messages"]] == [
            ("m1", None, "user", "what is a borrow?"), ("m2", "m1", "assistant", "a **reference**")]
        exported = client.get("/webui/export").json()
        assert {c["title"] for c in exported["conversations"]} == {"Rust lifetimes", "Leek soup"}
        assert client.delete(f"/webui/conversations/{second['id']}").json() == {"deleted": True}
        assert client.get(f"/webui/conversations/{second['id']}").status_code == 404
        imported = client.post("/webui/import", json=exported).json()["imported"]
        assert len(imported) == 2 and first["id"] not in imported  # fresh ids: nothing stored is overwritten
        assert len(client.get("/webui/conversations").json()) == 3
        assert client.get(f"/webui/conversations/{first['id']}").json()["messages"] == full["messages"]
        bad = client.post("/webui/import", json={"conversations": [{"messages": [{"id": "../x", "role": "user"}]}]})
        assert bad.status_code == 400


def test_each_key_sees_only_its_own_conversations(start_server, tmp_path: Path) -> None:
    server = start_server("--api-key", f"{KEY_A},{KEY_B}", "--state-dir", str(tmp_path / "state"))
    with server.client() as client:
        assert client.get("/webui/conversations").status_code == 401
        mine = client.post("/webui/conversations", json={"title": "A's secret"}, headers=auth(KEY_A)).json()
        assert put(client, mine["id"], "m1", None, "user", "hello", auth(KEY_A)).status_code == 200
        assert client.get("/webui/store", headers=auth(KEY_B)).json()["scoped"] is True
        assert client.get("/webui/conversations", headers=auth(KEY_B)).json() == []
        assert client.get("/webui/conversations", params={"q": "secret"}, headers=auth(KEY_B)).json() == []
        unknown = client.get("/webui/conversations/" + "0" * 32, headers=auth(KEY_B))
        others = client.get(f"/webui/conversations/{mine['id']}", headers=auth(KEY_B))
        assert (others.status_code, others.json()) == (unknown.status_code, unknown.json()) == (404, unknown.json())
        for response in (client.patch(f"/webui/conversations/{mine['id']}", json={"title": "x"}, headers=auth(KEY_B)),
                         client.delete(f"/webui/conversations/{mine['id']}", headers=auth(KEY_B)),
                         put(client, mine["id"], "m2", "m1", "user", "injected", auth(KEY_B))):
            assert (response.status_code, response.json()) == (404, unknown.json())
        assert client.get("/webui/export", headers=auth(KEY_B)).json() == {"conversations": []}
        # B creating a conversation with A's id gets a fresh id; A's is untouched.
        taken = client.post("/webui/conversations", json={"id": mine["id"], "title": "B"}, headers=auth(KEY_B)).json()
        assert taken["id"] != mine["id"]
        still = client.get(f"/webui/conversations/{mine['id']}", headers=auth(KEY_A)).json()
        assert still["title"] == "A's secret" and [m["content"] for m in still["messages"]] == ["hello"]
    # The key itself is never stored, only its hash.
    raw = (tmp_path / "state" / "webui.sqlite3").read_bytes()
    assert KEY_A.encode() not in raw and KEY_B.encode() not in raw


def test_two_writers_at_once_lose_nothing_and_a_restart_keeps_everything(start_server, tmp_path: Path) -> None:
    state = tmp_path / "state"
    server = start_server("--state-dir", str(state))
    with server.client() as client:
        cid = client.post("/webui/conversations", json={"title": "busy"}).json()["id"]

    def writer(tab: str) -> None:
        with server.client() as own:
            for n in range(20):
                assert put(own, cid, f"{tab}{n}", None, "user", f"{tab} {n}").status_code == 200

    threads = [threading.Thread(target=writer, args=(tab,)) for tab in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    server.stop()
    again = start_server("--state-dir", str(state))
    with again.client() as client:
        messages = client.get(f"/webui/conversations/{cid}").json()["messages"]
    assert sorted(m["id"] for m in messages) == sorted(f"{tab}{n}" for tab in "ab" for n in range(20))


def test_a_corrupt_database_costs_no_chat_and_is_left_untouched(start_server, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    db = state / "webui.sqlite3"
    garbage = b"this is not a database, but it might be someone's data\n" * 100
    db.write_bytes(garbage)
    server = start_server("--state-dir", str(state))
    with server.client() as client:
        status = client.get("/webui/store").json()
        assert status["enabled"] is True and "not a database" in status["error"]
        listing = client.get("/webui/conversations")
        assert listing.status_code == 503 and "not a database" in listing.json()["error"]["message"]
        assert client.post("/webui/conversations", json={"title": "x"}).status_code == 503
        chat = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                         "max_tokens": 4})
        assert chat.status_code == 200
    assert db.read_bytes() == garbage
    assert "conversation store" in server.log() and "not a database" in server.log()


def test_a_locked_database_answers_a_clear_error_then_recovers(start_server, tmp_path: Path) -> None:
    state = tmp_path / "state"
    server = start_server("--state-dir", str(state))
    with server.client() as client:
        cid = client.post("/webui/conversations", json={"title": "kept"}).json()["id"]
        assert put(client, cid, "m1", None, "user", "before the lock").status_code == 200
        holder = sqlite3.connect(state / "webui.sqlite3", isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        try:
            locked = put(client, cid, "m2", "m1", "user", "during the lock")
            assert locked.status_code == 503 and "locked" in locked.json()["error"]["message"]
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert put(client, cid, "m3", "m1", "user", "after the lock").status_code == 200
        contents = [m["content"] for m in client.get(f"/webui/conversations/{cid}").json()["messages"]]
    assert contents == ["before the lock", "after the lock"]


def test_no_webui_store_leaves_conversations_to_the_browser(start_server, tmp_path: Path) -> None:
    server = start_server("--no-webui-store", "--state-dir", str(tmp_path / "state"))
    with server.client() as client:
        assert client.get("/webui/store").json()["enabled"] is False
        assert client.get("/webui/conversations").status_code == 404
    assert not (tmp_path / "state").exists()


def test_a_read_only_database_serves_what_it_holds_refuses_writes_and_chat_goes_on(start_server,
                                                                                   tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = start_server("--state-dir", str(state))
    with first.client() as client:
        cid = client.post("/webui/conversations", json={"title": "kept"}).json()["id"]
        assert put(client, cid, "m1", None, "user", "written before").status_code == 200
    assert first.stop() == 0
    db = state / "webui.sqlite3"
    before = db.read_bytes()

    server = start_server("--state-dir", str(state), env=read_only_sqlite_env(tmp_path / "hook"))
    with server.client() as client:
        assert [c["id"] for c in client.get("/webui/conversations").json()] == [cid]
        assert [m["content"] for m in client.get(f"/webui/conversations/{cid}").json()["messages"]] == [
            "written before"]
        refused = put(client, cid, "m2", "m1", "user", "written after")
        assert refused.status_code == 503
        message = refused.json()["error"]["message"]
        assert "conversation store" in message and "readonly database" in message and str(db) in message
        assert client.post("/webui/conversations", json={"title": "new"}).status_code == 503
        chat = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                         "max_tokens": 4})
        assert chat.status_code == 200 and chat.json()["usage"]["completion_tokens"] >= 1
        assert [m["content"] for m in client.get(f"/webui/conversations/{cid}").json()["messages"]] == [
            "written before"]
    assert server.stop() == 0
    assert "attempt to write a readonly database" in server.log()
    assert db.read_bytes() == before
