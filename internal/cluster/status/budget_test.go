package status_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/cluster/status"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testbase"
)

// TestWriteBudget drives 10,000 nodes served by 3 replicas through 100
// pushes to all (each push changes every node's record) and checks that
// each replica's etcd transactions stay within its budget, counted both
// by the writers' metrics and by etcd's own revision, and that the records
// still end at the last push.
func TestWriteBudget(t *testing.T) {
	const (
		nodes    = 10000
		replicas = 3
		pushes   = 100
		rate     = 20 // --status-write-budget
		interval = 100 * time.Millisecond
		maxOps   = 64
	)
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	const prefix = "/budget/"

	var version atomic.Int64 // the version every node was last pushed
	ids := make([][]string, replicas)
	for i := range nodes {
		ids[i%replicas] = append(ids[i%replicas], fmt.Sprintf("node-%05d", i))
	}
	source := func(ids []string) func() []status.NodeStatus {
		return func() []status.NodeStatus {
			v := fmt.Sprint(version.Load())
			out := make([]status.NodeStatus, len(ids))
			for i, id := range ids {
				out[i] = node(id, v)
			}
			return out
		}
	}

	start, err := c.Get(testbase.Context(t), "/budget-none")
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	ws := make([]*running, replicas)
	for r := range replicas {
		ws[r] = startWriter(t, c, prefix, fmt.Sprintf("r%d", r), func(cfg *status.Config) {
			cfg.Source = status.ListSource(source(ids[r]))
			cfg.Interval = interval
			cfg.MaxTxnsPerSecond = rate
			cfg.MaxOps = maxOps
			cfg.LeaseTTL = 10 * time.Second // a loaded test machine must not lose it
		})
	}
	for p := 1; p <= pushes; p++ {
		version.Store(int64(p))
		time.Sleep(30 * time.Millisecond) // pushes come faster than the budget writes them
	}
	want := fmt.Sprint(pushes)
	eventually(t, "every record at the last push", func() bool {
		time.Sleep(200 * time.Millisecond) // each poll reads 10,000 records
		resp, err := c.Get(testbase.Context(t), status.Dir(prefix), clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != nodes {
			return false
		}
		for _, kv := range resp.Kvs {
			rec, err := status.Decode(string(kv.Key[len(status.Dir(prefix)):]), kv.Value)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Types["cluster"].VersionSent != want {
				return false
			}
		}
		return true
	})
	elapsed := time.Since(began).Seconds()
	end, err := c.Get(testbase.Context(t), "/budget-none")
	if err != nil {
		t.Fatal(err)
	}

	// Spare budget accumulates up to a second's worth, and the first round
	// starts with a full bucket.
	burst := float64(rate)
	limit := burst + rate*elapsed
	var total float64
	for r, w := range ws {
		txns := w.metric("legation_status_txns_total")
		written := w.metric("legation_status_records_written_total")
		coalesced := w.metric("legation_status_updates_coalesced_total")
		t.Logf("replica %d: %d nodes, %.0f txns, %.0f records written, %.0f updates coalesced in %.1fs (budget %.0f txns)",
			r, len(ids[r]), txns, written, coalesced, elapsed, limit)
		if txns > limit {
			t.Errorf("replica %d: %.0f txns in %.1fs, over the budget of %.0f", r, txns, elapsed, limit)
		}
		if written > txns*maxOps {
			t.Errorf("replica %d: %.0f records in %.0f txns, more than %d a txn", r, written, txns, maxOps)
		}
		if unbudgeted := float64(len(ids[r]) * pushes); written >= unbudgeted/10 {
			t.Errorf("replica %d: %.0f records written, not far below the %.0f of writing every push", r, written, unbudgeted)
		}
		if coalesced == 0 {
			t.Errorf("replica %d: no update coalesced", r)
		}
		if got := w.metric("legation_status_write_budget_txns_per_second"); got != rate {
			t.Errorf("replica %d: budget gauge %v, want %d", r, got, rate)
		}
		total += txns
	}
	// Every transaction is one etcd revision (leases are not): etcd's own
	// count agrees with the writers'.
	revs := float64(end.Header.Revision - start.Header.Revision)
	if revs > total {
		t.Errorf("etcd revision moved by %.0f, more than the %.0f txns the writers counted", revs, total)
	}
	if revs > replicas*limit {
		t.Errorf("etcd revision moved by %.0f in %.1fs, over the 3 replicas' budget of %.0f", revs, elapsed, replicas*limit)
	}
}

// TestWriteBudgetReachesEveryNode: with every node changing on every round
// and a budget of 4 transactions of two records a second, each round
// writes the nodes after those the last one wrote, so every node's record
// is written in turn rather than the first two's again and again.
func TestWriteBudgetReachesEveryNode(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	const prefix = "/turn/"
	var calls atomic.Int64
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}
	w := startWriter(t, c, prefix, "r", func(cfg *status.Config) {
		cfg.Source = status.ListSource(func() []status.NodeStatus {
			v := fmt.Sprint(calls.Add(1)) // every node changes every round
			out := make([]status.NodeStatus, len(ids))
			for i, id := range ids {
				out[i] = node(id, v)
			}
			return out
		})
		cfg.Interval = 50 * time.Millisecond
		cfg.MaxTxnsPerSecond = 4 // 4 transactions at first, then one each 250ms
		cfg.MaxOps = 2
	})
	eventually(t, "a record for every node", func() bool { return len(readStored(t, c, prefix)) == len(ids) })
	if got := w.metric("legation_status_updates_coalesced_total"); got == 0 {
		t.Error("no update coalesced")
	}
}
