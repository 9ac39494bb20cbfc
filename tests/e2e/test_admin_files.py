"""The TOML file as the source of truth: edits apply live, bad edits change nothing, persist writes overrides back."""

from __future__ import annotations

import os
import re
import shutil
import stat
import tomllib
from pathlib import Path
from typing import Iterator

import pytest

from tests.e2e.admin_harness import admin, short_dir, wait_for
from tests.e2e.conftest import RunningServer, launch


@pytest.fixture(scope="module")
def daemon(tiny_checkpoint: Path) -> Iterator[tuple[RunningServer, Path, Path]]:
    home = short_dir()
    sock, toml = home / "admin.sock", home / "mlxd.toml"
    toml.write_text(f'model = "{tiny_checkpoint}"\nctx-size = 256\ntemperature = 0.5\n')
    running = launch(["--host", "127.0.0.1", "--port", "0", "--config", str(toml),
                      "--admin-listen", f"unix:{sock}"], home / "mlxd.log")
    yield running, sock, toml
    assert running.stop() == 0
    shutil.rmtree(home, ignore_errors=True)


def _replace(path: Path, text: str) -> None:
    """Write like an editor: a new file renamed over the old one."""
    tmp = path.with_suffix(".new")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_an_edit_applies_within_two_seconds(daemon: tuple[RunningServer, Path, Path]) -> None:
    running, sock, toml = daemon
    with admin(sock) as client:
        before = client.get("/v1/status").json()["generation"]
        _replace(toml, toml.read_text().replace("temperature = 0.5", "temperature = 0.75"))
        wait_for(lambda: client.get("/v1/status").json()["generation"] == before + 1, 2.0, "the edit to apply")
        option = client.get("/v1/config").json()["options"]["temperature"]
        assert option["value"] == 0.75 and option["source"] == f"toml:{toml}:3"


@pytest.mark.parametrize("text, needle", [
    ("top-p = = 0.9\n", "mlxd.toml"),  # malformed TOML
    ("top-k = \"many\"\n", "top-k"),  # a value of the wrong type
    ("no-such-option = 1\n", "no-such-option"),  # an unknown key
])
def test_a_bad_edit_changes_nothing(daemon: tuple[RunningServer, Path, Path], text: str, needle: str) -> None:
    running, sock, toml = daemon
    good = toml.read_text()
    with admin(sock) as client, running.client() as public:
        before = client.get("/v1/status").json()
        model_before = public.get("/v1/models").json()["data"][0]["id"]
        _replace(toml, good + text)
        status = wait_for(lambda: (s := client.get("/v1/status").json())["last_error"] != before["last_error"]
                          and s, 5.0, "the refusal")
        assert needle in status["last_error"]["message"]
        assert status["last_error"]["trigger"].startswith("file:")
        assert (status["generation"], status["config_hash"]) == (before["generation"], before["config_hash"])
        assert public.get("/v1/models").json()["data"][0]["id"] == model_before
        assert "change refused" in running.log() and needle in running.log()
        # Putting the good file back changes no value (same config hash), the model kept serving throughout, and
        # the reload that succeeds clears last_error.
        _replace(toml, good)
        wait_for(lambda: client.get("/v1/status").json()["last_error"] is None, 5.0, "last_error to clear")
        assert client.get("/v1/status").json()["config_hash"] == before["config_hash"]
        assert public.get("/health").status_code == 200


def test_a_model_that_fails_to_load_changes_nothing(daemon: tuple[RunningServer, Path, Path]) -> None:
    running, sock, toml = daemon
    good = toml.read_text()
    missing = toml.parent / "no-such-model"
    served = next(line for line in good.splitlines() if line.startswith("model ="))
    with admin(sock) as client, running.client() as public:
        before = client.get("/v1/status").json()
        _replace(toml, good.replace(served, f'model = "{missing}"'))
        status = wait_for(lambda: (s := client.get("/v1/status").json())["last_error"]
                          and "no-such-model" in s["last_error"]["message"] and s, 5.0, "the refusal")
        assert (status["generation"], status["config_hash"]) == (before["generation"], before["config_hash"])
        assert {m["state"] for m in status["models"] if m["name"] == str(missing)} == {"failed"}
        assert public.get("/health").status_code == 200
        _replace(toml, good)


def test_persist_writes_overrides_into_the_file(daemon: tuple[RunningServer, Path, Path]) -> None:
    running, sock, toml = daemon
    # The operator's own document: comments, a blank line, its order, another spelling of an option (an earlier
    # test may have left another temperature; the edit changes it, so it is a new generation to wait for).
    commented = "# operator's notes\n" + re.sub(r"temperature = [\d.]+", "\ntemp = 0.45  # tuned\ntop-p = 0.9",
                                                 toml.read_text())
    with admin(sock) as client:
        before = client.get("/v1/status").json()["generation"]
        _replace(toml, commented)
        wait_for(lambda: client.get("/v1/status").json()["generation"] > before, 5.0, "the edit to apply")
        toml.chmod(0o640)
        assert client.patch("/v1/config", json={"top-k": 12, "temp": 0.5}).status_code == 200
        answer = client.post("/v1/persist")
        assert answer.status_code == 200, answer.text
        assert sorted(answer.json()["written"]) == ["temperature", "top-k"]
        text = toml.read_text()
        assert text == commented.replace("temp = 0.45", "temperature = 0.5").replace("top-p = 0.9",
                                                                                    "top-p = 0.9\ntop-k = 12")
        document = tomllib.loads(text)
        assert document["top-k"] == 12 and document["temperature"] == 0.5 and document["ctx-size"] == 256
        assert stat.S_IMODE(toml.stat().st_mode) == 0o640
        config = client.get("/v1/config").json()
        assert config["overrides"] == {}
        assert config["options"]["top-k"]["source"].startswith(f"toml:{toml}")


def test_a_log_option_edit_applies_to_the_next_line(daemon: tuple[RunningServer, Path, Path]) -> None:
    running, sock, toml = daemon
    good = toml.read_text()
    with admin(sock) as client:
        before = client.get("/v1/status").json()["generation"]
        _replace(toml, good + "log-prefix = true\n")
        wait_for(lambda: client.get("/v1/status").json()["generation"] == before + 1, 2.0, "the edit to apply")
        assert "I mlxd.admin: GET /v1/status -> 200" in running.log()
        _replace(toml, good)
        wait_for(lambda: client.get("/v1/status").json()["generation"] == before + 2, 2.0, "the edit to apply")


def test_loading_the_startup_model_after_a_file_swap_swaps_back(daemon: tuple[RunningServer, Path, Path],
                                                                tiny_checkpoint: Path) -> None:
    running, sock, toml = daemon
    other = toml.parent / "other-model"
    shutil.copytree(tiny_checkpoint, other)
    good = toml.read_text()
    try:
        with admin(sock) as client, running.client() as public:
            before = client.get("/v1/status").json()["generation"]
            _replace(toml, good.replace(str(tiny_checkpoint), str(other)))
            wait_for(lambda: public.get("/v1/models").json()["data"][0]["id"] == str(other), 10.0, "the swap")
            answer = client.post("/v1/models", json={"action": "load", "name": str(tiny_checkpoint)}).json()
            assert answer["applied"] is True and answer["generation"] == before + 2
            assert public.get("/v1/models").json()["data"][0]["id"] == str(tiny_checkpoint)
    finally:
        with admin(sock) as client:
            client.patch("/v1/config", json={"model": None})
        _replace(toml, good)


def test_an_edit_of_an_overridden_option_takes_it_back(daemon: tuple[RunningServer, Path, Path]) -> None:
    """docs/admin.md's rule: an admin override stays across edits of other options and SIGHUP, and goes when the
    file gives its option another value (the newer statement wins)."""
    running, sock, toml = daemon
    good = toml.read_text()
    with admin(sock) as client:
        assert client.put("/v1/config", json={}).status_code == 200  # an empty admin layer to start from
        assert client.patch("/v1/config", json={"temperature": 0.3, "top-k": 11}).status_code == 200
        generation = client.get("/v1/status").json()["generation"]
        _replace(toml, good + "min-p = 0.07\n")  # another option: both overrides stay
        wait_for(lambda: client.get("/v1/status").json()["generation"] == generation + 1, 5.0, "the edit to apply")
        options = client.get("/v1/config").json()["options"]
        assert options["temperature"] == {"value": 0.3, "source": "admin"} and options["top-k"]["source"] == "admin"
        _replace(toml, good.replace("temperature = 0.5", "temperature = 0.65"))  # the same option: the file wins
        wait_for(lambda: client.get("/v1/status").json()["generation"] == generation + 2, 5.0, "the edit to apply")
        config = client.get("/v1/config").json()
        assert config["options"]["temperature"]["value"] == 0.65
        assert config["options"]["temperature"]["source"].startswith(f"toml:{toml}:")
        assert config["overrides"] == {"top-k": 11} and config["options"]["top-k"]["source"] == "admin"
        assert "admin override of temperature dropped" in running.log()
        assert client.put("/v1/config", json={}).status_code == 200
    _replace(toml, good)
