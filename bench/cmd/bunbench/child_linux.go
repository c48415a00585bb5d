package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the child process cmd receive SIGKILL when bunbench dies, so that a run stopped by a
// signal leaves no relay or consumer of its own behind to load the machine under the next run.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
