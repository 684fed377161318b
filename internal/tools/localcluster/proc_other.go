//go:build !unix

package localcluster

import (
	"errors"
	"os"
	"syscall"
)

// errUnsupported: etcd members, replicas and HAProxy on 127.0.N.x
// addresses, frozen with SIGSTOP, need a Unix system.
var errUnsupported = errors.New("localcluster: needs a Unix system")

var (
	sigTerm os.Signal = os.Interrupt
	sigKill os.Signal = os.Kill
	sigStop os.Signal = os.Interrupt
	sigCont os.Signal = os.Interrupt
)

func endedByTERM(*os.ProcessState) bool { return false }

func sysProcAttr() *syscall.SysProcAttr { return nil }
