"""Persisting overrides into a TOML document, the atomic write, and the client's argument and table rendering."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from mlxd.admin.client import ClientError, _pairs, _parser, render_status
from mlxd.admin.persist import merged_text, write_atomically
from mlxd.admin.routes.events import frame


def test_merged_text_uses_canonical_names_once() -> None:
    current = 'c = 512\ntemp = 0.3\ntop-k = 3\nctx-size = 8\n[models.x]\nctx-size = 64\n'
    text, written, removed = merged_text(current, {"ctx-size": 1024, "temperature": 0.1, "top-k": None})
    assert tomllib.loads(text) == {"ctx-size": 1024, "temperature": 0.1, "models": {"x": {"ctx-size": 64}}}
    assert written == ["ctx-size", "temperature"] and removed == ["top-k"]


COMMENTED = """# mlxd on this host: edited by hand, keep the notes
# The context of the long-document service.
c = 512  # small on purpose

temp = 0.3   # sampling
top-k = 3

# per model
[models.x]
ctx-size = 64  # tiny
"""


def test_merged_text_keeps_comments_blank_lines_and_order() -> None:
    text, _, _ = merged_text(COMMENTED, {"ctx-size": 1024, "temperature": 0.1, "top-k": None, "n-predict": 16})
    assert text == """# mlxd on this host: edited by hand, keep the notes
# The context of the long-document service.
ctx-size = 1024  # small on purpose

temperature = 0.1   # sampling
n-predict = 16

# per model
[models.x]
ctx-size = 64  # tiny
"""


def test_write_atomically_keeps_the_mode(tmp_path: Path) -> None:
    path = tmp_path / "mlxd.toml"
    path.write_text("a = 1\n")
    path.chmod(0o640)
    write_atomically(str(path), "b = 2\n")
    assert tomllib.loads(path.read_text()) == {"b": 2}
    assert (path.stat().st_mode & 0o777) == 0o640
    assert os.listdir(tmp_path) == ["mlxd.toml"]


def test_pairs_type_their_values() -> None:
    assert _pairs(["log-verbosity=4", "log-prefix=true", "log-file=/var/log/m.log", "x=0.5"]) == {
        "log-verbosity": 4, "log-prefix": True, "log-file": "/var/log/m.log", "x": 0.5}
    with pytest.raises(ClientError, match="KEY=VALUE"):
        _pairs(["novalue"])


def test_json_flag_before_or_after_the_command() -> None:
    assert _parser().parse_args(["--json", "status"]).json is True
    assert _parser().parse_args(["status", "--json"]).json is True
    assert getattr(_parser().parse_args(["status"]), "json", False) is False


def test_render_status_is_a_short_table() -> None:
    text = render_status({"state": "serving", "generation": 3, "config_hash": "ab" * 32, "uptime": 12.0,
                          "pending_restart": ["port"], "last_error": {"trigger": "file:x", "message": "bad",
                                                                      "time": 0.0},
                          "models": [{"name": "m", "state": "loaded", "error": None}]})
    assert "generation       3" in text and "pending restart  port" in text and "file:x: bad" in text
    assert "loaded    m" in text


def test_event_frames_are_sse() -> None:
    event = {"id": 4, "type": "committed", "time": 1.0, "generation": 2}
    text = frame(event)
    assert text.startswith("id: 4\nevent: committed\ndata: ") and text.endswith("\n\n")
    assert json.loads(text.splitlines()[2][len("data: "):]) == event


def test_a_new_key_follows_the_last_key_of_a_file_without_tables() -> None:
    text, written, _ = merged_text("# notes\nc = 8  # ctx\n", {"top-k": 4})
    assert text == "# notes\nc = 8  # ctx\ntop-k = 4\n" and written == ["top-k"]
