"""/completion's n_keep and n_discard reach a context shift (--context-shift) as b10621 computes it: n_keep tokens
(plus a BOS) stay, n_discard go, and the generation continues past a full slot (issue 28, item 15)."""

from __future__ import annotations

import re


def test_n_keep_and_n_discard_shape_the_shift(start_server) -> None:
    running = start_server("--context-shift", "-c", "48", "-np", "1", "--admin-listen", "off")
    with running.client() as client:
        answer = client.post("/completion", json={"prompt": "def main():", "n_predict": 80, "temperature": 0,
                                                  "n_keep": 3, "n_discard": 10})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["tokens_predicted"] == 80 and body["truncated"]
    shifts = re.findall(r"context shift: n_keep = (\d+), n_discard = (\d+)", running.log())
    assert shifts and all(int(keep) in (3, 4) and int(discard) == 10 for keep, discard in shifts), shifts
