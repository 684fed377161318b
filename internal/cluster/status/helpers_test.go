package status_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/cluster/status"
	"github.com/legation-io/legation/internal/testkit/testbase"
)

// testLeaseTTL is the shortest lease etcd grants with its default
// election timeout.
const testLeaseTTL = 2 * time.Second

// source is what a Writer reads: set by the test, read by the writer.
type source struct {
	mu   sync.Mutex
	recs []status.NodeStatus
}

func (s *source) set(recs ...status.NodeStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = slices.Clone(recs)
}

func (s *source) get() []status.NodeStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.recs)
}

// running is a Writer whose Run goroutine the test owns.
type running struct {
	t    *testing.T
	w    *status.Writer
	reg  *prometheus.Registry
	src  *source
	stop context.CancelFunc
	done chan error // Run's result
}

// startWriter runs a writer for replica under prefix. Its Interval is an
// hour unless mod changes it: tests drive it with Sync. It is stopped
// (gracefully) when the test ends, unless the test stops it first.
func startWriter(t *testing.T, c *clientv3.Client, prefix, replica string, mod func(*status.Config)) *running {
	t.Helper()
	src := &source{}
	reg := prometheus.NewRegistry()
	cfg := status.DefaultConfig()
	cfg.Client = c
	cfg.Prefix = prefix
	cfg.Replica = replica
	cfg.Source = status.ListSource(src.get)
	cfg.Interval = time.Hour
	cfg.ResyncInterval = time.Hour
	cfg.LeaseTTL = testLeaseTTL
	cfg.Logger = testbase.Logger(t).With("writer", replica)
	cfg.Registerer = reg
	if mod != nil {
		mod(&cfg)
	}
	w, err := status.NewWriter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{t: t, w: w, reg: reg, src: src, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-r.done; err != nil {
			t.Errorf("writer Run: %v", err)
		}
	})
	return r
}

// sync makes the writer write now, and fails the test if it cannot.
func (r *running) sync() {
	r.t.Helper()
	if err := r.w.Sync(testbase.Context(r.t)); err != nil {
		r.t.Fatalf("Sync: %v", err)
	}
}

// halt stops the writer as a graceful shutdown does and returns Run's
// error.
func (r *running) halt() error {
	r.t.Helper()
	r.stop()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(testbase.Timeout):
		r.t.Fatal("Run did not return after its context ended")
		return nil
	}
}

// crash stops a writer whose etcd connection was closed under it: Run's
// revoke of the lease may fail or not, depending on when it notices (a
// crash revokes nothing), so its error is dropped, the cleanup's too.
func (r *running) crash() {
	r.t.Helper()
	if err := r.halt(); err != nil {
		r.t.Logf("Run after the crash: %v", err)
		r.done = make(chan error, 1) // the cleanup reads nil
		r.done <- nil
	}
}

// metric returns the value of the writer's counter or gauge called name.
func (r *running) metric(name string) float64 {
	r.t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		r.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			return c.GetValue()
		}
		return m.GetGauge().GetValue()
	}
	r.t.Fatalf("no metric %s", name)
	return 0
}

// stored is a record as etcd holds it.
type stored struct {
	rec   status.NodeStatus
	lease int64
}

// readStored returns the records under prefix by node id, with their
// leases.
func readStored(t *testing.T, c *clientv3.Client, prefix string) map[string]stored {
	t.Helper()
	resp, err := c.Get(testbase.Context(t), status.Dir(prefix), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]stored{}
	for _, kv := range resp.Kvs {
		id := string(kv.Key[len(status.Dir(prefix)):])
		rec, err := status.Decode(id, kv.Value)
		if err != nil {
			t.Fatalf("record %s: %v", kv.Key, err)
		}
		out[id] = stored{rec: rec, lease: kv.Lease}
	}
	return out
}

// eventually polls cond until it holds, or fails the test after the
// timeout.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testbase.Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// node returns a record of id with one cluster type at version v.
func node(id, v string) status.NodeStatus {
	return status.NodeStatus{
		NodeID: id, Group: "edge", Protocols: []string{"sotw-ads"}, Streams: 1,
		ConnectedSince: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Types:          map[string]status.TypeStatus{"cluster": {VersionSent: v, VersionAcked: v, Resources: 3}},
	}
}
