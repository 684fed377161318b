package testbase_test

import (
	"context"
	"errors"
	"fmt"
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
