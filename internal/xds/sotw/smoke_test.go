package sotw_test

import (
	"sync/atomic"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/sotw"
)

func TestSmokeWildcardCDS(t *testing.T) {
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("a", 1)), xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("b", 1))})
	s := e.adsStream(t)
	s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", "c1"), TypeUrl: resource.Cluster.URL})
	resp := s.Expect()
	if got := xdstest.Names(t, resp); len(got) != 2 || resp.GetVersionInfo() != xdstest.Version(r1) {
		t.Fatalf("got %v at %s, want [a b] at %d", got, resp.GetVersionInfo(), r1)
	}
	s.Ack(resp)
	s.ExpectNone()
	r2 := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("a", 2))})
	resp = s.Expect()
	if got := xdstest.Names(t, resp); len(got) != 2 || resp.GetVersionInfo() != xdstest.Version(r2) {
		t.Fatalf("got %v at %s, want [a b] at %d", got, resp.GetVersionInfo(), r2)
	}
}

// TestStreamsCountBusy: a stream counts itself busy (Config.Busy) while it
// handles a request or a push, and not once it is done or has ended,
// whether the client closed it or the server ended it with an error.
func TestStreamsCountBusy(t *testing.T) {
	busy := &busyCounter{}
	e := newEnv(t, func(c *sotw.Config) { c.Busy = busy })
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("a", 1))})
	settled := func(what string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for busy.Count() != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d streams still counted busy", what, busy.Count())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	counted := func(what string, since time.Time) {
		t.Helper()
		if !busy.Last().After(since) {
			t.Errorf("%s: no stream was counted busy since %s (last done %s)", what, since, busy.Last())
		}
	}
	s := e.adsStream(t)
	start := time.Now()
	s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", "c1"), TypeUrl: resource.Cluster.URL})
	resp := s.Expect()
	settled("after a request")
	counted("a request", start)
	acked := time.Now()
	s.Ack(resp)
	s.ExpectNone()
	settled("after an ACK")
	counted("an ACK", acked)
	pushed := time.Now()
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("a", 2))})
	resp = s.Expect()
	settled("after a push")
	counted("a push", pushed)
	s.Ack(resp)
	s.ExpectNone()
	s.Cancel()
	settled("after the client cancelled its stream")
	bad := e.adsStream(t)
	bad.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n2", "c1"), TypeUrl: "type.googleapis.com/no.such.Type"})
	if err := bad.ExpectErr(); err == nil {
		t.Fatal("a request of an unknown type did not end the stream")
	}
	settled("after a stream ended in error")
}

// busyCounter is an xdsstream.Busy that counts the streams busy now and
// keeps when the last one was done.
type busyCounter struct {
	n    atomic.Int64
	last atomic.Int64 // unix nanoseconds of the last Leave
}

func (b *busyCounter) Enter() bool { b.n.Add(1); return true }

func (b *busyCounter) Leave() {
	b.last.Store(time.Now().UnixNano())
	b.n.Add(-1)
}

func (b *busyCounter) Count() int64 { return b.n.Load() }

func (b *busyCounter) Last() time.Time { return time.Unix(0, b.last.Load()) }
