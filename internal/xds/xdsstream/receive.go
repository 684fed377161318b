// Package xdsstream is the stream plumbing the SotW (ads) and delta
// servers share: the one receive goroutine of a stream, how a stream's end
// is reported, and the registry of open streams behind /debug/streams. It
// knows nothing of the protocol's rules.
package xdsstream

import (
	"context"
	"errors"
	"io"
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/xds/limits"
)

// Received is what a stream's receive goroutine hands over: a message, or
// the receive error that ended it.
type Received[T any] struct {
	Msg *T
	Err error
}

// Receive starts a stream's receive goroutine: it reads messages with recv
// into new *T values and hands them over one at a time on the channel, so
// the stream's loop, the only sender, reads them when ready (gRPC's flow
// control holds the client back meanwhile). The first receive error is
// the last thing handed over. The goroutine ends with that error, or when
// ctx ends; for a gRPC stream, recv fails once the handler returns. One
// channel for both keeps the stream loop's select small: it is the
// costliest part of waking 10,000 streams for one push.
//
// A panic in recv (a codec's, say) is recovered here, where no gRPC
// interceptor would see it, and handed over as the receive error, a
// *limits.PanicError: the handler returns it, and the recovery
// interceptor (limits.Limits.Recover) logs, counts and answers it
// as a panic of the handler's own.
func Receive[T any](ctx context.Context, recv func(any) error) <-chan Received[T] {
	c := make(chan Received[T], 1)
	hand := func(r Received[T]) bool {
		select {
		case c <- r:
			return true
		case <-ctx.Done():
			return false
		}
	}
	go func() {
		defer func() {
			if v := recover(); v != nil {
				hand(Received[T]{Err: limits.Recovered(v)})
			}
		}()
		for {
			r := new(T)
			if err := recv(r); err != nil {
				hand(Received[T]{Err: err})
				return
			}
			if !hand(Received[T]{Msg: r}) {
				return
			}
		}
	}()
	return c
}

// EndErr is what a stream handler returns for a receive error: nil when
// the client closed or cancelled the stream, else the error.
func EndErr(err error) error {
	if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
		return nil
	}
	return err
}

// Registry tracks the open streams of a server. Its methods may be called
// concurrently.
type Registry[S any] struct {
	// Open, if set, counts the open streams (a metric).
	Open prometheus.Gauge

	mu      sync.Mutex // guards streams
	streams map[uint64]S
}

// Add registers stream s under id and returns the func that removes it.
func (r *Registry[S]) Add(id uint64, s S) (remove func()) {
	r.mu.Lock()
	if r.streams == nil {
		r.streams = map[uint64]S{}
	}
	r.streams[id] = s
	r.mu.Unlock()
	if r.Open != nil {
		r.Open.Inc()
	}
	return func() {
		r.mu.Lock()
		delete(r.streams, id)
		r.mu.Unlock()
		if r.Open != nil {
			r.Open.Dec()
		}
	}
}

// Range calls f for every open stream, in no particular order, without
// the registry's lock held (streams opened meanwhile may be missed, and
// streams closed meanwhile may be seen).
func (r *Registry[S]) Range(f func(S)) {
	r.mu.Lock()
	list := make([]S, 0, len(r.streams))
	for _, s := range r.streams {
		list = append(list, s)
	}
	r.mu.Unlock()
	for _, s := range list {
		f(s)
	}
}

// Each returns f of every open stream, in id order. f is called without
// the registry's lock held.
func Each[S, V any](r *Registry[S], f func(S) V) []V {
	r.mu.Lock()
	ids := make([]uint64, 0, len(r.streams))
	list := make(map[uint64]S, len(r.streams))
	for id, s := range r.streams {
		ids = append(ids, id)
		list[id] = s
	}
	r.mu.Unlock()
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	out := make([]V, 0, len(ids))
	for _, id := range ids {
		out = append(out, f(list[id]))
	}
	return out
}
