"""A tool call streamed as llama-server streams it: a first delta with its index, id, name and the arguments
written so far (at least ``{``), then one delta per piece of arguments the model adds.

llama-server (common_chat_msg_diff) re-parses the partial answer at each token and sends what grew; a parser here
gives the same view, a call's ``(name, arguments so far)``, and :class:`StreamedCall` turns successive views
into deltas. Every piece extends what was sent, so the pieces of a call concatenate to its arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mlxd.engine.chat.tool_types import ToolCallDelta

# A call as far as it is written: its name, and its arguments so far (None: they cannot be shown before the call
# is complete, e.g. arguments written as a JSON string).
CallView = tuple[str, "str | None"]


def time_to_view(length: int, viewed: int) -> bool:
    """Whether an open call region of ``length`` characters, last read at ``viewed``, grew enough to be read again:
    at each delta while it is short, then each time it grew by 1/256th, so that a long call (a file's text as an
    argument) costs the event loop O(n log n) rather than O(n^2); its pieces then span a few tokens."""
    return length - viewed >= max(1, length >> 8)


@dataclass
class StreamedCall:
    """One announced call and the arguments sent for it so far."""

    index: int
    id: str
    name: str
    sent: str = ""

    def first(self) -> ToolCallDelta:
        """The call's first delta: index, id, name and the arguments sent with them."""
        return ToolCallDelta(self.index, self.id, self.name, self.sent)

    def grow(self, arguments: str) -> list[ToolCallDelta]:
        """The piece of ``arguments`` not sent yet; nothing when they do not extend what was sent."""
        if len(arguments) <= len(self.sent) or not arguments.startswith(self.sent):
            return []
        piece, self.sent = arguments[len(self.sent):], arguments
        return [ToolCallDelta(self.index, "", "", piece)]


@dataclass
class CallDeltas:
    """The calls of one answer as they stream: announced once their name is written, then grown."""

    id_factory: Callable[[], str]
    count: int = 0  # calls announced in the answer so far
    open: list[StreamedCall] = field(default_factory=list)  # the calls of the region being written
    stuck: bool = False  # the region's text stopped matching what was streamed: nothing more until it closes

    def view(self, calls: Sequence[CallView], ids: Sequence[str] = ()) -> list[ToolCallDelta]:
        """Deltas for the open region's calls as they are written now (``ids``: those the model wrote, in order)."""
        out: list[ToolCallDelta] = []
        if self.stuck:
            return out
        for i, (name, arguments) in enumerate(calls):
            if i < len(self.open):
                call = self.open[i]
                if call.name != name or arguments is None or not arguments.startswith(call.sent[:len(arguments)]):
                    self.stuck = True
                    break
                out += call.grow(arguments)
                continue
            if not name or arguments is None or not (arguments or "{").startswith("{"):
                break
            # llama-server shows "{" before they begin
            out.append(self.announce(name, arguments or "{", ids[i] if i < len(ids) else None))
        return out

    def close(self, calls: Sequence[tuple[str, str]], ids: Sequence[str] = ()) -> list[ToolCallDelta]:
        """Deltas for the region's calls once it is complete, then the next region starts afresh."""
        out: list[ToolCallDelta] = []
        for i, (name, arguments) in enumerate(calls):
            if i < len(self.open):
                out += self.open[i].grow(arguments)  # when they do not extend it, the call stays as streamed
            else:
                out.append(self.announce(name, arguments, ids[i] if i < len(ids) else None))
        self.abandon()
        return out

    def abandon(self) -> None:
        """The region ended (as calls or not): its announced calls stay, the next region starts afresh."""
        self.open = []
        self.stuck = False

    def announce(self, name: str, arguments: str, call_id: str | None = None) -> ToolCallDelta:
        """A new call of the open region: its first delta, with the arguments written so far (and the id the model
        wrote for it, if it writes ids)."""
        call = self.new_call(name, arguments, call_id)
        self.open.append(call)
        return ToolCallDelta(call.index, call.id, name, arguments)

    def new_call(self, name: str, arguments: str, call_id: str | None = None) -> StreamedCall:
        """The next call of the answer (its first delta is ``call.first()``), outside any region."""
        call = StreamedCall(self.count, call_id or self.id_factory(), name, arguments)
        self.count += 1
        return call
