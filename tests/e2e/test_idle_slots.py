"""``--cache-idle-slots`` on a real daemon: a starting task saves the idle slots' caches to the prompt cache (and,
with a unified KV cache, clears them), as llama.cpp's test_kv_keep_only_active.py checks of b10621."""

from __future__ import annotations

from typing import Any

LONG = ("Once upon a time in a land far away, there lived a brave knight who traveled across mountains and rivers to "
        "find the legendary golden sword hidden deep within the enchanted forest of whispers.")
ENABLED, SAVED = "__TEST_TAG_CACHE_IDLE_SLOTS_ENABLED__", "__TEST_TAG_CACHE_IDLE_SLOT__"
BASE = ("-np", "2", "-c", "1024", "-n", "4", "--temp", "0", "--cache-ram", "100", "--verbose")


def _complete(client: Any, prompt: str, **extra: Any) -> dict[str, Any]:
    res = client.post("/completion", json={"prompt": prompt, "cache_prompt": True, **extra})
    assert res.status_code == 200, res.text
    return dict(res.json()["timings"])


def _resident(client: Any, slot: int) -> int:
    return int(client.get("/slots").json()[slot].get("n_prompt_tokens", 0))


def test_unified_kv_moves_idle_slots_to_the_prompt_cache(start_server: Any) -> None:
    server = start_server(*BASE, "--kv-unified")
    with server.client() as client:
        assert server.log().count(ENABLED) == 1
        first = _complete(client, LONG, id_slot=0)
        assert server.log().count(SAVED) == 0  # slot 0 was the only one with a cache, and it was starting
        assert _resident(client, 0) > 0
        _complete(client, "The quick brown fox", id_slot=1)
        assert server.log().count(SAVED) == 1
        assert _resident(client, 0) == 0  # cleared: its cache lives in the prompt cache now
        log_before = len(server.log())
        again = _complete(client, LONG)  # on the least recently used slot, 0, from the prompt cache
        assert "updating prompt cache" in server.log()[log_before:]
        assert again["cache_n"] > 0 and again["prompt_n"] < first["prompt_n"]
        saved = server.log().count(SAVED)  # slot 1 went the same way when this one started
        _complete(client, LONG + " The knight finally reached the castle gates.")
        assert server.log().count(SAVED) == saved  # slot 1 is empty: nothing more to save


def test_split_kv_publishes_a_copy_and_keeps_the_slot(start_server: Any) -> None:
    server = start_server(*BASE, "--no-kv-unified")
    with server.client() as client:
        assert server.log().count(ENABLED) == 1
        first = _complete(client, LONG, id_slot=0)
        _complete(client, "The quick brown fox", id_slot=1)
        assert server.log().count(SAVED) == 1 and _resident(client, 0) > 0  # a copy went; the slot keeps its own
        _complete(client, "A different prompt on slot one", id_slot=1)
        assert server.log().count(SAVED) == 1  # slot 0's tokens are in the prompt cache already
        follow = _complete(client, LONG + " The end.", id_slot=0)
        assert follow["cache_n"] > 0 and follow["prompt_n"] < first["prompt_n"]


def test_disabled_by_the_flag_or_without_a_prompt_cache(start_server: Any) -> None:
    off = start_server(*BASE, "--kv-unified", "--no-cache-idle-slots")
    with off.client() as client:
        _complete(client, LONG, id_slot=0)
        _complete(client, "The quick brown fox", id_slot=1)
        assert ENABLED not in off.log() and SAVED not in off.log()
        assert _resident(client, 0) > 0
    no_cache = start_server("-np", "2", "--cache-ram", "0", "--verbose")
    with no_cache.client() as client:
        assert client.get("/health").status_code == 200
    assert "--cache-idle-slots requires --cache-ram, disabling" in no_cache.log()
    assert ENABLED not in no_cache.log()
