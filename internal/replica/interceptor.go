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
// admins only for CSDS (admin, the guard), then the relay. It is one
// function, where five interceptors chained by gRPC stacked 14 frames
// under every stream's handler: its goroutine is parked there for the
// stream's life, and a garbage collection scans every parked stack (at
// 10,000 streams, most of a collection's work).
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
func streamInterceptor(m *grpcprom.ServerMetrics, l *limits.Limits, admin func(context.Context) error, adminMethod string, relay grpc.StreamServerInterceptor) grpc.StreamServerInterceptor {
	metrics := m.StreamServerInterceptor()
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return metrics(srv, ss, info, func(srv any, monitored grpc.ServerStream) (err error) {
			defer l.Recover(info.FullMethod, &err)
			release, err := l.AdmitStream(ss.Context(), info.FullMethod)
			if err != nil {
				return err
			}
			defer release()
			if info.FullMethod == adminMethod {
				if err := admin(ss.Context()); err != nil {
					return err
				}
			}
			return relay(srv, recvMonitored{ServerStream: ss, recv: monitored}, info, handler)
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
