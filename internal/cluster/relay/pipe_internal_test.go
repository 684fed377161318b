package relay

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/legation-io/legation/internal/xds/limits"
)

// panickyServerStream is a client's side of a relayed stream whose
// receive panics.
type panickyServerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s panickyServerStream) Context() context.Context { return s.ctx }
func (panickyServerStream) RecvMsg(any) error          { panic("codec bug") }

// homeLeg is the home's side, answering nothing until its context ends.
type homeLeg struct {
	grpc.ClientStream
	ctx context.Context
}

func (h homeLeg) RecvMsg(any) error {
	<-h.ctx.Done()
	return h.ctx.Err()
}

// TestPipeRecoversClientSide: a panic in the goroutine copying the
// client's messages to the home, where no interceptor sees it, ends the
// stream with a *limits.PanicError (which the recovery interceptor
// answers with INTERNAL) and cancels the home's leg; the replica lives.
func TestPipeRecoversClientSide(t *testing.T) {
	r, err := New(Config{Self: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	leg, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- r.pipe(t.Context(), panickyServerStream{ctx: t.Context()}, homeLeg{ctx: leg}, cancel)
	}()
	select {
	case err := <-done:
		p, ok := errors.AsType[*limits.PanicError](err)
		if !ok || p.Value != "codec bug" || len(p.Stack) == 0 {
			t.Fatalf("pipe = %v, want the *limits.PanicError of the panic with its stack", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pipe did not end after the client side panicked")
	}
	if leg.Err() == nil {
		t.Error("the home's leg was not cancelled")
	}
}
