//go:build !linux

package main

// This file is the fallback of sysproc_linux.go on other systems.

import "syscall"

// sysProcAttr: the demo is written for Linux; elsewhere platformd stays in
// the demo's process group (a Ctrl-C in the terminal reaches it as well, and
// it shuts down cleanly on its own).
func sysProcAttr(bool) *syscall.SysProcAttr { return nil }
