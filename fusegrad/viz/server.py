"""The VIZ page: a small HTTP server (standard library) on localhost serving what ``fusegrad.viz.trace`` recorded.

With VIZ=1 a program serves the page when it exits (the URL is printed; Ctrl-C stops it). ``VIZ_PORT`` picks the
port (default 8000, 0 for any free one). ``serve_in_background()`` is the same server in a thread, for tests.

    VIZ=1 python -m fusegrad.examples.train_digits --steps 3
"""
from __future__ import annotations
import atexit, http.server, json, pathlib, threading
from typing import Any, Callable
from fusegrad.helpers import VIZ, getenv

STATIC = pathlib.Path(__file__).parent / "static"
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "application/javascript", ".json": "application/json"}

def _handler(get_data: Callable[[], dict[str, Any]], get_profile: Callable[[], dict[str, Any]]) -> type:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            if path in ("/", "/index.html"): self._send(STATIC.joinpath("index.html").read_bytes(), ".html")
            elif path == "/data.json": self._send(json.dumps(get_data()).encode(), ".json")
            elif path == "/profile.json": self._send(json.dumps(get_profile()).encode(), ".json")
            elif path.startswith("/static/") and (file := STATIC / path[len("/static/"):]).resolve().parent == STATIC.resolve() and file.is_file():
                self._send(file.read_bytes(), file.suffix)
            else: self.send_error(404, f"no page {path}")
        def _send(self, body: bytes, suffix: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPES.get(suffix, "application/octet-stream"))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, format: str, *args: Any) -> None: pass   # keep the program's output clean
    return Handler

def make_server(port: int = 0, get_data: Callable[[], dict[str, Any]] | None = None,
                get_profile: Callable[[], dict[str, Any]] | None = None) -> http.server.ThreadingHTTPServer:
    """A server on 127.0.0.1:``port`` (0: a free port; ``server.server_address[1]`` tells which)."""
    from fusegrad.viz import trace, profile
    return http.server.ThreadingHTTPServer(("127.0.0.1", port), _handler(get_data or trace.data, get_profile or profile.chrome_trace))

def serve_in_background(port: int = 0) -> tuple[http.server.ThreadingHTTPServer, str]:
    """Start the server in a daemon thread; returns it and its URL (``server.shutdown()`` stops it)."""
    server = make_server(port)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"

def serve_forever(port: int | None = None) -> None:
    """Serve the page until Ctrl-C, printing its URL."""
    server = make_server(getenv("VIZ_PORT", 8000) if port is None else port)
    print(f"VIZ: serving the compiler trace at http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C to stop)", flush=True)
    try: server.serve_forever()
    except KeyboardInterrupt: pass
    finally: server.server_close()

@atexit.register
def _serve_at_exit() -> None:
    from fusegrad.viz import trace
    if VIZ and trace.kernels:
        from fusegrad.viz import profile
        profile._write_at_exit()   # the trace file first: serving blocks until Ctrl-C
        serve_forever()
