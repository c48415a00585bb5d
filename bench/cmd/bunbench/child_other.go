//go:build !linux

package main

import "os/exec"

// dieWithParent does nothing where the system cannot signal a child when its parent dies.
func dieWithParent(*exec.Cmd) {}
