package xdstest

import (
	"sync/atomic"
	"testing"
	"time"
)

// The idle-cost property, docs/concepts/design.md's target for connected
// streams with no change (an unchanged stream is never woken) whatever
// its client did: whatever legal requests a client sent, once it only
// answers what it receives, as an Envoy does, the server's responses come
// to an end, bounded by what the client asked and what changed; a
// request that repeats the client's subscriptions (an ACK, a stale nonce)
// is answered by nothing; and once the client sends nothing, the server's
// streams do nothing: no response, no turn of a stream's loop.
// TestIdleCostSotW and TestIdleCostDelta check it with random clients
// (IdleClient) through CheckIdle.

// Turns counts the turns of a server's stream loops: given as the
// server's Config.Busy (xdsstream.Busy), it is told of every turn in
// which a stream does any work. Its methods may be called concurrently.
type Turns struct{ n atomic.Int64 }

// Enter counts a turn. It returns false: nothing to Leave.
func (c *Turns) Enter() bool {
	c.n.Add(1)
	return false
}

// Leave is never called (Enter returns false).
func (c *Turns) Leave() {}

// Load is the number of turns so far.
func (c *Turns) Load() int64 { return c.n.Load() }

// IdleClient is one simulated client of CheckIdle, on a stream of the
// server under test. Its methods are called from the test's goroutine
// and fail the test (tb.Fatal) if its stream ends.
type IdleClient interface {
	// Answer reads the responses that have arrived and answers each
	// as an Envoy does, an ACK or a NACK with its subscriptions
	// unchanged. It returns how many it read.
	Answer() int
	// Probe sends requests that must cost the server no response:
	// ACKs and stale nonces that repeat what the client subscribes to.
	Probe()
	// Asked is what the client's requests may cost: twice the requests
	// it sent before CheckIdle (a request can release a held removal
	// of another type besides its own answer), plus, for each change
	// made meanwhile, two responses per type it subscribes to (a
	// make-before-break removal is held, then sent).
	Asked(changes int) int
	// Received is the number of responses received so far.
	Received() int
}

// idleStill is how long CheckIdle wants the server's streams without a
// turn: longer than any pause of a loop that would go on by itself.
const idleStill = time.Second

// CheckIdle checks the idle-cost property on clients that have sent
// their random requests, changes the changes made meanwhile, and turns
// the server's stream turns. Then:
//   - the clients answer what they receive until nothing comes for
//     ShortTimeout; each may have received at most its Asked responses
//     (a request and response that called for each other forever would
//     go past it);
//   - each Probes, and nothing comes within ShortTimeout;
//   - the stream loops then stop turning within Timeout and stay still
//     for a second, with no response meanwhile.
func CheckIdle(tb testing.TB, clients []IdleClient, changes int, turns *Turns) {
	tb.Helper()
	drain(tb, clients, changes)
	got := 0
	for _, c := range clients {
		got += c.Received()
	}
	tb.Logf("%d clients, %d changes: %d responses", len(clients), changes, got)
	for _, c := range clients {
		c.Probe()
	}
	for end := time.Now().Add(ShortTimeout); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		for i, c := range clients {
			if n := c.Answer(); n > 0 {
				tb.Fatalf("client %d: %d responses to requests that repeat its subscriptions (ACKs, stale nonces)", i, n)
			}
		}
	}
	last, since := turns.Load(), time.Now()
	for deadline := time.Now().Add(Timeout); time.Since(since) < idleStill; time.Sleep(10 * time.Millisecond) {
		for i, c := range clients {
			if n := c.Answer(); n > 0 {
				tb.Fatalf("client %d: %d responses with no request and no change", i, n)
			}
		}
		if n := turns.Load(); n != last {
			last, since = n, time.Now()
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the streams still turn %s after the clients' last request, with nothing changing (%d turns)", Timeout, last)
		}
	}
}

// drain has the clients answer what they receive until nothing comes
// for ShortTimeout, each within what it Asked.
func drain(tb testing.TB, clients []IdleClient, changes int) {
	tb.Helper()
	quiet := time.Now()
	for deadline := time.Now().Add(Timeout); time.Since(quiet) < ShortTimeout; time.Sleep(5 * time.Millisecond) {
		for i, c := range clients {
			if c.Answer() > 0 {
				quiet = time.Now()
			}
			if got, asked := c.Received(), c.Asked(changes); got > asked {
				tb.Fatalf("client %d: %d responses, more than the %d its requests and %d changes may cost", i, got, asked, changes)
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("responses still coming %s after the clients' last request of their own", Timeout)
		}
	}
}
