package main

// This file ties platformd's process to the demo's on Linux.

import "syscall"

// sysProcAttr puts platformd in a process group of its own (a Ctrl-C in the
// terminal reaches only the demo, which then stops it) and, unless detach is
// set, has the kernel kill it if the demo dies without cleaning up.
func sysProcAttr(detach bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	if !detach {
		a.Pdeathsig = syscall.SIGKILL
	}
	return a
}
