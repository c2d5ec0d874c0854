"""basic.deliver and publisher confirms without pika's per-frame objects: :class:`GatewayConnection`.

pika turns each of a delivery's three frames (method, content header, body) into objects, runs them
through its callback manager and its content assembler, and calls the consumer: about 12 µs per
message here, the largest cost of the broker -> mesh path; each basic.ack of a publisher confirm
costs about 3 µs in its callback manager. :class:`GatewayConnection` is pika's ``AsyncioConnection``
with one change: on channels registered with :meth:`fast_deliveries`, ``basic.deliver`` and its
content frames are parsed here with ``struct`` and handed to the handler as ``(consumer_tag,
delivery_tag, properties, body)``; on channels registered with :meth:`fast_confirms`, ``basic.ack``
and ``basic.nack`` go to the handler as ``(ack, delivery_tag, multiple)``. Every other frame (and every
frame of other channels) goes through pika as before, one at a time, in order (a ``basic.return``
still reaches pika before the ``basic.ack`` that follows it).

It relies on pika 1.x internals of ``Connection`` (``_frame_buffer``, ``_read_frame``,
``_trim_frame_buffer``, ``_process_frame``, ``bytes_received``, ``frames_received``); if one is missing,
:meth:`fast_deliveries` says no and pika delivers as usual.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from pika import BasicProperties
from pika.adapters.asyncio_connection import AsyncioConnection

Handler = Callable[[str, int, BasicProperties, bytes], None]
ConfirmHandler = Callable[[bool, int, bool], None]

_FRAME = struct.Struct(">BHI")
_Q = struct.Struct(">Q")
_DELIVER = b"\x00\x3c\x00\x3c"           # class 60 (basic), method 60 (deliver)
_ACK, _NACK = b"\x00\x3c\x00\x50", b"\x00\x3c\x00\x78"   # basic.ack (80), basic.nack (120)
_METHOD, _HEADER, _BODY = 1, 2, 3
_INTERNALS = ("_frame_buffer", "_read_frame", "_trim_frame_buffer", "_process_frame", "bytes_received",
              "frames_received")


class _Content:
    """A delivery being assembled."""

    __slots__ = ("consumer_tag", "delivery_tag", "props", "size", "got", "parts")

    def __init__(self, consumer_tag: str, delivery_tag: int) -> None:
        self.consumer_tag = consumer_tag
        self.delivery_tag = delivery_tag
        self.props: BasicProperties | None = None
        self.size = 0
        self.got = 0
        self.parts: list[bytes] = []


class GatewayConnection(AsyncioConnection):
    """An ``AsyncioConnection`` that parses deliveries of registered channels itself."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fast: dict[int, Handler | None] = {}          # channels handled here -> deliveries to
        self._confirms: dict[int, ConfirmHandler] = {}
        self._content: dict[int, _Content] = {}

    def fast_deliveries(self, channel: Any, handler: Handler) -> bool:
        """Deliver the channel's messages to ``handler``; False if pika's internals are not there."""
        if not all(hasattr(self, name) for name in _INTERNALS):
            return False
        self._fast[channel.channel_number] = handler
        return True

    def fast_confirms(self, channel: Any, handler: ConfirmHandler) -> bool:
        """Give the channel's basic.ack / basic.nack to ``handler`` (after ``confirm_delivery``)."""
        if not all(hasattr(self, name) for name in _INTERNALS):
            return False
        self._confirms[channel.channel_number] = handler
        self._fast.setdefault(channel.channel_number, None)
        return True

    def forget_channel(self, channel_number: int) -> None:
        self._fast.pop(channel_number, None)
        self._confirms.pop(channel_number, None)
        self._content.pop(channel_number, None)

    def _on_data_available(self, data_in: bytes) -> None:
        fast = self._fast
        if not fast:
            super()._on_data_available(data_in)
            return
        buf = self._frame_buffer + data_in if self._frame_buffer else data_in
        n = len(buf)
        pos = 0
        while n - pos >= 8:
            ftype, channel, size = _FRAME.unpack_from(buf, pos)
            end = pos + 8 + size
            if end > n:
                break
            if channel in fast and buf[end - 1] == 0xCE and self._frame(fast[channel], channel, ftype, buf,
                                                                        pos + 7, end - 1):
                self.bytes_received += end - pos
                self.frames_received += 1
                pos = end
                continue
            # any other frame: pika's own processing, for this one frame
            self._frame_buffer = buf[pos:]
            consumed, value = self._read_frame()
            if not value:
                return
            self._trim_frame_buffer(consumed)
            self._process_frame(value)
            buf = self._frame_buffer
            n = len(buf)
            pos = 0
            fast = self._fast
        self._frame_buffer = buf[pos:]

    def _frame(self, handler: Handler | None, channel: int, ftype: int, buf: bytes, start: int,
               stop: int) -> bool:
        """Handle one frame of a registered channel if it is a delivery's or a confirm; False: pika's."""
        if ftype == _METHOD:
            method = buf[start:start + 4]
            if method == _ACK or method == _NACK:
                confirm = self._confirms.get(channel)
                if confirm is None:
                    return False
                confirm(method == _ACK, _Q.unpack_from(buf, start + 4)[0], bool(buf[start + 12] & 1))
                return True
            if method != _DELIVER or handler is None:
                return False
            p = start + 4
            k = buf[p]
            consumer_tag = buf[p + 1:p + 1 + k].decode()
            p += 1 + k
            self._content[channel] = _Content(consumer_tag, _Q.unpack_from(buf, p)[0])
            return True                  # redelivered, exchange and routing key are not used
        content = self._content.get(channel)
        if content is None:
            return False
        if ftype == _HEADER:
            content.size = _Q.unpack_from(buf, start + 4)[0]
            props = content.props = BasicProperties()
            props.decode(buf, start + 12)
            if content.size == 0:
                del self._content[channel]
                handler(content.consumer_tag, content.delivery_tag, props, b"")
            return True
        if ftype == _BODY and content.props is not None:
            content.parts.append(buf[start:stop])
            content.got += stop - start
            if content.got >= content.size:
                del self._content[channel]
                parts = content.parts
                body = parts[0] if len(parts) == 1 else b"".join(parts)
                handler(content.consumer_tag, content.delivery_tag, content.props, body)
            return True
        return False
