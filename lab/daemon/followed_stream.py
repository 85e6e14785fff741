# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A server-streaming gRPC call read to its end on a thread, as the kubelet follows
ListAndWatch and NodeWatchResources: each message replaces what the stream says (`state`),
and wait() blocks until a condition on it holds."""

from __future__ import annotations

import threading
import time

import grpc


class FollowedStream:
    """stream: the call; read(message) -> the new state; state starts as initial."""

    def __init__(self, stream, read, initial, name):
        self.name = name
        self.state = initial
        self.messages = 0
        self.ended = False
        self.changed = threading.Condition()
        self._stream = stream
        self._read = read
        self._thread = threading.Thread(target=self._follow, name=name, daemon=True)
        self._thread.start()

    def _follow(self):
        try:
            for message in self._stream:
                state = self._read(message)
                with self.changed:
                    self.state = state
                    self.messages += 1
                    self.changed.notify_all()
        except grpc.RpcError:
            pass  # cancelled by close(), or the server went: `ended` says so
        with self.changed:
            self.ended = True
            self.changed.notify_all()

    def wait(self, predicate, timeout=10.0):
        """Wait until predicate(self) holds; return a copy of the state or raise TimeoutError."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate(self):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("%s after %d messages: %s" % (self.name, self.messages, self.state))
                self.changed.wait(remaining)
            return dict(self.state)

    def close(self):
        self._stream.cancel()
        self._thread.join(timeout=5)
