package replica

import (
	"context"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"google.golang.org/grpc"

	"github.com/legation-io/legation/internal/xds/limits"
)

// streamInterceptor is the replica's one stream interceptor, in this
// order: the gRPC metrics (m's interceptor, but for messages sent: those
// bypass it), recovery from panics, the bounds and admission (limits),
// admins only for CSDS (admin, the guard), then inner (the relay).
//
// It is one function, not a grpc.ChainStreamInterceptor of five small
// ones, for the memory of idle streams: a stream's handler goroutine
// stays parked under the interceptors for the stream's life, and a
// chain's frames (some 600 bytes more of it in use) leave it on a stack
// of the next size (stacks come in powers of two). With 5,000 idle
// streams of a connection each (BenchmarkIdleStreams) the replica's
// goroutine stacks take 22,600 bytes per stream fused and 30,800 chained:
// 8 KiB more per stream, some 80 MB at 10,000 streams, for the same heap
// (52 KB per stream) and goroutines (5 per stream).
//
// The metrics come first, so that a call that panicked is counted with
// the INTERNAL the recovery ends it with (their interceptor,
// go-grpc-middleware's, does not panic). Recovery comes next, so that it
// covers the rest and the handler; then the bounds and admission, before
// the relay, so that a stream is admitted at the replica its client
// reached (the edge) and not again at its home. CSDS answers admins only
// (with mTLS); the relay comes after, so an xDS stream it relays is
// checked at its home.
//
// Messages sent bypass the metrics: the provider counts each message
// with a label lookup and an allocation, and a push sends one message per
// stream (10,000 in a burst); legation_<protocol>_responses_total and
// legation_xds_response_size_bytes count the sends already. So for
// streams grpc_server_msg_sent_total stays 0; messages received (the
// requests, ACKs and NACKs) are counted.
func streamInterceptor(m *grpcprom.ServerMetrics, l *limits.Limits, admin func(context.Context) error, adminMethod string, inner grpc.StreamServerInterceptor) grpc.StreamServerInterceptor {
	metrics := m.StreamServerInterceptor()
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return metrics(srv, ss, info, func(srv any, monitored grpc.ServerStream) (err error) {
			defer l.Recover(info.FullMethod, &err)
			release, err := l.AdmitStream(ss.Context(), info.FullMethod)
			if err != nil {
				return err
			}
			// A stream authorization refuses (here, or at the home it
			// is relayed to) gives its admission token back.
			defer func() { release(limits.Refused(err)) }()
			if info.FullMethod == adminMethod {
				if err := admin(ss.Context()); err != nil {
					return err
				}
			}
			return inner(srv, recvMonitored{ServerStream: ss, recv: monitored}, info, handler)
		})
	}
}

// recvMonitored is a stream whose received messages go through recv (the
// monitored stream) and everything else, sends included, straight to the
// stream.
type recvMonitored struct {
	grpc.ServerStream
	recv grpc.ServerStream
}

func (s recvMonitored) RecvMsg(m any) error { return s.recv.RecvMsg(m) }

// then is outer, then inner, around the handler: a chain of two.
func then(outer, inner grpc.StreamServerInterceptor) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return outer(srv, ss, info, func(srv any, ss grpc.ServerStream) error { return inner(srv, ss, info, handler) })
	}
}
