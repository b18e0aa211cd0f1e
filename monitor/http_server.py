"""A tiny threaded HTTP server (stdlib ``http.server``) serving fixed GET routes, in a daemon thread.

Used by ``shoal monitor`` (page, JSON API, ``/metrics``) and by a storage node's metrics exporter.
A route is a function returning ``(status, content type, body bytes)``; anything it raises is a 500
with the message, never a dead server.

Why not prometheus_client's server (``start_http_server`` / ``start_wsgi_server``): it serves one
registry on every path, so the monitor's page and JSON API would need a second port, where today
one port serves all three and ``/metrics`` on it is what the compose healthcheck, the docs and
scrapers use. The part prometheus_client is good at, the exposition format, is already its own:
the ``/metrics`` route returns ``generate_latest(registry)`` with ``CONTENT_TYPE_LATEST``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from monitor.errors import MonitorError

log = logging.getLogger(__name__)

Route = Callable[[], tuple[int, str, bytes]]


class HttpServer:
    """``start()`` binds and serves in a thread; ``port`` is the bound port (useful with port 0)."""

    def __init__(self, routes: Mapping[str, Route], *, host: str = "127.0.0.1", port: int = 0) -> None:
        if not 0 <= port <= 65535:
            raise MonitorError(f"HTTP port must be in [0, 65535], got {port}")
        self.routes = dict(routes)
        self.host = host
        self.requested_port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise MonitorError("the HTTP server is not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> HttpServer:
        routes = self.routes

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = urlsplit(self.path).path
                route = routes.get(path)
                if route is None:
                    self._send(404, "text/plain; charset=utf-8", f"no such page: {path}\n".encode())
                    return
                try:
                    status, ctype, body = route()
                except Exception as exc:
                    log.exception("HTTP route %s failed", path)
                    status, ctype, body = 500, "text/plain; charset=utf-8", f"{type(exc).__name__}: {exc}\n".encode()
                self._send(status, ctype, body)

            def _send(self, status: int, ctype: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                log.debug("%s %s", self.address_string(), format % args)

        try:
            self._server = ThreadingHTTPServer((self.host, self.requested_port), Handler)
        except OSError as exc:
            raise MonitorError(f"cannot listen on {self.host}:{self.requested_port}: {exc}") from exc
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="shoal-http", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> HttpServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
