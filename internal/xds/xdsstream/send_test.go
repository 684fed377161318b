package xdsstream_test

import (
	"errors"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/xds/limits"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// TestSender: sends that return in time give their result, however many
// reuse the Sender; one that blocks past the timeout is reported timed
// out; no bound sends inline.
func TestSender(t *testing.T) {
	s := xdsstream.NewSender(limits.Max(time.Second))
	boom := errors.New("boom")
	for i := range 3 {
		want := error(nil)
		if i == 1 {
			want = boom
		}
		timedOut, err := s.Send(func(any) error { return want }, i)
		if timedOut || !errors.Is(err, want) {
			t.Fatalf("send %d: timed out %v, err %v; want %v", i, timedOut, err, want)
		}
	}
	blocked := make(chan struct{})
	defer close(blocked)
	s = xdsstream.NewSender(limits.Max(50 * time.Millisecond))
	start := time.Now()
	if timedOut, _ := s.Send(func(any) error { <-blocked; return nil }, 0); !timedOut {
		t.Fatal("a send blocked past the timeout was not reported")
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("timed out after %s, before the 50ms timeout", d)
	}
	inline := false
	if timedOut, err := xdsstream.NewSender(limits.NoBound[time.Duration]()).Send(func(any) error { inline = true; return nil }, 0); timedOut || err != nil || !inline {
		t.Errorf("unbounded send: timed out %v, err %v, ran %v", timedOut, err, inline)
	}
}
