"""A small JSON inventory: item quantities drawn afresh at each start, so the answer
must be read from the server, never guessed or copied from a past run."""

import json
import random
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ITEMS = {f"sku-{n:03d}": {"id": f"sku-{n:03d}", "qty": random.randint(1, 500)}
         for n in random.sample(range(1000), random.randint(12, 20))}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        parts = self.path.strip("/").split("/")
        if parts == ["items"]:
            body: object = sorted(ITEMS)
        elif len(parts) == 2 and parts[0] == "items" and parts[1] in ITEMS:
            body = ITEMS[parts[1]]
        else:
            self.send_error(404)
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


ThreadingHTTPServer(("0.0.0.0", 8000), Handler).serve_forever()
