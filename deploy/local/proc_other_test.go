//go:build !linux

package main

import "os/exec"

// setDeathSignal does nothing here: only Linux can tie a child's life to
// its parent's.
func setDeathSignal(*exec.Cmd) {}
