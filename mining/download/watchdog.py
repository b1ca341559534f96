"""A wall-clock deadline for a whole HTTP exchange, headers included (`mining.download.fetch`).

requests' timeouts bound each socket read, not the exchange: a server sending its headers a
byte every 2 s never trips them. So `Watch.until(end)` starts a timer; every socket the
session opens or reuses meanwhile is registered with the watch (by the connection classes
`watch(session)` mounts), and when the timer fires it shuts them down, which wakes a blocked
`recv`, under TLS too. The caller, seeing its clock run out, reports the deadline.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import weakref
from collections.abc import Iterator

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool


class Watch:
    """Shuts down the sockets registered with it when its deadline passes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: weakref.WeakSet = weakref.WeakSet()
        self._armed = False
        self.fired = False

    @contextlib.contextmanager
    def until(self, end: float) -> Iterator[Watch]:
        """Arm the watch until the monotonic time `end`; disarm it on the way out."""
        with self._lock:
            self._armed, self.fired = True, False
        timer = threading.Timer(max(end - time.monotonic(), 0.0), self._fire)
        timer.daemon = True
        timer.start()
        try:
            yield self
        finally:
            timer.cancel()
            with self._lock:
                self._armed = False
                self._sockets.clear()

    def add(self, sock) -> None:
        if sock is None:
            return
        with self._lock:
            if not self._armed:
                return
            if self.fired:
                _shut(sock)
            else:
                self._sockets.add(sock)

    def _fire(self) -> None:
        with self._lock:
            if not self._armed:
                return
            self.fired = True
            for sock in list(self._sockets):
                _shut(sock)


def _shut(sock) -> None:
    try:   # the plain socket's shutdown: an SSLSocket's own would drop its TLS state first
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:   # already closed or never connected: nothing to wake
        pass


def _watched_connection(base: type, watch: Watch) -> type:
    def _new_conn(self):
        sock = base._new_conn(self)
        watch.add(sock)
        return sock

    def getresponse(self, *args, **kwargs):
        watch.add(self.sock)   # a kept-alive connection opened under an earlier watch
        return base.getresponse(self, *args, **kwargs)

    return type(f"Watched{base.__name__}", (base,),
                {"_new_conn": _new_conn, "getresponse": getresponse})


class _WatchedAdapter(HTTPAdapter):
    """requests' adapter, with connection classes that register their sockets with a Watch."""

    def __init__(self, watch: Watch, **kwargs) -> None:
        self.watch = watch
        self._pools = {
            "http": type("WatchedHTTPConnectionPool", (HTTPConnectionPool,), {
                "ConnectionCls": _watched_connection(HTTPConnection, watch)}),
            "https": type("WatchedHTTPSConnectionPool", (HTTPSConnectionPool,), {
                "ConnectionCls": _watched_connection(HTTPSConnection, watch)}),
        }
        super().__init__(**kwargs)

    def init_poolmanager(self, *args, **kwargs) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = self._pools

    def proxy_manager_for(self, proxy, **kwargs):
        manager = super().proxy_manager_for(proxy, **kwargs)
        if not proxy.lower().startswith("socks"):   # SOCKS managers bring their own pools
            manager.pool_classes_by_scheme = self._pools
        return manager


def watch(http: requests.Session) -> Watch:
    """The session's Watch, mounting the watched adapters on it the first time."""
    adapter = http.get_adapter("https://")
    if isinstance(adapter, _WatchedAdapter) and \
            isinstance(http.get_adapter("http://"), _WatchedAdapter):
        return adapter.watch
    shared = Watch()
    for prefix in ("https://", "http://"):
        http.mount(prefix, _WatchedAdapter(shared))
    return shared
