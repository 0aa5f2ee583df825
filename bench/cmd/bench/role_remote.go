package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/platformd/platformd/examples/shop"
)

// remoteHandlerName and remoteReserveSQL are the platformd-remote
// contender's remote handler: the shop's stock effect, one statement per
// event, the order's lines passed as a JSON array arg.
const (
	remoteHandlerName = "stock.reserve_remote"
	remoteReserveSQL  = shop.RemoteReserveStatement
)

// runRemoteHandler is the bench's remote handler: a small Go HTTP server
// answering every event with its reservation, so that the
// platformd-remote contender measures platformd's cost of a remote
// handler, not a language runtime's.
func runRemoteHandler(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("remote-handler", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to serve on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	h := shop.RemoteReserveHandler()
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// remoteHandlerURL starts the bench's remote handler once (a process of
// its own: its CPU is the machine's "other", not the consumer's) and
// returns its URL.
func (b *bench) remoteHandlerURL() (string, error) {
	if b.remoteURL != "" {
		return b.remoteURL, nil
	}
	port, err := freePort()
	if err != nil {
		return "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(b.self, roleArg, "remote-handler", "-listen", addr)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start the remote handler: %w", err)
	}
	b.remoteCmd = cmd
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			b.stopRemoteHandler()
			return "", fmt.Errorf("the remote handler did not listen on %s: %w", addr, err)
		}
		time.Sleep(10 * time.Millisecond) //nolint:forbidigo // a bounded poll of the handler's port (deadline above)
	}
	b.remoteURL = "http://" + addr + "/handle"
	return b.remoteURL, nil
}

// stopRemoteHandler stops the remote handler, if it runs.
func (b *bench) stopRemoteHandler() {
	if b.remoteCmd == nil {
		return
	}
	_ = b.remoteCmd.Process.Signal(syscall.SIGTERM)
	_ = b.remoteCmd.Wait()
	b.remoteCmd, b.remoteURL = nil, ""
}

// remoteHandlerBlock is the remote_handlers block of the platformd-remote
// contender's config.
func remoteHandlerBlock(url string) string {
	block := "    remote_handlers:\n      - name: " + remoteHandlerName + "\n        events: [order.order.placed.v1]\n" +
		"        url: " + url + "\n        statements:\n          reserve: |\n"
	for _, line := range splitLines(remoteReserveSQL) {
		block += "            " + line + "\n"
	}
	return block
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := range len(s) {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
