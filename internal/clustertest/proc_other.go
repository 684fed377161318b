//go:build !unix

package clustertest

// supported: Start skips the test; the script needs a Unix system.
const supported = false

func processAlive(int) bool { return false }
