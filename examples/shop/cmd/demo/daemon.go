package main

// This file runs the shop's daemon, examples/shop/cmd/shopd, built plainly
// (no build tag: the very program a team ships) as a child process: start,
// SIGTERM, SIGKILL, one-off commands such as migrate, and its log.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// findRoot returns the repository root: the working directory (where
// `make demo` runs `go run`) or the nearest parent holding the module's
// go.mod.
func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module github.com/platformd/platformd\n")) {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod of github.com/platformd/platformd in %s or its parents: run the demo from the repository", dir)
		}
	}
}

// goCommand returns the go command: $GO (set by the Makefile), else go on
// PATH (`go run` puts its own toolchain first on the PATH it passes on).
func goCommand() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

// buildDaemon builds the shop's daemon (./examples/shop/cmd/shopd: the
// platformd command line with the shop's Go handlers; the release binary
// has none) into dir, as a team builds its own binary: no build tag, no
// test hook. It returns the binary's path. It runs the SQL shop's config
// as well.
func buildDaemon(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "shopd")
	cmd := exec.CommandContext(ctx, goCommand(), "build", "-o", bin, "./examples/shop/cmd/shopd")
	cmd.Dir = root
	// Static, as the release binary (make image) is built.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./examples/shop/cmd/shopd: %w\n%s", err, out)
	}
	return bin, nil
}

// daemon is the platformd subprocess. Its stdout and stderr go to logPath,
// every run appended to the same file.
type daemon struct {
	bin, config, logPath string

	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
	err    error         // cmd.Wait's result, once exited is closed
}

// logf appends one line of the demo's own to the log file, to tell runs
// apart.
func (d *daemon) logf(format string, args ...any) {
	f, err := os.OpenFile(d.logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = fmt.Fprintf(f, "=== demo %s: "+format+"\n", append([]any{time.Now().Format(time.RFC3339)}, args...)...)
}

// command runs a platformd command to completion, its output in the log.
func (d *daemon) command(ctx context.Context, args ...string) error {
	f, err := os.OpenFile(d.logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	d.logf("platformd %s", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, d.bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("platformd %s: %w%s", args[0], err, d.tail())
	}
	return nil
}

// start starts `platformd run`. The child gets a process group of its own,
// so a Ctrl-C in the terminal reaches only the demo, which then stops it;
// unless detach is set, it is also killed if the demo dies.
// env, when not nil, is the child's environment.
func (d *daemon) start(detach bool, env []string) error {
	if d.running() {
		return errors.New("platformd already running")
	}
	f, err := os.OpenFile(d.logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	d.logf("platformd run -config %s", d.config)
	cmd := exec.Command(d.bin, "run", "-config", d.config)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = env
	cmd.SysProcAttr = sysProcAttr(detach)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start platformd: %w", err)
	}
	d.cmd, d.exited, d.err = cmd, make(chan struct{}), nil
	go func(exited chan struct{}) {
		d.err = cmd.Wait()
		close(exited)
	}(d.exited)
	return nil
}

func (d *daemon) running() bool {
	if d.cmd == nil {
		return false
	}
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

func (d *daemon) pid() int { return d.cmd.Process.Pid }

// exitedErr returns a non-nil error if the daemon is no longer running.
func (d *daemon) exitedErr() error {
	if d.cmd == nil || d.running() {
		return nil
	}
	return fmt.Errorf("platformd exited unexpectedly (%w)%s", d.err, d.tail())
}

// kill sends SIGKILL and waits for the process to be gone.
func (d *daemon) kill() {
	if !d.running() {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.exited
}

// stop sends SIGTERM and waits up to grace for the exit; it returns an
// error unless platformd exited with status 0 in time (then it is killed).
func (d *daemon) stop(grace time.Duration) error {
	if !d.running() {
		return d.exitedErr()
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
		if d.err != nil {
			return fmt.Errorf("platformd exited with %w after SIGTERM, expected status 0%s", d.err, d.tail())
		}
		return nil
	case <-time.After(grace):
		d.kill()
		return fmt.Errorf("platformd did not exit within %s of SIGTERM; killed it%s", grace, d.tail())
	}
}

// tail returns the last lines of the log, indented, for error messages.
func (d *daemon) tail() string {
	f, err := os.Open(d.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 15 {
			lines = lines[1:]
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return "\nlast lines of " + d.logPath + ":\n    " + strings.Join(lines, "\n    ")
}
