//go:build !linux

package e2e

import "os/exec"

// setDeathSignal does nothing here: only Linux can tie a child's life to
// its parent's. A replica left by a test that died is stopped by hand.
func setDeathSignal(*exec.Cmd) {}
