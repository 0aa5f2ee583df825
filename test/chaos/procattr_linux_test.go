package chaos

import "syscall"

// childProcAttr makes the kernel kill a daemon if the test binary dies, so
// that no daemon outlives an aborted run.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
