package limits_test

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/limits"
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
	sinfo := &grpc.StreamServerInfo{FullMethod: "/x/Stream"}
	for name, h := range map[string]grpc.StreamHandler{
		"panic":       func(any, grpc.ServerStream) error { panic("stream") },
		"panic error": func(any, grpc.ServerStream) error { return limits.Recovered("receive") },
	} {
		if err := l.RecoverStream()(nil, nil, sinfo, h); status.Code(err) != codes.Internal {
			t.Errorf("%s: %v, want INTERNAL", name, err)
		}
	}
	plain := errors.New("plain")
	if err := l.RecoverStream()(nil, nil, sinfo, func(any, grpc.ServerStream) error { return plain }); err != plain {
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
