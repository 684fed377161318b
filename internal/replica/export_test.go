package replica

import (
	"net/http"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// HTTPHandlerForTest returns the node's HTTP handler, so that tests can
// call it with requests that no client on loopback could make (another
// RemoteAddr) without sending traffic anywhere but to the handler.
func (n *Node) HTTPHandlerForTest() http.Handler { return n.httpSrv.Handler }

// SetPanicOnNodeForTest makes the ADS (SotW) streams whose first request
// names node id panic in their handler's goroutine: a stream interceptor
// of the test's, innermost (Config.testStreamInterceptor), reads the
// first request, panics on that node, and replays the request to the
// handler on any other.
func SetPanicOnNodeForTest(cfg *Config, id string) {
	cfg.testStreamInterceptor = func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if info.FullMethod != discoveryv3.AggregatedDiscoveryService_StreamAggregatedResources_FullMethodName {
			return handler(srv, ss)
		}
		first := new(discoveryv3.DiscoveryRequest)
		if err := ss.RecvMsg(first); err != nil {
			return handler(srv, ss) // it receives the same error
		}
		if first.GetNode().GetId() == id {
			panic("a test's stream interceptor: node " + id)
		}
		return handler(srv, &replayFirst{ServerStream: ss, first: first})
	}
}

// replayFirst is a server stream whose first RecvMsg returns first.
type replayFirst struct {
	grpc.ServerStream
	first *discoveryv3.DiscoveryRequest // nil once replayed
}

func (s *replayFirst) RecvMsg(m any) error {
	if s.first == nil {
		return s.ServerStream.RecvMsg(m)
	}
	proto.Merge(m.(proto.Message), s.first)
	s.first = nil
	return nil
}

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
