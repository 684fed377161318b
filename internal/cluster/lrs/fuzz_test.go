package lrs_test

import (
	"testing"
	"time"

	loadv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/legation-io/legation/internal/cluster/lrs"
	"github.com/legation-io/legation/internal/state/keyspace"
)

// FuzzAccept feeds Accept load reports as a client might send them: it
// must never panic, the window it fills stays within its bounds, and the
// window encodes and decodes back the same.
func FuzzAccept(f *testing.F) {
	for _, r := range []*loadv3.LoadStatsRequest{
		report("c1", time.Second, localityStats("z1", 10, 8, 2, 1)),
		report("c1", -time.Second),
		report("", time.Hour+1),
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req loadv3.LoadStatsRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		s, err := lrs.New(lrs.Config{Replica: "r", Registerer: prometheus.NewRegistry(), MaxLocalities: 5, MaxClusters: 5})
		if err != nil {
			t.Fatal(err)
		}
		s.SetNow(func() time.Time { return t0 })
		s.Accept(lrs.Reporter{Node: "n1"}, &req)
		for _, w := range s.Closed(t0.Add(time.Hour)) {
			if len(w.Rows) > 5*6 {
				t.Fatalf("%d rows from one report of at most 5 clusters of 5 localities", len(w.Rows))
			}
			v, err := lrs.Encode(w)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			back, err := lrs.Decode(keyspace.DefaultPrefix, lrs.Key(keyspace.DefaultPrefix, "r", w.Start), v)
			if err != nil {
				t.Fatalf("Decode of an encoded window: %v\n%s", err, v)
			}
			if diff := cmp.Diff(w, back, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
				t.Fatalf("round trip (-first +second):\n%s", diff)
			}
		}
	})
}

// FuzzDecodeWindow feeds Decode values as another tool might have written
// them: it must never panic, and what it accepts encodes again within
// MaxWindowBytes.
func FuzzDecodeWindow(f *testing.F) {
	f.Add([]byte(`{"replica":"a","start":"2026-01-02T03:04:10Z","end":"2026-01-02T03:04:11Z","rows":[{"cluster":"c","node":"n","issued":1}]}`))
	f.Add([]byte(`{"replica":"a","start":"2026-01-02T03:04:10Z","end":"2026-01-02T03:04:09Z"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, v []byte) {
		w, err := lrs.Decode(keyspace.DefaultPrefix, lrs.Key(keyspace.DefaultPrefix, "a", t0), v)
		if err != nil {
			return
		}
		if w.Replica != "a" || !w.End.After(w.Start) {
			t.Fatalf("Decode accepted %+v", w)
		}
		lrs.Summarize([]lrs.Window{w}, "", lrs.ByLocality, 1, time.Time{})
		// A time past year 9999 decodes but does not encode; a replica
		// never makes one. Otherwise it encodes, within its bound.
		if b, err := lrs.EncodeBounded(w); err == nil && len(b) > lrs.MaxWindowBytes && len(w.Rows) > 0 {
			t.Fatalf("EncodeBounded: %d bytes", len(b))
		}
	})
}
