"""The openai SDK's ``client.responses.stream()`` helper against a real daemon (issue 28, item 16): it needs each
event's ``sequence_number``, and ``output_index`` / ``content_index`` on the item and part events, which b10621
does not send (the helper then fails on llama-server too); mlxd adds them."""

from __future__ import annotations

import openai


def test_the_sdk_stream_helper_accumulates_the_response(start_server) -> None:
    running = start_server("--admin-listen", "off")
    client = openai.OpenAI(base_url=running.base_url + "/v1", api_key="unused", max_retries=0, timeout=60)
    deltas: list[str] = []
    numbers: list[int] = []
    with client.responses.stream(model="tiny", input="hello", max_output_tokens=6, temperature=0) as stream:
        for event in stream:
            numbers.append(event.sequence_number)
            if event.type == "response.output_text.delta":
                assert event.output_index == 0 and event.content_index == 0
                assert event.snapshot == "".join(deltas) + event.delta
                deltas.append(event.delta)
        final = stream.get_final_response()
    assert numbers == list(range(len(numbers)))
    assert final.status == "completed" and final.output_text == "".join(deltas) != ""
    assert final.usage is not None and final.usage.output_tokens == 6
    whole = client.responses.create(model="tiny", input="hello", max_output_tokens=6, temperature=0)
    assert whole.output_text == final.output_text
