package status_test

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/cluster/status"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testbase"
)

func TestConfigValidate(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	good := func() status.Config {
		c := status.DefaultConfig()
		c.Client = e.Client(t)
		c.Prefix = "/legation/"
		c.Replica = "a"
		c.Source = status.ListSource(func() []status.NodeStatus { return nil })
		return c
	}
	if err := good().Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	zero := good()
	zero.Interval, zero.ResyncInterval, zero.MaxOps, zero.LeaseTTL, zero.MaxTxnsPerSecond = 0, 0, 0, 0, 0
	if err := zero.Validate(); err != nil {
		t.Fatalf("zero fields stand for the defaults: %v", err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*status.Config)
		want string
	}{
		{"no client", func(c *status.Config) { c.Client = nil }, "Client"},
		{"prefix", func(c *status.Config) { c.Prefix = "legation" }, "Prefix"},
		{"no replica", func(c *status.Config) { c.Replica = "" }, "Replica"},
		{"no source", func(c *status.Config) { c.Source = nil }, "Source"},
		{"negative interval", func(c *status.Config) { c.Interval = -time.Second }, "Interval"},
		{"resync below interval", func(c *status.Config) { c.Interval, c.ResyncInterval = time.Minute, time.Second }, "ResyncInterval"},
		{"max ops", func(c *status.Config) { c.MaxOps = -1 }, "MaxOps"},
		{"negative budget", func(c *status.Config) { c.MaxTxnsPerSecond = -1 }, "MaxTxnsPerSecond"},
		{"infinite budget", func(c *status.Config) { c.MaxTxnsPerSecond = math.Inf(1) }, "MaxTxnsPerSecond"},
		{"lease ttl", func(c *status.Config) { c.LeaseTTL = 100 * time.Millisecond }, "LeaseTTL"},
		{"rejected applies", func(c *status.Config) { c.RejectedApplies = -1 }, "RejectedApplies"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good()
			tc.mod(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error naming %s", err, tc.want)
			}
			if _, err := status.NewWriter(c); err == nil {
				t.Fatal("NewWriter accepted the config")
			}
		})
	}
}

func TestWriter(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	seq := 0
	newPrefix := func() string { seq++; return fmt.Sprintf("/w%d/", seq) }

	t.Run("writes only what changed", func(t *testing.T) {
		prefix := newPrefix()
		w := startWriter(t, c, prefix, "a", nil)
		a, b, slash := node("a", "5"), node("b", "5"), node("ns/pod-1", "5")
		w.src.set(a, b, slash)
		w.sync()
		got := readStored(t, c, prefix)
		if len(got) != 3 {
			t.Fatalf("stored %d records, want 3: %v", len(got), got)
		}
		for _, want := range []status.NodeStatus{a, b, slash} {
			want.Home = "a"
			if diff := cmp.Diff(want, got[want.NodeID].rec); diff != "" {
				t.Errorf("record of %s (-want +got):\n%s", want.NodeID, diff)
			}
			if got[want.NodeID].lease == 0 {
				t.Errorf("record of %s has no lease", want.NodeID)
			}
		}
		if n := w.metric("legation_status_records_written_total"); n != 3 {
			t.Errorf("written = %v, want 3", n)
		}
		if n := w.metric("legation_status_records"); n != 3 {
			t.Errorf("held = %v, want 3", n)
		}

		w.sync() // nothing changed
		if n := w.metric("legation_status_records_written_total"); n != 3 {
			t.Errorf("written after an unchanged round = %v, want 3", n)
		}

		b2 := node("b", "6")
		b2.Types["cluster"] = status.TypeStatus{VersionSent: "6", VersionAcked: "5", Resources: 3}
		w.src.set(a, b2, slash)
		w.sync()
		if n := w.metric("legation_status_records_written_total"); n != 4 {
			t.Errorf("written after one change = %v, want 4", n)
		}
		if got := readStored(t, c, prefix)["b"].rec.Types["cluster"].VersionSent; got != "6" {
			t.Errorf("b's cluster version_sent = %q, want 6", got)
		}
		if n := w.metric("legation_status_written_bytes_total"); n <= 0 {
			t.Errorf("written bytes = %v", n)
		}
	})

	t.Run("deletes the records of nodes that left", func(t *testing.T) {
		prefix := newPrefix()
		w := startWriter(t, c, prefix, "a", nil)
		w.src.set(node("a", "1"), node("b", "1"))
		w.sync()
		w.src.set(node("b", "1"))
		w.sync()
		got := readStored(t, c, prefix)
		if _, ok := got["a"]; ok || len(got) != 1 {
			t.Fatalf("records after a left: %v", got)
		}
		if n := w.metric("legation_status_records_deleted_total"); n != 1 {
			t.Errorf("deleted = %v, want 1", n)
		}
		if n := w.metric("legation_status_records"); n != 1 {
			t.Errorf("held = %v, want 1", n)
		}
	})

	t.Run("leaves a record another replica took over", func(t *testing.T) {
		prefix := newPrefix()
		wa := startWriter(t, c, prefix, "a", nil)
		wb := startWriter(t, c, prefix, "b", nil)
		wa.src.set(node("n1", "1"))
		wa.sync()
		// n1 moves to b; a has not noticed yet.
		wb.src.set(node("n1", "1"))
		wb.sync()
		wa.src.set()
		wa.sync()
		if got := readStored(t, c, prefix)["n1"].rec.Home; got != "b" {
			t.Fatalf("n1's home after a let go = %q, want b", got)
		}
		if n := wa.metric("legation_status_records_taken_over_total"); n != 1 {
			t.Errorf("a's taken over = %v, want 1", n)
		}
		if n := wa.metric("legation_status_records_deleted_total"); n != 0 {
			t.Errorf("a's deleted = %v, want 0", n)
		}

		// a still holds a stream of n1 for a moment, writes over b's record,
		// then deletes it: b's check finds its record gone and writes it
		// again.
		wa.src.set(node("n1", "2"))
		wa.sync()
		wa.src.set()
		wa.sync()
		if _, ok := readStored(t, c, prefix)["n1"]; ok {
			t.Fatal("a did not delete its own record")
		}
		wb.sync()
		if got := readStored(t, c, prefix)["n1"].rec.Home; got != "b" {
			t.Fatalf("n1's home after b's check = %q, want b", got)
		}
		if n := wb.metric("legation_status_records_taken_over_total"); n != 1 {
			t.Errorf("b's taken over = %v, want 1", n)
		}
	})

	t.Run("graceful stop deletes the records", func(t *testing.T) {
		prefix := newPrefix()
		w := startWriter(t, c, prefix, "a", nil)
		w.src.set(node("a", "1"), node("b", "1"))
		w.sync()
		if err := w.halt(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if got := readStored(t, c, prefix); len(got) != 0 {
			t.Fatalf("records after a graceful stop: %v", got)
		}
		if err := w.w.Sync(testbase.Context(t)); err == nil {
			t.Error("Sync on a stopped writer succeeded")
		}
	})

	t.Run("a crash leaves the records until the lease expires", func(t *testing.T) {
		prefix := newPrefix()
		own := e.Client(t) // the crashed process's connection
		w := startWriter(t, own, prefix, "a", nil)
		w.src.set(node("a", "1"))
		w.sync()
		// A crash: the connection goes, nothing is revoked.
		own.Close()
		w.crash()
		if got := readStored(t, c, prefix); len(got) != 1 {
			t.Fatalf("records right after the crash: %v", got)
		}
		crashed := time.Now()
		eventually(t, "the record to expire with the lease", func() bool {
			return len(readStored(t, c, prefix)) == 0
		})
		if d := time.Since(crashed); d > testLeaseTTL+3*time.Second {
			t.Errorf("the record lasted %s after the crash, lease TTL %s", d, testLeaseTTL)
		}
	})

	t.Run("transactions of at most MaxOps", func(t *testing.T) {
		prefix := newPrefix()
		w := startWriter(t, c, prefix, "a", func(c *status.Config) { c.MaxOps = 64 })
		var recs []status.NodeStatus
		for i := range 200 {
			recs = append(recs, node(fmt.Sprintf("node-%03d", i), "1"))
		}
		w.src.set(recs...)
		w.sync()
		if n := w.metric("legation_status_txns_total"); n != 4 {
			t.Errorf("transactions for 200 puts = %v, want 4", n)
		}
		if n := len(readStored(t, c, prefix)); n != 200 {
			t.Errorf("stored %d records, want 200", n)
		}
		w.src.set()
		w.sync()
		// Deletes go 63 to a transaction (see Config.MaxOps): 4 more.
		if n := w.metric("legation_status_txns_total"); n != 8 {
			t.Errorf("transactions after 200 deletes = %v, want 8", n)
		}
		if n := len(readStored(t, c, prefix)); n != 0 {
			t.Errorf("stored %d records after the deletes, want 0", n)
		}
	})

	t.Run("a lost lease is replaced and every record written again", func(t *testing.T) {
		prefix := newPrefix()
		// A real interval: no Sync drives this one.
		w := startWriter(t, c, prefix, "a", func(c *status.Config) { c.Interval = 50 * time.Millisecond })
		w.src.set(node("a", "1"), node("b", "1"))
		eventually(t, "the records", func() bool { return len(readStored(t, c, prefix)) == 2 })
		old := readStored(t, c, prefix)["a"].lease
		if _, err := c.Revoke(testbase.Context(t), clientv3.LeaseID(old)); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the records under a new lease", func() bool {
			got := readStored(t, c, prefix)
			return len(got) == 2 && got["a"].lease != old && got["a"].lease == got["b"].lease
		})
		if n := w.metric("legation_status_lease_lost_total"); n != 1 {
			t.Errorf("lease lost = %v, want 1", n)
		}
	})

	t.Run("never writes outside its directory", func(t *testing.T) {
		prefix := newPrefix()
		w := startWriter(t, c, prefix, "a", nil)
		w.src.set(node("../resources/cluster/default/x", "1"), node("", "1"))
		w.sync()
		resp, err := c.Get(testbase.Context(t), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 || !strings.HasPrefix(string(resp.Kvs[0].Key), prefix+"status/") {
			t.Fatalf("keys written: %v", resp.Kvs)
		}
	})
}

// TestWriterGeneration: with Config.Generation, a round at the generation
// of the last complete round reads nothing (Source is not called); a new
// generation reads and writes what changed.
func TestWriterGeneration(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	var gen, reads atomic.Uint64
	w := startWriter(t, c, "/gen/", "a", func(cfg *status.Config) {
		cfg.Generation = gen.Load
		cfg.Source = countedSource{Source: cfg.Source, stamps: &reads}
	})
	src := w.src
	src.set(node("a", "1"))
	w.sync()
	r0 := reads.Load()
	for range 3 {
		w.sync()
	}
	if got := reads.Load() - r0; got != 0 {
		t.Fatalf("Source read %d times in 3 rounds at an unchanged generation, want 0", got)
	}
	src.set(node("a", "2"))
	gen.Add(1)
	w.sync()
	if got := reads.Load() - r0; got != 1 {
		t.Fatalf("Source read %d times after the generation moved, want 1", got)
	}
	if got := readStored(t, c, "/gen/")["a"].rec.Types["cluster"].VersionSent; got != "2" {
		t.Errorf("stored version %q after the change, want 2", got)
	}
}

// countedSource counts the rounds that read a Source's stamps.
type countedSource struct {
	status.Source
	stamps *atomic.Uint64
}

func (c countedSource) Stamps(fn func(node string, stream, changes uint64)) {
	c.stamps.Add(1)
	c.Source.Stamps(fn)
}

// stampedSource is a Source of nodes with one stream each, whose change
// counts the test sets; it counts the records it builds.
type stampedSource struct {
	mu      sync.Mutex
	changes map[string]uint64
	built   int
}

func (s *stampedSource) bump(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		s.changes[id]++
	}
}

func (s *stampedSource) Stamps(fn func(node string, stream, changes uint64)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, n := range s.changes {
		fn(id, 1, n)
	}
}

func (s *stampedSource) Records(want func(string) bool) []status.NodeStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []status.NodeStatus
	for id, n := range s.changes {
		if want(id) {
			s.built++
			out = append(out, node(id, fmt.Sprint(n)))
		}
	}
	return out
}

func (s *stampedSource) takeBuilt() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.built
	s.built = 0
	return n
}

// TestWriterBuildsOnlyWhatMoved: a round builds the records of the nodes
// whose stamps moved, no others; and of those, no more than its budget
// lets it write (10,000 streams changing every second must not cost
// 10,000 records a second to write 1,280).
func TestWriterBuildsOnlyWhatMoved(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	nodes := func() *stampedSource {
		src := &stampedSource{changes: map[string]uint64{}}
		for i := range 100 {
			src.changes[fmt.Sprintf("n%03d", i)] = 1
		}
		return src
	}

	src := nodes()
	w := startWriter(t, c, "/moved/", "a", func(cfg *status.Config) { cfg.Source = src })
	w.sync()
	if got := src.takeBuilt(); got != 100 {
		t.Fatalf("first round built %d records, want 100", got)
	}
	src.bump("n007", "n042", "n099")
	w.sync()
	if got := src.takeBuilt(); got != 3 {
		t.Errorf("a round after 3 nodes changed built %d records, want 3", got)
	}
	stored := readStored(t, c, "/moved/")
	if len(stored) != 100 {
		t.Errorf("%d records stored, want 100", len(stored))
	}
	for _, id := range []string{"n007", "n042", "n099"} {
		if got := stored[id].rec.Types["cluster"].VersionSent; got != "2" {
			t.Errorf("%s stored at version %q, want 2", id, got)
		}
	}
	w.sync()
	if got := src.takeBuilt(); got != 0 {
		t.Errorf("a round with nothing changed built %d records, want 0", got)
	}

	// A budget of 2 transactions of 10 records (refilled at 2 an hour).
	tight := nodes()
	w = startWriter(t, c, "/tight/", "a", func(cfg *status.Config) {
		cfg.Source = tight
		cfg.MaxOps = 10
		cfg.MaxTxnsPerSecond = 2.0 / 3600
	})
	w.sync()
	if got := tight.takeBuilt(); got != 20 {
		t.Errorf("a round with a budget of 20 records built %d, want 20", got)
	}
	if got := len(readStored(t, c, "/tight/")); got != 20 {
		t.Errorf("%d records stored, want 20", got)
	}
	w.sync()
	if got := tight.takeBuilt(); got != 0 {
		t.Errorf("a round with the budget spent built %d records, want 0", got)
	}
}

// TestWriterCheckReadsOnlyWhenChanged: a check reads the whole status
// directory only when a key there was written or deleted since the last
// full read; otherwise two small reads say that every record is still as
// written. A record another writer wrote over or deleted is still found
// and written again.
func TestWriterCheckReadsOnlyWhenChanged(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	const prefix = "/check/"
	w := startWriter(t, c, prefix, "a", nil)
	w.src.set(node("n1", "1"), node("n2", "1"), node("n3", "1"))
	w.sync()
	reads := w.w.FullReads()
	if reads != 1 {
		t.Fatalf("full reads after the first check = %d, want 1", reads)
	}
	for range 3 {
		w.sync()
	}
	if n := w.w.FullReads(); n != reads {
		t.Fatalf("full reads after 3 checks of an unchanged directory = %d, want %d", n, reads)
	}
	step := func(what string, do func(), wantTaken float64, rewrote bool) {
		t.Helper()
		do()
		w.sync() // the check finds the change, the round writes again
		if n := w.w.FullReads(); n != reads+1 {
			t.Errorf("%s: full reads = %d, want %d", what, n, reads+1)
		}
		reads = w.w.FullReads()
		if n := w.metric("legation_status_records_taken_over_total"); n != wantTaken {
			t.Errorf("%s: taken over = %v, want %v", what, n, wantTaken)
		}
		if got := readStored(t, c, prefix); got["n1"].rec.Home != "a" || got["n2"].rec.Home != "a" || got["n3"].rec.Home != "a" {
			t.Errorf("%s: records after the check = %v, want n1, n2 and n3 of a", what, got)
		}
		// What the round wrote again is read once more, then nothing.
		want := reads
		if rewrote {
			want++
		}
		w.sync()
		w.sync()
		if n := w.w.FullReads(); n != want {
			t.Errorf("%s: full reads in two more checks = %d, want %d", what, n-reads, want-reads)
		}
		reads = w.w.FullReads()
	}
	ctx := testbase.Context(t)
	step("a record deleted", func() {
		if _, err := c.Delete(ctx, status.Dir(prefix)+"n1"); err != nil {
			t.Fatal(err)
		}
	}, 1, true)
	step("a record written over", func() {
		if _, err := c.Put(ctx, status.Dir(prefix)+"n2", "{}"); err != nil {
			t.Fatal(err)
		}
	}, 2, true)
	wb := startWriter(t, c, prefix, "b", nil)
	step("another replica's record written", func() {
		wb.src.set(node("other", "1"))
		wb.sync()
	}, 2, false)
	step("another replica's record deleted", func() {
		wb.src.set()
		wb.sync()
	}, 2, false)
}
