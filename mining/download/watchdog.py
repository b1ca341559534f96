"""A wall-clock deadline for a whole HTTP exchange, headers included (requests' timeouts bound
each read). `Watch.until(end)` starts a timer; every socket the session opens or reuses
registers with the watch (through the connection classes `watch(session)` mounts), and the
timer shuts them down, waking a blocked `recv`, under TLS too.
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
        self._armed = self.fired = False

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
        with self._lock:
            if sock is None or not self._armed:
                return
            if self.fired:
                _shut(sock)
            else:
                self._sockets.add(sock)

    def _fire(self) -> None:
        with self._lock:
            if self._armed:
                self.fired = True
                for sock in list(self._sockets):
                    _shut(sock)


def _shut(sock) -> None:
    try:   # the plain socket's shutdown: an SSLSocket's own would drop its TLS state first
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:   # already closed or never connected: nothing to wake
        pass


class _Registering:
    """A urllib3 connection that registers its socket with `watch` (set per session)."""

    watch: Watch

    def _new_conn(self):
        sock = super()._new_conn()
        self.watch.add(sock)
        return sock

    def getresponse(self, *args, **kwargs):
        self.watch.add(self.sock)   # a kept-alive connection opened under an earlier watch
        return super().getresponse(*args, **kwargs)


def _watched_pool(pool: type, connection: type, watch: Watch) -> type:
    watched = type(f"Watched{connection.__name__}", (_Registering, connection), {"watch": watch})
    return type(f"Watched{pool.__name__}", (pool,), {"ConnectionCls": watched})


class _WatchedAdapter(HTTPAdapter):
    """requests' adapter, with connection classes that register their sockets with a Watch."""

    def __init__(self, watch: Watch, **kwargs) -> None:
        self.watch = watch
        self._pools = {"http": _watched_pool(HTTPConnectionPool, HTTPConnection, watch),
                       "https": _watched_pool(HTTPSConnectionPool, HTTPSConnection, watch)}
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
    adapters = [http.get_adapter(prefix) for prefix in ("https://", "http://")]
    if all(isinstance(adapter, _WatchedAdapter) for adapter in adapters):
        return adapters[0].watch
    shared = Watch()
    for prefix in ("https://", "http://"):
        http.mount(prefix, _WatchedAdapter(shared))
    return shared
