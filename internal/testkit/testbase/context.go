package testbase

import (
	"context"
	"testing"
	"time"
)

// Timeout is the default bound of what a test waits for: long enough for a
// loaded machine, short enough that a hang fails the test, not the binary.
const Timeout = 20 * time.Second

// Context returns a context that ends after Timeout or when tb ends,
// whichever comes first.
func Context(tb testing.TB) context.Context {
	return ContextWithin(tb, Timeout)
}

// ContextWithin returns a context that ends after d or when tb ends,
// whichever comes first. It is not tb.Context(): it lives on through tb's
// cleanups, which may still need it.
func ContextWithin(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}
