package limits_test

import (
	"errors"
	"io"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/legation-io/legation/internal/xds/limits"
)

// TestConn: over real gRPC on 127.0.0.1, Conn gives the streams of one
// connection one key and those of another connection another; a context
// that no connection tagged has none.
func TestConn(t *testing.T) {
	l, err := limits.New(limits.Config{})
	if err != nil {
		t.Fatal(err)
	}
	keys := make(chan any, 3)
	srv := grpc.NewServer(grpc.StatsHandler(l.StatsHandler()),
		grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
			keys <- limits.Conn(ss.Context())
			return nil
		}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis) //nolint:errcheck // ends with Stop
	t.Cleanup(srv.Stop)
	stream := func(cc *grpc.ClientConn) any {
		t.Helper()
		st, err := cc.NewStream(t.Context(), &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/x.X/Stream")
		if err != nil {
			t.Fatal(err)
		}
		if err := st.RecvMsg(new(struct{})); !errors.Is(err, io.EOF) {
			t.Fatalf("stream: %v, want the handler's end (EOF)", err)
		}
		return <-keys
	}
	dial := func() *grpc.ClientConn {
		cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	a, b := dial(), dial()
	a1, a2, b1 := stream(a), stream(a), stream(b)
	if a1 == nil || b1 == nil {
		t.Fatalf("Conn of a tagged connection's stream: %v and %v, want a key", a1, b1)
	}
	if a1 != a2 {
		t.Error("two streams of one connection have different keys")
	}
	if a1 == b1 {
		t.Error("streams of two connections have the same key")
	}
	if k := limits.Conn(t.Context()); k != nil {
		t.Errorf("Conn of an untagged context: %v, want nil", k)
	}
}
