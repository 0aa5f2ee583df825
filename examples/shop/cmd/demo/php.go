package main

// This file serves billing's remote handler in PHP
// (examples/billing-php/handler.php) with php -S, for -billing-php.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// startPHP serves examples/billing-php/handler.php with PHP's built-in
// server (PHP_CLI_SERVER_WORKERS=4) at the address of the config's
// billing remote handler, its output appended to logPath's folder, and
// returns a function that stops it.
func startPHP(ctx context.Context, root string, cfg *shopConfig, logPath string) (func(), error) {
	php, err := exec.LookPath("php")
	if err != nil {
		return nil, errors.New("-billing-php needs php (Debian's php-cli; scripts/services.sh installs it)")
	}
	s, _ := cfg.service(billingService)
	if len(s.RemoteHandlers) == 0 {
		return nil, fmt.Errorf("-billing-php: service %s has no remote handler", billingService)
	}
	u, err := url.Parse(s.RemoteHandlers[0].URL)
	if err != nil {
		return nil, fmt.Errorf("-billing-php: %w", err)
	}
	if l, err := net.Listen("tcp", u.Host); err != nil {
		return nil, fmt.Errorf("-billing-php: %s is already in use (another php -S?); set BILLING_HANDLER_URL: %w", u.Host, err)
	} else {
		_ = l.Close()
	}
	out, err := os.OpenFile(filepath.Join(filepath.Dir(logPath), "billing-php.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(php, "-S", u.Host, filepath.Join(root, "examples", "billing-php", "handler.php"))
	cmd.Env = append(os.Environ(), "PHP_CLI_SERVER_WORKERS=4")
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group: the workers it forks are stopped with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		return nil, fmt.Errorf("start php -S: %w", err)
	}
	stop := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		_ = cmd.Wait()
		_ = out.Close()
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.Dial("tcp", u.Host)
		if err == nil {
			_ = c.Close()
			return stop, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			stop()
			return nil, fmt.Errorf("php -S did not listen on %s: %w", u.Host, err)
		}
		time.Sleep(20 * time.Millisecond) //nolint:forbidigo // a bounded poll of php -S's port (deadline above)
	}
}
