"""Every captured b10621 exchange replayed against a real ``mlxd-server`` process started with the capture
server's own command line (``--metrics --slots --props -np 2 -c 512``, see captures/README.md).

The same request must answer the same status and the same recursive JSON key set; streams are compared by the
shape of their first and last ``data:`` frames. The exchanges that are checked elsewhere, or differ on purpose,
are listed in ``ELSEWHERE`` with the test that pins them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e import captures
from tests.e2e.conftest import RunningServer, launch

CAPTURE_SERVER_FLAGS = ["--metrics", "--slots", "--props", "-np", "2", "-c", "512"]

# Capture -> the test that pins it (a deliberate difference recorded in mlxd/compat/b10621/*_state.json, or a
# mode this daemon is not started in).
ELSEWHERE = {
    "err_malformed_json": "tests/e2e/test_api_surface.py::test_malformed_json_is_a_400_envelope",
    "err_detokenize_bad": "tests/e2e/test_api_surface.py::test_detokenize_wrong_type_is_a_400_envelope",
    "options_cors": "tests/e2e/test_api_surface.py::test_options_preflight_matches_capture",
    "get_metrics_before": "tests/e2e/test_api_surface.py::test_metrics_families",
    # The capture's model has no FIM tokens; the synthetic checkpoint has them, so /infill is served.
    "post_infill": "tests/e2e/test_completion.py::test_infill_with_fim_markers",
    "post_embedding": "tests/e2e/test_embeddings.py",
    "post_v1_embeddings": "tests/e2e/test_embeddings.py",
    "post_rerank": "tests/e2e/test_embeddings.py",
    # The capture server was built without the web UI, so / answered 404: mlxd under --no-webui does the same.
    "get_root": "tests/e2e/test_webui_static.py::test_no_webui_answers_the_404_envelope",
    # Replayed first, on the fresh daemon, by test_idle_slots_match_the_capture below.
    "get_slots_idle": "tests/e2e/test_captures_daemon.py::test_idle_slots_match_the_capture",
}
REPLAYED = [name for name in captures.names() if name not in ELSEWHERE]


def _replay(client: httpx.Client, capture: captures.Capture) -> httpx.Response:
    headers = {k: v for k, v in capture.request_headers.items() if k == "content-type"}
    return client.request(capture.method, capture.path, content=capture.request_body or None, headers=headers)


def _frames(text: str) -> list[Any]:
    return [json.loads(line[len("data: "):]) for line in text.splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"]


@pytest.fixture(scope="module")
def capture_daemon(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[tuple[RunningServer, httpx.Response]]:
    """The daemon, and its answer to ``GET /slots`` before any request reached it."""
    log_path = tmp_path_factory.mktemp("capture-daemon") / "mlxd.log"
    running = launch(["-m", str(tiny_checkpoint), "--host", "127.0.0.1", "--port", "0", *CAPTURE_SERVER_FLAGS],
                     log_path)
    with httpx.Client(base_url=running.base_url, timeout=60) as client:
        idle_slots = _replay(client, captures.load("get_slots_idle"))
    yield running, idle_slots
    running.stop()


def test_idle_slots_match_the_capture(capture_daemon: tuple[RunningServer, httpx.Response]) -> None:
    capture = captures.load("get_slots_idle")
    _, response = capture_daemon
    assert response.status_code == capture.status
    assert captures.key_set(response.json()) == captures.key_set(capture.json())


@pytest.mark.parametrize("name", REPLAYED)
def test_capture_replayed_against_the_daemon(capture_daemon: tuple[RunningServer, httpx.Response],
                                             name: str) -> None:
    capture = captures.load(name)
    with httpx.Client(base_url=capture_daemon[0].base_url, timeout=60) as client:
        response = _replay(client, capture)
    assert response.status_code == capture.status, response.text
    if capture.headers.get("content-type", "").startswith("text/event-stream"):
        ours, theirs = _frames(response.text), _frames(capture.body.decode())
        assert ours and theirs
        assert captures.key_set(ours[0]) == captures.key_set(theirs[0])
        assert captures.key_set(ours[-1]) == captures.key_set(theirs[-1])
    elif capture.body:
        assert captures.key_set(response.json()) == captures.key_set(capture.json())


def test_elsewhere_names_existing_tests() -> None:
    root = Path(__file__).resolve().parents[2]
    for name, test in ELSEWHERE.items():
        assert (captures.CAPTURES / f"{name}.txt").exists(), name
        file, _, function = test.partition("::")
        assert not function or f"def {function}(" in (root / file).read_text(), (name, test)
