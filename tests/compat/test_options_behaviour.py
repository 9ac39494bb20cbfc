"""Options whose manifest entry is pinned here: each one set on a real ``mlxd-server`` command line and observed
over HTTP (two daemons in all), plus the log options through the daemon's logging setup.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.conftest import RunningServer

Start = Callable[..., RunningServer]
PROMPT = "Once upon a time"

SAMPLING_ARGS = [
    "--temp", "0.5", "--top-k", "7", "--top-p", "0.8", "--min-p", "0.1", "--top-nsigma", "1.5",
    "--xtc-probability", "0.2", "--xtc-threshold", "0.3", "--typical", "0.9", "--repeat-last-n", "32",
    "--repeat-penalty", "1.1", "--presence-penalty", "0.2", "--frequency-penalty", "0.3", "--dry-multiplier", "0.4",
    "--dry-base", "1.5", "--dry-allowed-length", "3", "--dry-penalty-last-n", "16", "--adaptive-target", "0.5",
    "--adaptive-decay", "0.8", "--dynatemp-range", "0.2", "--dynatemp-exp", "1.5", "--mirostat", "2",
    "--mirostat-lr", "0.2", "--mirostat-ent", "4", "--seed", "42", "--samplers", "top_k;temperature",
]
# b10621's /props params key -> the value the options above give it.
EXPECTED_PARAMS = {
    "temperature": 0.5, "top_k": 7, "top_p": 0.8, "min_p": 0.1, "top_n_sigma": 1.5, "xtc_probability": 0.2,
    "xtc_threshold": 0.3, "typical_p": 0.9, "repeat_last_n": 32, "repeat_penalty": 1.1, "presence_penalty": 0.2,
    "frequency_penalty": 0.3, "dry_multiplier": 0.4, "dry_base": 1.5, "dry_allowed_length": 3,
    "dry_penalty_last_n": 16, "adaptive_target": 0.5, "adaptive_decay": 0.8, "dynatemp_range": 0.2,
    "dynatemp_exponent": 1.5, "mirostat": 2, "mirostat_eta": 0.2, "mirostat_tau": 4.0, "seed": 42,
    "ignore_eos": True, "n_predict": 5, "n_keep": 2,
}


def test_server_defaults_from_the_command_line(start_server: Start) -> None:
    """Sampling, generation and slot options set the defaults every request starts from."""
    running = start_server(*SAMPLING_ARGS, "--ignore-eos", "-n", "5", "--keep", "2", "-np", "2", "-c", "512",
                           "--kv-unified", "-a", "my-alias", "--tags", "t1,t2",
                           "--chat-template-kwargs", '{"enable_thinking": false}')
    with running.client() as client:
        props = client.get("/props").json()
        params = props["default_generation_settings"]["params"]
        assert {k: params[k] for k in EXPECTED_PARAMS} == pytest.approx(EXPECTED_PARAMS)
        assert params["samplers"] == ["top_k", "temperature"]
        assert props["total_slots"] == 2 and props["default_generation_settings"]["n_ctx"] == 512  # unified
        assert props["model_alias"] == "my-alias"
        entry = client.get("/v1/models").json()["data"][0]
        assert (entry["id"], entry["tags"]) == ("my-alias", ["t1", "t2"])
        answer = client.post("/completion", json={"prompt": PROMPT}).json()
        assert answer["tokens_predicted"] == 5 and answer["stop_type"] == "limit"  # -n 5, --ignore-eos
        settings = answer["generation_settings"]
        assert (settings["seed"], settings["top_k"], settings["mirostat"]) == (42, 7, 2)
        chat = {"messages": [{"role": "user", "content": "hi"}]}
        assert client.post("/apply-template", json=chat).json()["prompt"].endswith("<think>\n\n</think>\n\n")


def test_chat_template_kwargs_must_be_a_json_object() -> None:
    from mlxd.config import ConfigError, resolve

    for text in ("enable_thinking=false", "[1]"):
        with pytest.raises(ConfigError, match="expected a JSON object"):
            resolve(["--chat-template-kwargs", text], {}, read_config_ini=False)


def test_generation_config_fills_temperature_top_k_top_p(server: RunningServer, tiny_checkpoint: Path) -> None:
    """by_design: with --temp, --top-k and --top-p unset, the checkpoint's generation_config.json gives them."""
    generation_config = json.loads((tiny_checkpoint / "generation_config.json").read_text())
    with server.client() as client:
        params = client.get("/props").json()["default_generation_settings"]["params"]
    assert (params["temperature"], params["top_k"], params["top_p"]) == pytest.approx(
        (generation_config["temperature"], generation_config["top_k"], generation_config["top_p"]))


def test_reverse_prompt_sampling_seq_slots_and_slot_files(server: RunningServer, start_server: Start,
                                                          tmp_path: Path) -> None:
    """-r stops a request that gives no stop of its own; --sampling-seq orders the chain; -np without
    --kv-unified splits -c; --slot-save-path serves save, erase and restore; the --cors-* options shape a
    preflight."""
    greedy = {"prompt": PROMPT, "n_predict": 16, "temperature": 0, "cache_prompt": True}
    with server.client() as client:
        text = client.post("/completion", json=greedy).json()["content"]
    start = next(i for i in range(len(text) // 3, len(text)) if not text[i].isspace())
    word = text[start:start + 3]
    slots_dir = tmp_path / "slots"
    slots_dir.mkdir()
    running = start_server("-r", word, "--sampling-seq", "kt", "-np", "2", "-c", "512",
                           "--slot-save-path", str(slots_dir), "--cors-origins", "http://ui.example",
                           "--cors-methods", "GET,POST", "--cors-headers", "X-One,X-Two", "--no-cors-credentials")
    with running.client() as client:
        preflight = client.options("/completion", headers={"Origin": "http://ui.example"}).headers
        assert (preflight["access-control-allow-origin"], preflight["access-control-allow-methods"],
                preflight["access-control-allow-headers"]) == ("http://ui.example", "GET, POST", "X-One, X-Two")
        assert preflight["access-control-allow-credentials"] == "false"  # b10621 says so rather than leave it out
        props = client.get("/props").json()
        assert props["default_generation_settings"]["params"]["samplers"] == ["top_k", "temperature"]
        assert props["default_generation_settings"]["n_ctx"] == 256  # 512 split over two slots
        stopped = client.post("/completion", json={**greedy, "id_slot": 0}).json()
        assert (stopped["stop_type"], stopped["stopping_word"]) == ("word", word)
        assert stopped["content"] == text[:text.index(word)]
        own = client.post("/completion", json={**greedy, "stop": ["\u2603"], "id_slot": 0}).json()
        assert own["content"] == text  # a request's own stop replaces -r
        saved = client.post("/slots/0", params={"action": "save"}, json={"filename": "s0.bin"}).json()
        assert saved["n_saved"] > 0 and (slots_dir / "s0.bin").stat().st_size == saved["n_written"]
        assert client.post("/slots/0", params={"action": "erase"}).json() == {"id_slot": 0,
                                                                               "n_erased": saved["n_saved"]}
        restored = client.post("/slots/0", params={"action": "restore"}, json={"filename": "s0.bin"}).json()
        assert restored["n_restored"] == saved["n_saved"]
        again = client.post("/completion", json={**greedy, "stop": ["\u2603"], "id_slot": 0}).json()
        assert again["content"] == text and again["timings"]["cache_n"] > 0


def test_log_colors_verbosity_and_verbose(capsys: pytest.CaptureFixture[str]) -> None:
    """--log-colors on colours warnings, --log-verbosity N drops what is above N, --log-verbose shows debug."""
    from mlxd.daemon.logs import LogSettings, configure_logging

    log = logging.getLogger("mlxd.compat-test")
    try:
        configure_logging(LogSettings(log_colors="on", log_verbosity=2))
        log.info("an info line")
        log.warning("a warning line")
        err = capsys.readouterr().err
        assert "an info line" not in err and "\033[33mmlxd.compat-test: a warning line\033[0m" in err
        configure_logging(LogSettings(log_colors="off", log_verbose=True))
        log.debug("a debug line")
        assert capsys.readouterr().err == "mlxd.compat-test: a debug line\n"
    finally:
        configure_logging(LogSettings())

