package clustertest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
)

// The 127.0.N. prefixes Start picks from; the script's default, 127.0.10.,
// is outside, for people running a cluster by hand.
const (
	netFirst = 100
	netLast  = 250
)

// pickNet returns a 127.0.N. prefix whose addresses are free, and a
// listener on the prefix's .2 (an address the script does not use) that
// claims it: other test processes skip a prefix whose .2 is taken. The
// caller closes the listener once the cluster is down; if the process
// dies, the kernel releases it.
func pickNet(t testing.TB, members, replicas int) (string, net.Listener) {
	t.Helper()
	n := netLast - netFirst + 1
	first := rand.IntN(n)
	var last error
	for k := range n {
		prefix := fmt.Sprintf("127.0.%d.", netFirst+(first+k)%n)
		lock, err := net.Listen("tcp", prefix+"2:18000")
		if err != nil {
			last = err
			continue
		}
		if err := probe(prefix, members, replicas); err != nil {
			lock.Close()
			last = err
			continue
		}
		return prefix, lock
	}
	t.Fatalf("clustertest: no free 127.0.N. prefix for N in %d-%d; last: %v "+
		"(a process listening on a wildcard address, such as an xds-node in dev mode on :18000, takes that port on them all)",
		netFirst, netLast, last)
	return "", nil
}

// probe checks that nothing listens on the addresses the script will use
// under prefix (a cluster left running by a test process that died, for
// one), by binding each and closing it.
func probe(prefix string, members, replicas int) error {
	addrs := []string{prefix + "1:18000", prefix + "1:18001"}
	for i := 1; i <= members; i++ {
		addrs = append(addrs, fmt.Sprintf("%s%d:2379", prefix, 10+i), fmt.Sprintf("%s%d:2380", prefix, 10+i))
	}
	var udp []string
	for i := 1; i <= replicas; i++ {
		ip := fmt.Sprintf("%s%d", prefix, 20+i)
		addrs = append(addrs, ip+":18000", ip+":18001", ip+":7946")
		udp = append(udp, ip+":7946") // memberlist gossips over UDP too
	}
	var errs []error
	for _, a := range addrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		l.Close()
	}
	for _, a := range udp {
		l, err := net.ListenPacket("udp", a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		l.Close()
	}
	return errors.Join(errs...)
}
