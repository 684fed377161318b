package testbase_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/testkit/testbase"
)

func TestLockedBufferConcurrentWrites(t *testing.T) {
	var b testbase.LockedBuffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { fmt.Fprintf(&b, "level=INFO writer=%d\n", i) })
	}
	wg.Wait()
	if got := b.Count("level=INFO"); got != 8 {
		t.Errorf("Count(level=INFO) = %d, want 8", got)
	}
	if got := b.Count("level=INFO", "writer=3"); got != 1 {
		t.Errorf("Count(level=INFO, writer=3) = %d, want 1", got)
	}
}

func TestContextWithinEnds(t *testing.T) {
	ctx := testbase.ContextWithin(t, time.Millisecond)
	select {
	case <-ctx.Done():
	case <-time.After(testbase.Timeout):
		t.Fatal("context did not end after its timeout")
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("ctx.Err() = %v, want DeadlineExceeded", ctx.Err())
	}
	if _, ok := testbase.Context(t).Deadline(); !ok {
		t.Error("Context has no deadline")
	}
}

func TestLoggerTo(t *testing.T) {
	var b testbase.LockedBuffer
	testbase.LoggerTo(&b).Debug("hello", "k", "v")
	if got := b.Count("level=DEBUG", "msg=hello", "k=v"); got != 1 {
		t.Errorf("debug line written %d times, want 1: %q", got, b.String())
	}
	testbase.Logger(t).Info("kept unless the test fails")
	fmt.Fprintln(testbase.LogWriter(t), "a line on the test log")
}

func TestFreeAddrs(t *testing.T) {
	addrs := testbase.FreeAddrs(t, 3)
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a] {
			t.Errorf("FreeAddrs gave %s twice: %v", a, addrs)
		}
		seen[a] = true
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Errorf("%s is not free: %v", a, err)
			continue
		}
		l.Close()
	}
}
