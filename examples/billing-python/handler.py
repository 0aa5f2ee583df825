#!/usr/bin/env python3
"""billing.open_invoice as a remote handler, with Python's standard library.

The same protocol and answers as examples/billing-php/handler.php; run it
instead of the PHP one with the same platformd.yaml:

    python3 examples/billing-python/handler.py 127.0.0.1:8090

platformd POSTs each batch's new events; this answers, per event, the
effects to apply (statements named in the config) and the messages to
publish. It writes nothing to the database: a duplicate never reaches it.
Numbers are decoded with decimal.Decimal and strings left as they are, so
"2.000" reaches PostgreSQL exactly as the producer wrote it.
"""

import decimal
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def answer(ev):
    order = ev["payload"]
    lines = order.get("lines") or []
    quantities = [line.get("quantity") for line in lines if isinstance(line, dict)]
    if not order.get("order_id") or not order.get("customer_id") or not quantities:
        return {"event_id": ev["event_id"], "error": "order_id, customer_id and at least one line are required", "permanent": True}
    for q in quantities:
        try:
            ok = isinstance(q, str) and decimal.Decimal(q) > 0
        except decimal.InvalidOperation:
            ok = False
        if not ok:
            return {"event_id": ev["event_id"], "error": "quantity must be a positive decimal string", "permanent": True}
    return {
        "event_id": ev["event_id"],
        "effects": [{"statement": "open_invoice", "args": {
            "order_id": order["order_id"], "customer_id": order["customer_id"],
            "lines": len(quantities), "quantities": quantities}}],
        "publish": [{"event_name": "billing.invoice.opened.v1",
                     "payload": {"order_id": order["order_id"], "lines": len(quantities)}}],
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: platformd reuses its connections

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            req = json.loads(body, parse_float=decimal.Decimal)
            results = [answer(ev) for ev in req["events"]]
        except (ValueError, KeyError, TypeError) as e:
            self.send_error(400, str(e))
            return
        log = os.environ.get("BILLING_LOG")
        if log:
            with open(log, "a") as f:
                now = time.time()
                f.writelines(f"{ev['event_id']} {ev['attempt']} {now:.6f}\n" for ev in req["events"])
        out = json.dumps({"results": results}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    host, _, port = (sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:8090").rpartition(":")
    ThreadingHTTPServer((host, int(port)), Handler).serve_forever()
