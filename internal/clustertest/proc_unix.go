//go:build unix

package clustertest

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// supported: the script, etcd and HAProxy run here.
const supported = true

// processAlive reports whether process pid exists and is not a zombie.
// The cluster's processes are not this process's children: once they end,
// whoever adopted them reaps them, maybe late.
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && err != syscall.EPERM {
		return false
	}
	// /proc/PID/stat is "PID (COMM) STATE ...", COMM may hold anything.
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // no /proc (not Linux): kill(0) has the last word
	}
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
		switch b[i+2] {
		case 'Z', 'X':
			return false
		}
	}
	return true
}
