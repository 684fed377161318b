package replica

import (
	"net/http"
	"time"
)

// HTTPHandlerForTest returns the node's HTTP handler, so that tests can
// call it with requests that no client on loopback could make (another
// RemoteAddr) without sending traffic anywhere but to the handler.
func (n *Node) HTTPHandlerForTest() http.Handler { return n.httpSrv.Handler }

// SetPanicOnNodeForTest makes the streams of node id panic in their
// handler (xdsstream.Config.PanicOnNode).
func SetPanicOnNodeForTest(cfg *Config, id string) { cfg.panicOnNode = id }

// SetShareForTest sets the share cap's floor, the time shedding waits
// for the ring to settle (shareFloor, shedSettle) and, if not nil, the
// estimate of the fair share, so that a test sheds a few streams, soon,
// when it says.
func SetShareForTest(cfg *Config, floor int, settle time.Duration, fair func() (float64, bool)) {
	cfg.shareFloor, cfg.shedSettle, cfg.fairShare = floor, settle, fair
}

// ShareForTest returns the replica's fair share estimate and the streams
// admitted there now.
func (n *Node) ShareForTest() (fair float64, ok bool, open int) {
	fair, ok = n.fairShare()
	return fair, ok, n.limits.Open()
}

// HomeForTest returns the name of the replica the ring makes node id's
// home.
func (n *Node) HomeForTest(id string) string {
	name, _, _ := n.cluster.Home(id)
	return name
}

// PushTracingForTest reports whether the replica's xDS servers carry a
// push tracer (traces on).
func (n *Node) PushTracingForTest() bool { return n.pushes != nil }

// ReadinessChecksForTest returns how often the readiness watcher has read
// readiness.
func (n *Node) ReadinessChecksForTest() uint64 { return n.readinessChecks.Load() }
