//go:build !linux

package chaos

import "syscall"

func childProcAttr() *syscall.SysProcAttr { return nil }
