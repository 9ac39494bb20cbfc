"""The chat page keeps up with a fast stream: ``python bench/bench_webui.py [--tokens 4000]``.

Starts mlxd-server on the tiny synthetic checkpoint and opens the page in Chromium (Playwright, the system's
``chromium``). The page is left as shipped; an init script only watches: it tees the chat response to timestamp
each server-sent event as the browser receives it, and a MutationObserver timestamps each change of the answer on
screen. While the answer streams, the bench types into the message box, and a 10 ms timer measures how late the
page's event loop runs. Reported: tokens and their rate, the lag from the last event's arrival to the last text on
screen, the longest event-loop delay and the longest keypress-to-handled time while typing.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import synthetic_checkpoint  # noqa: E402
from tests.e2e.conftest import launch  # noqa: E402
from tests.web.conftest import chromium_path  # noqa: E402

WATCH = """
window.__bench = {events: [], paints: [], loopMax: 0, keyMax: 0, spikes: [], longTasks: []};
new PerformanceObserver((list) => { for (const e of list.getEntries()) window.__bench.longTasks.push([Math.round(e.startTime), Math.round(e.duration)]); })
  .observe({type: 'longtask', buffered: true});
const realFetch = window.fetch;
window.fetch = async (...args) => {
  const res = await realFetch(...args);
  if (!String(args[0]).includes('/v1/chat/completions')) return res;
  const [mine, theirs] = res.body.tee();
  (async () => {
    const reader = mine.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      const t = performance.now();
      if (!window.__bench.events.length) { window.__bench.loopMax = 0; window.__bench.keyMax = 0; }
      buffer += value;
      const parts = buffer.split('\\n\\n');
      buffer = parts.pop();
      for (const part of parts) if (part.startsWith('data:')) window.__bench.events.push(t);
    }
  })();
  return new Response(theirs, {status: res.status, headers: res.headers});
};
let last = performance.now();
setInterval(() => {
  const now = performance.now();
  const late = now - last - 10;
  window.__bench.loopMax = Math.max(window.__bench.loopMax, late);
  if (late > 50) window.__bench.spikes.push([Math.round(now), Math.round(late)]);
  last = now;
}, 10);
document.addEventListener('DOMContentLoaded', () => {
  new MutationObserver(() => window.__bench.paints.push([performance.now(),
    (document.querySelector('.msg.assistant .content') || {}).textContent?.length || 0]))
    .observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true});
  document.getElementById('input').addEventListener('keydown', (ev) => {
    const delay = performance.now() - ev.timeStamp;
    window.__bench.keyMax = Math.max(window.__bench.keyMax, delay);
  });
});
"""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=4000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = launch(["-m", str(synthetic_checkpoint("tiny")), "--host", "127.0.0.1", "--port", "0",
                         "-c", str(args.tokens + 512), "-n", str(args.tokens), "--ignore-eos",
                         "--state-dir", str(Path(tmp) / "state")], Path(tmp) / "mlxd.log")
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
                page = browser.new_page(viewport={"width": 1200, "height": 800})
                page.add_init_script(WATCH)
                page.goto(server.base_url + "/")
                page.wait_for_selector("body[data-ready=true]")
                page.fill("#input", "Write a long story.")
                page.press("#input", "Enter")
                page.wait_for_function("() => window.__bench.events.length > 10")
                page.locator("#input").press_sequentially("typing while it streams", delay=30)
                page.wait_for_selector(".msg.assistant .timings", timeout=600_000)
                data = page.evaluate("() => JSON.parse(JSON.stringify(window.__bench))")
                page.wait_for_timeout(300)
                data["paints"] = page.evaluate("() => window.__bench.paints")
                timings = page.inner_text(".msg.assistant .timings")
                browser.close()
        finally:
            server.stop()
    events, paints = data["events"], data["paints"]
    final_len = paints[-1][1]
    shown = next(t for t, n in paints if n == final_len)
    result = {
        "tokens": args.tokens, "timings": timings, "events": len(events),
        "stream_s": round((events[-1] - events[0]) / 1000, 2),
        "last_event_to_last_text_ms": round(shown - events[-1], 1),
        "event_loop_max_delay_ms": round(data["loopMax"], 1),
        "keypress_max_delay_ms": round(data["keyMax"], 1),
        "first_event_ms": round(events[0]), "last_event_ms": round(events[-1]),
        "loop_delays_over_50ms": data["spikes"][-20:],
        # Main-thread tasks over 50 ms (script, style, layout) while the answer streamed: the page's own cost, as
        # against loop delays that also count time the renderer waited for a CPU.
        "long_tasks_while_streaming": [t for t in data["longTasks"] if events[0] <= t[0] <= events[-1]],
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
