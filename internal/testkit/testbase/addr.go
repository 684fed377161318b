package testbase

import (
	"net"
	"testing"
)

// FreeAddr returns a 127.0.0.1 address whose port was free a moment ago,
// for a process or server that must be told its address before it
// listens.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	return FreeAddrs(tb, 1)[0]
}

// FreeAddrs returns n distinct 127.0.0.1 addresses whose ports were free a
// moment ago: each stays held until all are chosen, so none repeats.
func FreeAddrs(tb testing.TB, n int) []string {
	tb.Helper()
	addrs := make([]string, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs
}
