"""One log line per request with -v (route, status, tokens, timings), per-token lines at --log-verbosity 5, and
none at the default verbosity (issue 28, item 10)."""

from __future__ import annotations

import re

from tests.e2e.admin_harness import wait_for

LINE = re.compile(r"mlxd\.api\.requests: POST /completion 200 in [\d.]+ ms: slot \d+, prompt (\d+) tokens "
                  r"\((\d+) cached, [\d.]+ ms, [\d.]+ t/s\), predicted (\d+) tokens \([\d.]+ ms, [\d.]+ t/s\)")


def test_verbose_logs_one_line_per_request(start_server) -> None:
    running = start_server("-v")
    with running.client() as client:
        whole = client.post("/completion", json={"prompt": "def main():", "n_predict": 5, "temperature": 0})
        assert whole.status_code == 200
        with client.stream("POST", "/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True}) as streamed:
            assert streamed.status_code == 200
            streamed.read()
        assert client.get("/health").status_code == 200
        assert client.post("/completion", json={"prompt": 3.5}).status_code == 400
    log = wait_for(lambda: running.log() if "GET /health 200" in running.log() else "", 30, "the request lines")
    [match] = LINE.findall(log)
    prompt_n, cached, predicted = (int(x) for x in match)
    timings = whole.json()["timings"]
    assert (prompt_n, predicted) == (timings["prompt_n"], timings["predicted_n"]) and predicted == 5
    assert cached == timings["cache_n"]
    chat = [line for line in log.splitlines() if "POST /v1/chat/completions 200 in" in line]
    assert len(chat) == 1 and re.search(r"predicted \d+ tokens", chat[0]), log
    assert re.search(r"POST /completion 400 in [\d.]+ ms\n", log), log
    assert "token 0 id" not in log  # per-token lines need --log-verbosity 5


def test_log_verbosity_5_adds_a_line_per_token_and_the_default_none(start_server) -> None:
    chatty = start_server("--log-verbosity", "5")
    quiet = start_server()
    for running in (chatty, quiet):
        with running.client() as client:
            answer = client.post("/completion", json={"prompt": "x = ", "n_predict": 3, "temperature": 0})
            assert answer.status_code == 200
    wait_for(lambda: "POST /completion 200 in" in chatty.log(), 30, "the request line")
    tokens = re.findall(r"mlxd\.api\.requests: POST /completion: token (\d+) id \d+ ", chatty.log())
    assert tokens == ["0", "1", "2"]
    assert "mlxd.api.requests" not in quiet.log()
