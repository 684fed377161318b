package testbase

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// LockedBuffer is a bytes.Buffer many goroutines may write to while a test
// reads it: the destination of a logger under test. The zero value is
// ready. Its methods may be called concurrently.
type LockedBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

// Write appends p to the buffer.
func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Count returns how many lines written so far hold every one of subs.
func (b *LockedBuffer) Count(subs ...string) int {
	n := 0
	for line := range strings.Lines(b.String()) {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(line, s)
		}
		if all {
			n++
		}
	}
	return n
}

// Logger returns a debug-level text logger whose lines are kept and
// printed to tb's log if tb fails. Lines written after tb ends (goroutines
// winding down) go to the buffer only.
func Logger(tb testing.TB) *slog.Logger {
	var b LockedBuffer
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("logs:\n%s", b.String())
		}
	})
	return LoggerTo(&b)
}

// LoggerTo returns a debug-level text logger that writes to w (a
// LockedBuffer the test reads, usually).
func LoggerTo(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// LogWriter returns a writer that puts each write, its final newline
// trimmed, on tb's log as it comes: the destination of a logger whose
// lines a test shows whether it passes or fails. Nothing may write to it
// after tb ends.
func LogWriter(tb testing.TB) io.Writer {
	return logWriter{tb}
}

type logWriter struct{ tb testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
