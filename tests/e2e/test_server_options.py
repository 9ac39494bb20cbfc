"""Server options observed through one real daemon: --spm-infill orders /infill's prompt and --reasoning-effort
reaches the chat template."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.e2e.conftest import RunningServer

TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
            "effort={{ reasoning_effort | default('unset') }}")


def test_spm_infill_and_reasoning_effort(start_server: Callable[..., RunningServer],
                                                      tmp_path: Path) -> None:
    template = tmp_path / "effort.jinja"
    template.write_text(TEMPLATE)
    running = start_server("--spm-infill", "--reasoning-effort", "high", "--chat-template-file", str(template))
    with running.client() as client:
        out = client.post("/infill", json={"input_prefix": "def f(", "input_suffix": "return 1", "n_predict": 1})
        assert out.status_code == 200, out.text
        prompt = out.json()["prompt"]
        assert prompt.index("<|fim_suffix|>return 1") < prompt.index("<|fim_prefix|>def f(") < prompt.index(
            "<|fim_middle|>")
        chat = {"messages": [{"role": "user", "content": "hi"}]}
        assert client.post("/apply-template", json=chat).json()["prompt"].endswith("effort=high")
        kwargs = {**chat, "chat_template_kwargs": {"reasoning_effort": "low"}}  # a request's kwargs still win
        assert client.post("/apply-template", json=kwargs).json()["prompt"].endswith("effort=low")
