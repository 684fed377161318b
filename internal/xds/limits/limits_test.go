package limits_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/xds/limits"
)

// TestHitsShared: packages calling Hits on one registry share one vec.
func TestHitsShared(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := limits.Hits(reg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := limits.Hits(reg)
	if err != nil {
		t.Fatal(err)
	}
	a.WithLabelValues("x").Inc()
	b.WithLabelValues("x").Inc()
	if got := value(t, a.WithLabelValues("x")); got != 2 {
		t.Errorf("shared counter = %v, want 2", got)
	}
}

// TestRecover: a panicking unary handler, a panicking stream handler and
// a stream handler returning a PanicError each get INTERNAL and count one
// panic; an ordinary error passes unchanged.
func TestRecover(t *testing.T) {
	reg := prometheus.NewRegistry()
	l, err := limits.New(limits.Config{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	panics, _ := limits.Panics(reg)
	info := &grpc.UnaryServerInfo{FullMethod: "/x/Unary"}
	if _, err := l.RecoverUnary()(t.Context(), nil, info, func(context.Context, any) (any, error) { panic("unary") }); status.Code(err) != codes.Internal {
		t.Errorf("unary panic: %v, want INTERNAL", err)
	}
	// A stream interceptor defers Recover around its handler.
	stream := func(h func() error) (err error) {
		defer l.Recover("/x/Stream", &err)
		return h()
	}
	for name, h := range map[string]func() error{
		"panic":       func() error { panic("stream") },
		"panic error": func() error { return limits.Recovered("receive") },
	} {
		if err := stream(h); status.Code(err) != codes.Internal {
			t.Errorf("%s: %v, want INTERNAL", name, err)
		}
	}
	plain := errors.New("plain")
	if err := stream(func() error { return plain }); err != plain {
		t.Errorf("plain error: %v, want it unchanged", err)
	}
	if got := value(t, panics); got != 3 {
		t.Errorf("legation_panics_total = %v, want 3", got)
	}
}

// value is a counter's value.
func value(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// admitted runs handler as a stream of ctx's connection admitted by l,
// as the replica's stream interceptor does, or returns the refusal.
func admitted(l *limits.Limits, ctx context.Context, handler func() error) error {
	release, err := l.AdmitStream(ctx, "/x/Stream")
	if err != nil {
		return err
	}
	err = handler()
	release(limits.Refused(err))
	return err
}

// TestShareCap: with a fair share of 10 and --max-streams-share 1.1, 11
// streams are admitted and the 12th refused, naming the flag, and Full is
// called for each refused; with the share unknown nothing is capped; the
// floor admits up to itself.
func TestShareCap(t *testing.T) {
	tests := []struct {
		name  string
		fair  float64
		known bool
		floor int
		want  int // streams admitted of 20
	}{
		{"capped", 10, true, 0, 11},
		{"unknown", 10, false, 0, 20},
		{"floor", 10, true, 15, 15},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			var full atomic.Int64
			l, err := limits.New(limits.Config{
				ShareFactor: 1.1, ShareFloor: tt.floor, Registerer: reg,
				FairShare: func() (float64, bool) { return tt.fair, tt.known },
				Full:      func(context.Context) { full.Add(1) },
			})
			if err != nil {
				t.Fatal(err)
			}
			hold := make(chan struct{})
			defer close(hold)
			started := make(chan struct{}, 20)
			errs := make(chan error, 20)
			for range 20 {
				go func() {
					errs <- admitted(l, t.Context(), func() error {
						started <- struct{}{}
						<-hold
						return nil
					})
				}()
			}
			refused := 0
			for admitted := 0; admitted+refused < 20; {
				select {
				case <-started:
					admitted++
				case err := <-errs:
					if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-streams-share") {
						t.Fatalf("refused with %v, want RESOURCE_EXHAUSTED naming --max-streams-share", err)
					}
					refused++
				}
			}
			if got := 20 - refused; got != tt.want {
				t.Errorf("admitted %d of 20, want %d", got, tt.want)
			}
			if got := full.Load(); got != int64(refused) {
				t.Errorf("Full called %d times for %d refused streams", got, refused)
			}
			hits, _ := limits.Hits(reg)
			if got := value(t, hits.WithLabelValues(limits.LimitMaxStreamsShare)); got != float64(20-tt.want) {
				t.Errorf("hits = %v, want %d", got, 20-tt.want)
			}
			if got := gathered(t, reg, "legation_admission_admitted_total"); got != float64(tt.want) {
				t.Errorf("legation_admission_admitted_total = %v, want %d", got, tt.want)
			}
		})
	}
}

// TestFullOnlyLoneConnections: Full (which closes the connection) is
// called for a stream refused by --max-streams on a connection of its
// own, not for one sharing its connection with an admitted stream.
func TestFullOnlyLoneConnections(t *testing.T) {
	var full atomic.Int64
	l, err := limits.New(limits.Config{MaxStreams: 1, Full: func(context.Context) { full.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	tag := func() context.Context {
		return l.StatsHandler().TagConn(t.Context(), &stats.ConnTagInfo{})
	}
	shared := tag()
	hold, started := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- admitted(l, shared, func() error {
			close(started)
			<-hold
			return nil
		})
	}()
	<-started
	noop := func() error { return nil }
	if err := admitted(l, shared, noop); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-streams") {
		t.Fatalf("second stream on the connection: %v, want RESOURCE_EXHAUSTED naming --max-streams", err)
	}
	if got := full.Load(); got != 0 {
		t.Fatalf("Full called %d times for a refused stream whose connection carries an admitted one, want 0", got)
	}
	if err := admitted(l, tag(), noop); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("stream on a second connection: %v, want RESOURCE_EXHAUSTED", err)
	}
	if got := full.Load(); got != 1 {
		t.Fatalf("Full called %d times for a refused stream alone on its connection, want 1", got)
	}
	close(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// gathered is the value of the unlabelled counter name on reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}
