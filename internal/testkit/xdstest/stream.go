package xdstest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/legation-io/legation/internal/state/resource"
)

// Stream is a raw client xDS stream, SotW or delta: the test sends exactly
// the requests it means, and a goroutine of the Stream receives the
// responses into a buffer the test reads with a timeout. Its methods, but
// Recv and Client, are called from the test's goroutine (they fail the
// test with tb).
type Stream[Req, Resp any] struct {
	tb     testing.TB
	st     grpc.BidiStreamingClient[Req, Resp]
	recv   chan Result[Resp]
	cancel context.CancelFunc
	// long and short bound Expect and ExpectErr, and ExpectNone:
	// Timeout and ShortTimeout unless SetTimeouts.
	long, short time.Duration
}

// Result is one receive of a Stream: a response, or the error that ended
// the stream (the last Result).
type Result[Resp any] struct {
	Resp *Resp
	Err  error
}

// SotWStream is a raw state-of-the-world stream.
type SotWStream struct {
	*Stream[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]
}

// DeltaStream is a raw delta (incremental) stream.
type DeltaStream struct {
	*Stream[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]
}

// NewStream wraps st, which cancel ends, and starts receiving. When tb
// ends the stream is cancelled and its receiving goroutine waited for:
// cancel must end st (the context st was opened with).
func NewStream[Req, Resp any](tb testing.TB, st grpc.BidiStreamingClient[Req, Resp], cancel context.CancelFunc) *Stream[Req, Resp] {
	x := &Stream[Req, Resp]{tb: tb, st: st, recv: make(chan Result[Resp], 100), cancel: cancel, long: Timeout, short: ShortTimeout}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			r, err := st.Recv()
			select {
			case x.recv <- Result[Resp]{r, err}:
			case <-stop:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	tb.Cleanup(func() { cancel(); close(stop); <-done })
	return x
}

// NewSotW wraps a SotW stream of ADS or of a per-type service (see
// NewStream).
func NewSotW(tb testing.TB, st grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse], cancel context.CancelFunc) *SotWStream {
	return &SotWStream{NewStream(tb, st, cancel)}
}

// NewDelta wraps a delta stream of ADS or of a per-type service (see
// NewStream).
func NewDelta(tb testing.TB, st grpc.BidiStreamingClient[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse], cancel context.CancelFunc) *DeltaStream {
	return &DeltaStream{NewStream(tb, st, cancel)}
}

// Open opens a stream with open on cc and wraps it (NewStream).
func Open[Req, Resp any](tb testing.TB, cc *grpc.ClientConn, open func(context.Context, *grpc.ClientConn) (grpc.BidiStreamingClient[Req, Resp], error)) *Stream[Req, Resp] {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := open(ctx, cc)
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	return NewStream(tb, st, cancel)
}

// OpenSotW opens a SotW ADS stream (StreamAggregatedResources) on cc.
func OpenSotW(tb testing.TB, cc *grpc.ClientConn) *SotWStream {
	tb.Helper()
	return &SotWStream{Open(tb, cc, func(ctx context.Context, cc *grpc.ClientConn) (grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse], error) {
		return discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	})}
}

// OpenDelta opens a delta ADS stream (DeltaAggregatedResources) on cc.
func OpenDelta(tb testing.TB, cc *grpc.ClientConn) *DeltaStream {
	tb.Helper()
	return &DeltaStream{Open(tb, cc, func(ctx context.Context, cc *grpc.ClientConn) (grpc.BidiStreamingClient[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse], error) {
		return discoveryv3.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	})}
}

// SetTimeouts replaces Timeout and ShortTimeout for this stream: long for
// what must come (Expect, ExpectErr), short for what must not
// (ExpectNone). A test of whole processes sets longer ones.
func (x *Stream[Req, Resp]) SetTimeouts(long, short time.Duration) { x.long, x.short = long, short }

// Send sends r, failing the test if it cannot. io.EOF is not a failure
// here: gRPC returns it when the server has already ended the stream (a
// refusal can beat the first request), and the status the stream ended
// with comes from the receive side (Expect, ExpectErr, Recv).
func (x *Stream[Req, Resp]) Send(r *Req) {
	x.tb.Helper()
	if err := x.st.Send(r); err != nil && !errors.Is(err, io.EOF) {
		x.tb.Fatalf("send: %v", err)
	}
}

// Expect waits up to Timeout (see SetTimeouts) for the next response and returns it. It
// fails the test if none comes or the stream ends, and reports (without
// stopping) a response without a nonce.
func (x *Stream[Req, Resp]) Expect() *Resp {
	x.tb.Helper()
	select {
	case r := <-x.recv:
		if r.Err != nil {
			x.tb.Fatalf("stream ended: %v", r.Err)
		}
		if n, ok := any(r.Resp).(interface{ GetNonce() string }); ok && n.GetNonce() == "" {
			x.tb.Errorf("a response without a nonce: %s", Summary(r.Resp))
		}
		return r.Resp
	case <-time.After(x.long):
		x.tb.Fatalf("no response within %s", x.long)
		return nil
	}
}

// ExpectNone fails the test if a response comes, or the stream ends,
// within ShortTimeout (see SetTimeouts).
func (x *Stream[Req, Resp]) ExpectNone() {
	x.tb.Helper()
	select {
	case r := <-x.recv:
		if r.Err != nil {
			x.tb.Fatalf("stream ended: %v", r.Err)
		}
		x.tb.Fatalf("unexpected response: %s", Summary(r.Resp))
	case <-time.After(x.short):
	}
}

// ExpectErr waits up to Timeout (see SetTimeouts) for the stream to end, skipping any
// responses, and returns the error it ended with.
func (x *Stream[Req, Resp]) ExpectErr() error {
	x.tb.Helper()
	deadline := time.After(x.long)
	for {
		select {
		case r := <-x.recv:
			if r.Err != nil {
				return r.Err
			}
		case <-deadline:
			x.tb.Fatal("stream did not end")
			return nil
		}
	}
}

// Recv is what the receiving goroutine delivers, for a test that follows
// the stream from a goroutine of its own; the last Result has an error.
func (x *Stream[Req, Resp]) Recv() <-chan Result[Resp] { return x.recv }

// Client is the raw stream, for sending from another goroutine than the
// test's (one sender at a time).
func (x *Stream[Req, Resp]) Client() grpc.BidiStreamingClient[Req, Resp] { return x.st }

// Cancel ends the stream, as a client going away does.
func (x *Stream[Req, Resp]) Cancel() { x.cancel() }

// Ack acknowledges resp, keeping (or, for a type that is not wildcard,
// subscribing) names.
func (x *SotWStream) Ack(resp *discoveryv3.DiscoveryResponse, names ...string) {
	x.tb.Helper()
	x.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(), ResourceNames: names})
}

// Nack rejects resp with msg, keeping version lastGood (the last one
// accepted) and names.
func (x *SotWStream) Nack(resp *discoveryv3.DiscoveryResponse, lastGood, msg string, names ...string) {
	x.tb.Helper()
	x.Send(&discoveryv3.DiscoveryRequest{
		TypeUrl: resp.GetTypeUrl(), VersionInfo: lastGood, ResponseNonce: resp.GetNonce(), ResourceNames: names,
		ErrorDetail: &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: msg},
	})
}

// ExpectType is Expect, failing the test unless the response is of typ.
func (x *SotWStream) ExpectType(typ *resource.Type) *discoveryv3.DiscoveryResponse {
	x.tb.Helper()
	resp := x.Expect()
	if resp.GetTypeUrl() != typ.URL {
		x.tb.Fatalf("got a response of type %s, want %s: %s", resp.GetTypeUrl(), typ.URL, Summary(resp))
	}
	return resp
}

// Ack acknowledges resp.
func (d *DeltaStream) Ack(resp *discoveryv3.DeltaDiscoveryResponse) {
	d.tb.Helper()
	d.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()})
}

// ExpectAck is Expect, then Ack of the response, as a client that
// accepts everything does.
func (d *DeltaStream) ExpectAck() *discoveryv3.DeltaDiscoveryResponse {
	d.tb.Helper()
	resp := d.Expect()
	d.Ack(resp)
	return resp
}

// Nack rejects resp with msg.
func (d *DeltaStream) Nack(resp *discoveryv3.DeltaDiscoveryResponse, msg string) {
	d.tb.Helper()
	d.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce(),
		ErrorDetail: &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: msg}})
}

// ExpectType is Expect, failing the test unless the response is of typ.
func (d *DeltaStream) ExpectType(typ *resource.Type) *discoveryv3.DeltaDiscoveryResponse {
	d.tb.Helper()
	resp := d.Expect()
	if resp.GetTypeUrl() != typ.URL {
		d.tb.Fatalf("got a response of type %s, want %s: %s", resp.GetTypeUrl(), typ.URL, Summary(resp))
	}
	return resp
}

// Summary is a one-line account of a response, SotW or delta: its type,
// version, resources (with their versions in delta) and, in delta, the
// names removed.
func Summary(resp any) string {
	switch r := resp.(type) {
	case *discoveryv3.DiscoveryResponse:
		return fmt.Sprintf("%s version=%s nonce=%s %d resources", r.GetTypeUrl(), r.GetVersionInfo(), r.GetNonce(), len(r.GetResources()))
	case *discoveryv3.DeltaDiscoveryResponse:
		var res []string
		for _, x := range r.GetResources() {
			res = append(res, x.GetName()+"@"+x.GetVersion())
		}
		return fmt.Sprintf("%s system=%s resources=[%s] removed=[%s]", r.GetTypeUrl(), r.GetSystemVersionInfo(),
			strings.Join(res, " "), strings.Join(r.GetRemovedResources(), " "))
	}
	return fmt.Sprint(resp)
}
