package xdsstream

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/xds/limits"
)

func TestEndErr(t *testing.T) {
	boom := status.Error(codes.Internal, "boom")
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"client closed", io.EOF, nil},
		{"client cancelled", status.Error(codes.Canceled, "bye"), nil},
		{"other", boom, boom},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := EndErr(tc.err); !errors.Is(got, tc.want) || (tc.want == nil) != (got == nil) {
				t.Fatalf("EndErr(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestRegistry(t *testing.T) {
	var r Registry[string]
	removeB := r.Add(2, "b")
	r.Add(1, "a")
	r.Add(3, "c")
	removeB()
	got := Each(&r, func(s string) string { return s })
	if diff := cmp.Diff([]string{"a", "c"}, got); diff != "" {
		t.Fatalf("Each (-want +got):\n%s", diff)
	}
}

func TestReceive(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	recv := func(m any) error {
		if n == 2 {
			return io.EOF
		}
		n++
		*m.(*int) = n
		return nil
	}
	c := Receive[int](ctx, recv)
	if a, b := *(<-c).Msg, *(<-c).Msg; a != 1 || b != 2 {
		t.Fatalf("got %d, %d; want 1, 2", a, b)
	}
	if err := (<-c).Err; !errors.Is(err, io.EOF) {
		t.Fatalf("error %v, want EOF", err)
	}
}

// TestReceivePanic: a panic in recv ends the receive goroutine with a
// *limits.PanicError as the receive error, not the process.
func TestReceivePanic(t *testing.T) {
	c := Receive[int](t.Context(), func(any) error { panic("decode") })
	var p *limits.PanicError
	if err := (<-c).Err; !errors.As(err, &p) || p.Value != "decode" || len(p.Stack) == 0 {
		t.Fatalf("receive error %v, want a *limits.PanicError of \"decode\" with a stack", err)
	}
}
