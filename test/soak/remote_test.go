package soak

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// handlerPy is billing.open_invoice as a remote handler in Python (the
// standard library only), with the faults the soak turns on through a
// file: "slow" answers after the call's 2 s timeout, "500" fails every
// call. An order marked poison is refused as permanent: a failure that
// must end in the failure store, explained.
const handlerPy = `import json, os, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODE = sys.argv[2]

def answer(ev):
    p = ev["payload"]
    if p.get("poison"):
        return {"event_id": ev["event_id"], "error": "poison order refused", "permanent": True}
    return {"event_id": ev["event_id"],
            "effects": [{"statement": "open_invoice", "args": {"order_id": p["order_id"], "lines": len(p["lines"])}}],
            "publish": [{"event_name": "billing.invoice.opened.v1",
                         "payload": {"order_id": p["order_id"], "invoice_for": ev["event_id"]}}]}

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            mode = open(MODE).read().strip()
        except OSError:
            mode = "ok"
        if mode == "slow":
            time.sleep(3)
        if mode == "500":
            out = b"broken on purpose"
            self.send_response(500)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            return
        req = json.loads(body)
        out = json.dumps({"results": [answer(ev) for ev in req["events"]]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def log_message(self, *a):
        pass

host, _, port = sys.argv[1].rpartition(":")
ThreadingHTTPServer((host, int(port)), H).serve_forever()
`

// remoteHandler is the Python process the billing pool calls.
type remoteHandler struct {
	addr, script, mode, log string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

func newRemote(dir, addr string) (*remoteHandler, error) {
	r := &remoteHandler{addr: addr, script: filepath.Join(dir, "handler.py"), mode: filepath.Join(dir, "handler.mode"),
		log: filepath.Join(dir, "handler.log")}
	if err := os.WriteFile(r.script, []byte(handlerPy), 0o644); err != nil {
		return nil, err
	}
	return r, r.setMode("ok")
}

func (r *remoteHandler) url() string { return "http://" + r.addr + "/handle" }

// setMode switches the handler's answers: ok, slow or 500.
func (r *remoteHandler) setMode(m string) error { return os.WriteFile(r.mode, []byte(m), 0o644) }

// start runs the handler and waits until it answers.
func (r *remoteHandler) start() error {
	r.mu.Lock()
	if r.cmd != nil {
		r.mu.Unlock()
		return nil
	}
	logf, err := os.OpenFile(r.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		r.mu.Unlock()
		return err
	}
	cmd := exec.Command("python3", r.script, r.addr, r.mode)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		r.mu.Unlock()
		logf.Close()
		return fmt.Errorf("remote handler: %w", err)
	}
	exited := make(chan struct{})
	r.cmd, r.exited = cmd, exited
	r.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		logf.Close()
		r.mu.Lock()
		r.cmd = nil
		r.mu.Unlock()
		close(exited)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + r.addr + "/")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("remote handler exited at start (log %s)", r.log)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("remote handler not answering after 30s: %w", err)
		}
		time.Sleep(100 * time.Millisecond) //nolint:forbidigo // a bounded poll of the handler's port (30 s deadline above)
	}
}

// stop kills the handler (it holds no state).
func (r *remoteHandler) stop() {
	r.mu.Lock()
	cmd, exited := r.cmd, r.exited
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}
