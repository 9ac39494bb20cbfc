"""The chat page's b10621 contract on a real daemon: ``/`` and its assets (public even with ``--api-key``),
``--no-webui``, ``--path`` (confined to its directory) and ``--webui-config`` / ``--webui-config-file``."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from tests.e2e.conftest import BIN

KEY = "sk-webui-test-key"
ASSETS = ["/", "/index.html", "/sw.js", "/manifest.webmanifest", "/_app/version.json", "/_app/main.js",
          "/_app/markdown.js", "/_app/app.css"]


def test_page_and_assets_are_public_with_an_api_key(start_server, tmp_path: Path) -> None:
    settings = tmp_path / "ui.json"
    settings.write_text(json.dumps({"temperature": 0.3, "systemMessage": "from the file", "c": 4}))
    server = start_server("--api-key", KEY, "--webui-config", '{"systemMessage": "inline", "a": 1}',
                          "--webui-config-file", str(settings), "--state-dir", str(tmp_path / "state"))
    with server.client() as client:
        for path in ASSETS:  # b10621's test_access_static_assets_without_api_key, and the page's own files
            response = client.get(path)
            assert response.status_code == 200, (path, response.text)
            assert response.headers["cache-control"] == "no-cache"
        page = client.get("/")
        assert "<!doctype html>" in page.text
        assert page.headers["content-type"].startswith("text/html")
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert client.get("/_app/main.js").headers["content-type"].startswith("text/javascript")
        again = client.get("/", headers={"If-None-Match": page.headers["etag"]})
        assert again.status_code == 304
        # Only the assets are public: the API and the conversation store still need the key.
        assert client.get("/props").status_code == 401
        assert client.get("/webui/conversations").status_code == 401
        assert client.get("/_app/nothing-here.js").status_code == 401
        props = client.get("/props", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert props["ui"] is True
    # The file's keys first, the inline JSON's over them (b10621's order).
    assert props["ui_settings"] == {"temperature": 0.3, "systemMessage": "inline", "c": 4, "a": 1}


def test_no_webui_answers_the_404_envelope(start_server, tmp_path: Path) -> None:
    server = start_server("--no-webui", "--state-dir", str(tmp_path / "state"))
    with server.client() as client:
        for path in ("/", "/index.html", "/sw.js", "/_app/main.js"):
            response = client.get(path)
            assert response.status_code == 404
            assert response.json() == {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}
        assert client.get("/props").json()["ui"] is False



def test_no_webui_with_an_api_key_answers_the_page_404_without_the_key(start_server, tmp_path: Path) -> None:
    """b10621's page paths stay public with the UI off: the 404 envelope, not a 401; the API still wants its key."""
    server = start_server("--no-webui", "--api-key", "k", "--state-dir", str(tmp_path / "state"))
    with server.client() as client:
        for path in ("/", "/index.html"):
            response = client.get(path)
            assert response.status_code == 404 and response.json()["error"]["type"] == "not_found_error", path
        assert client.get("/v1/models").status_code == 401


def test_path_serves_that_directory_and_nothing_outside_it(start_server, tmp_path: Path) -> None:
    root = tmp_path / "site"
    (root / "sub").mkdir(parents=True)
    (root / "index.html").write_text("<!doctype html><title>mine</title>")
    (root / "sub" / "a.txt").write_text("inside")
    (tmp_path / "secret.txt").write_text("outside")
    (root / "link.txt").symlink_to(tmp_path / "secret.txt")
    server = start_server("--path", str(root), "--state-dir", str(tmp_path / "state"))
    with server.client() as client:
        assert "<title>mine</title>" in client.get("/").text
        assert client.get("/sub/a.txt").text == "inside"
        for path in ("/../secret.txt", "/%2e%2e/secret.txt", "/sub/%2e%2e/%2e%2e/secret.txt", "/link.txt",
                     "/sub/..%2f..%2fsecret.txt", "/_app/main.js"):
            response = client.get(path)
            assert response.status_code == 404, path
            assert "outside" not in response.text
        assert client.get("/health").status_code == 200


def test_bad_webui_options_are_refused_before_anything_loads(tmp_path: Path, tiny_checkpoint: Path) -> None:
    cases = [("--webui-config", "{not json"), ("--webui-config", "[1, 2]"),
             ("--webui-config-file", str(tmp_path / "missing.json")), ("--path", str(tmp_path / "no-such-dir"))]
    for flag, value in cases:
        result = subprocess.run([str(BIN / "mlxd-server"), "-m", str(tiny_checkpoint), flag, value, "--port", "0"],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 2, (flag, value, result.stderr)
        assert flag.lstrip("-") in result.stderr


def test_the_page_is_served_under_the_api_prefix(start_server, tmp_path: Path) -> None:
    server = start_server("--api-prefix", "/llm", "--state-dir", str(tmp_path / "state"), wait_ready=False)
    with server.client() as client:
        deadline = time.monotonic() + 120  # the fixture's readiness probe does not know the prefix
        while client.get("/llm/health").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        redirect = client.get("/llm")
        assert redirect.status_code == 308 and redirect.headers["location"] == "/llm/"
        assert "<!doctype html>" in client.get("/llm/").text
        assert client.get("/llm/_app/main.js").status_code == 200
        assert client.get("/_app/main.js").status_code == 404
        assert client.get("/llm/webui/store").json()["enabled"] is True
