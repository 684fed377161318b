package replica_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// closedWithin reads from c until it fails, up to limit, and returns how
// long that took and the error; a read that times out is the connection
// left open.
func closedWithin(t *testing.T, c net.Conn, limit time.Duration) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	if err := c.SetReadDeadline(start.Add(limit)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			return time.Since(start), err
		}
	}
}

// TestMaxConnections: with --max-connections 2 and two connections open
// on --xds-addr, a third is closed as soon as accepted and counted; once
// one of the two closes, a new one is kept.
func TestMaxConnections(t *testing.T) {
	_, r, reg := limitsEnv(t, func(c *replica.Config) { c.MaxConnections = 2 })
	open := func() float64 { return metricValue(t, reg, "legation_node_xds_connections") }
	first := dialH2(t, r.XDSAddr())
	dialH2(t, r.XDSAddr())
	xdstest.WaitFor(t, "two connections open", func() (bool, string) { return open() == 2, fmt.Sprint(open()) })

	third, err := net.Dial("tcp", r.XDSAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	took, err := closedWithin(t, third, xdstest.Timeout)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection beyond --max-connections was left open for %s", took)
	}
	if got := metricValue(t, reg, "legation_node_xds_connections_refused_total"); got != 1 {
		t.Errorf("legation_node_xds_connections_refused_total = %v, want 1", got)
	}

	first.conn.Close()
	xdstest.WaitFor(t, "a place freed", func() (bool, string) { return open() == 1, fmt.Sprint(open()) })
	dialH2(t, r.XDSAddr())
	xdstest.WaitFor(t, "the new connection kept", func() (bool, string) { return open() == 2, fmt.Sprint(open()) })
	if got := metricValue(t, reg, "legation_node_xds_connections_refused_total"); got != 1 {
		t.Errorf("legation_node_xds_connections_refused_total = %v after a place was freed, want 1", got)
	}
}

// TestHandshakeTimeout: a connection to --xds-addr that never sends the
// HTTP/2 preface is closed after --handshake-timeout, not after grpc-go's
// 120s, and counted; one through its handshakes is not.
func TestHandshakeTimeout(t *testing.T) {
	_, r, reg := limitsEnv(t, func(c *replica.Config) { c.HandshakeTimeout = time.Second })
	served := dialH2(t, r.XDSAddr()) // through its handshakes: not counted
	c, err := net.Dial("tcp", r.XDSAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	took, err := closedWithin(t, c, 20*time.Second)
	if errors.Is(err, os.ErrDeadlineExceeded) || took < 900*time.Millisecond || took > 10*time.Second {
		t.Fatalf("a silent connection ended after %s (%v), want about 1s (--handshake-timeout)", took.Round(time.Millisecond), err)
	}
	served.conn.Close()
	xdstest.WaitFor(t, "the served connection closed", func() (bool, string) {
		n := metricValue(t, reg, "legation_node_xds_connections")
		return n == 0, fmt.Sprint(n)
	})
	if got := metricValue(t, reg, "legation_node_xds_handshakes_unfinished_total"); got != 1 {
		t.Errorf("legation_node_xds_handshakes_unfinished_total = %v, want 1 (the silent connection, not the served one)", got)
	}
}
