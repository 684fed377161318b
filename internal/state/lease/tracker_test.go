package lease_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/legation-io/legation/internal/state/lease"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// TestMain checks that no test of the package leaves a goroutine behind:
// every test ends its trackers' Run, its etcd and its clients.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	// testTimeout bounds what must happen; testShortTimeout is how long
	// to wait for what must not.
	testTimeout      = 20 * time.Second
	testShortTimeout = 500 * time.Millisecond
)

// tracker is a Tracker on c under prefix, with its own registry.
type tracker struct {
	*lease.Tracker
	reg *prometheus.Registry
	// done is closed when Run returned (nil if it was not started).
	done chan struct{}
}

func newTracker(t *testing.T, c *clientv3.Client, prefix string) *tracker {
	t.Helper()
	reg := prometheus.NewRegistry()
	tr, err := lease.New(lease.Config{Client: c, Prefix: prefix, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return &tracker{Tracker: tr, reg: reg}
}

// run runs the tracker's Run until the test ends.
func (tr *tracker) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tr.done = make(chan struct{})
	go func() {
		defer close(tr.done)
		if err := tr.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-tr.done:
		case <-time.After(testTimeout):
			t.Errorf("Run did not return %s after its ctx ended", testTimeout)
		}
	})
}

// metric is the value of the counter or gauge name, 0 if it has none.
func (tr *tracker) metric(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := tr.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		m := mf.GetMetric()[0]
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	return 0
}

// info is the tracker's Info for lease id.
func (tr *tracker) info(t *testing.T, id int64) lease.Info {
	t.Helper()
	for _, i := range tr.Tracked() {
		if i.ID == id {
			return i
		}
	}
	t.Fatalf("lease %x is not tracked: %+v", id, tr.Tracked())
	return lease.Info{}
}

// granted is a lease granted by the test, and when: etcd started its TTL
// between before and after.
type granted struct {
	id            int64
	ttl           time.Duration
	before, after time.Time
}

func grant(t *testing.T, c *clientv3.Client, seconds int64) granted {
	t.Helper()
	before := time.Now()
	resp, err := c.Grant(testbase.Context(t), seconds)
	if err != nil {
		t.Fatal(err)
	}
	if resp.TTL != seconds {
		t.Fatalf("etcd granted %ds, want %ds", resp.TTL, seconds)
	}
	return granted{id: int64(resp.ID), ttl: time.Duration(seconds) * time.Second, before: before, after: time.Now()}
}

// entry is what a stream holds of a resource written under g: the envelope's
// written_at was taken before the lease was granted.
func (g granted) entry() *view.Entry {
	return &view.Entry{Lease: g.id, TTL: g.ttl, WrittenAt: g.before}
}

// checkBound fails unless exp is a lower bound of etcd's expiry of g, no
// more than a second under it, given that the lease was last started
// between from and to.
func checkBound(t *testing.T, what string, exp time.Time, g granted, from, to time.Time) {
	t.Helper()
	lo, hi := from.Add(g.ttl-time.Second), to.Add(g.ttl)
	if exp.Before(lo) || exp.After(hi) {
		t.Errorf("%s: expiry %s from now, want between %s and %s from now (etcd's less up to 1s)", what,
			time.Until(exp).Round(time.Millisecond), time.Until(lo).Round(time.Millisecond), time.Until(hi).Round(time.Millisecond))
	}
}

// waitNotice follows the notices from n until one names id and returns
// the notice after it and when it came; ok is false if none did by
// deadline. Notices naming other leases are passed over.
func waitNotice(n *lease.Notice, id int64, deadline time.Time) (next *lease.Notice, at time.Time, ok bool) {
	tm := time.NewTimer(time.Until(deadline))
	defer tm.Stop()
	for {
		select {
		case <-n.Done():
			if slices.Contains(n.Leases(), id) {
				return n.Next(), time.Now(), true
			}
			n = n.Next()
		case <-tm.C:
			return n, time.Time{}, false
		}
	}
}

// sleepUntil waits for wall-clock time to pass: a lease's TTL runs on it.
func sleepUntil(at time.Time) {
	time.Sleep(time.Until(at))
}

// TestExpiry: the expiry given for a lease is a lower bound of etcd's,
// within a second of it, whether it comes from the write's written_at or
// from etcd; a tracker started later (a restarted replica) gives the time
// the lease has left, not its TTL from now.
func TestExpiry(t *testing.T) {
	t.Parallel()
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	ctx := testbase.Context(t)
	g := grant(t, c, 10)

	tr := newTracker(t, c, "")
	tr.run(t)
	exp := tr.Expiry(ctx, g.entry())
	checkBound(t, "with written_at", exp, g, g.before, g.after)
	if again := tr.Expiry(ctx, g.entry()); !again.Equal(exp) {
		t.Errorf("a second Expiry moved from %s to %s", exp, again)
	}
	i := tr.info(t, g.id)
	if i.TTL != g.ttl || !i.Expires.Equal(exp) || i.Gone {
		t.Errorf("Tracked: %+v; want ttl %s, expires %s, not gone", i, g.ttl, exp)
	}
	// The check before expiry is ahead, before the expiry.
	if nc := tr.NextCheck(g.id); !nc.After(time.Now()) || !nc.Before(exp) {
		t.Errorf("NextCheck %s from now, want after now and before the expiry, %s from now", time.Until(nc), time.Until(exp))
	}
	if got := tr.metric(t, "legation_lease_tracked"); got != 1 {
		t.Errorf("legation_lease_tracked = %v, want 1", got)
	}
	if got := tr.Expiry(ctx, &view.Entry{}); !got.IsZero() {
		t.Errorf("Expiry of an entry without a lease = %s, want zero", got)
	}

	// A restart, two seconds into the lease.
	sleepUntil(g.after.Add(2 * time.Second))
	for _, tc := range []struct {
		name string
		e    *view.Entry
	}{
		{"with written_at", g.entry()},
		{"without written_at", &view.Entry{Lease: g.id, TTL: g.ttl}},
		{"without written_at or ttl", &view.Entry{Lease: g.id}},
		// The writer's clock ran a minute ahead: its estimate is beyond
		// what etcd says is left.
		{"written_at ahead", &view.Entry{Lease: g.id, TTL: g.ttl, WrittenAt: g.before.Add(time.Minute)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTracker(t, c, "")
			tr.run(t)
			exp := tr.Expiry(ctx, tc.e)
			checkBound(t, "after a restart", exp, g, g.before, g.after)
			if again := tr.Expiry(ctx, tc.e); !again.Equal(exp) {
				t.Errorf("a second Expiry moved from %s to %s", exp, again)
			}
			if i := tr.info(t, g.id); i.TTL != g.ttl || i.Gone {
				t.Errorf("Tracked: %+v; want ttl %s, not gone", i, g.ttl)
			}
		})
	}
}

// TestRefreshNotice: a refresh through the store is announced at once,
// from its marker, naming the lease, well before the check before expiry
// would find it; the expiry moves by the time that had passed. A refresh
// of a lease nobody asked about is not announced.
func TestRefreshNotice(t *testing.T) {
	t.Parallel()
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	ctx := testbase.Context(t)
	const prefix = "/notice/"
	s, err := store.New(store.Config{Client: c, Prefix: prefix, Writer: "lease-test"})
	if err != nil {
		t.Fatal(err)
	}
	g := grant(t, c, 20)
	other := grant(t, c, 20)
	tr := newTracker(t, c, prefix)
	tr.run(t)
	exp := tr.Expiry(ctx, g.entry())
	check := tr.NextCheck(g.id)
	n := tr.Notice()

	// A second into the lease, so that the refresh moves it measurably.
	sleepUntil(g.after.Add(time.Second))
	if _, err := s.RefreshLease(ctx, other.id); err != nil {
		t.Fatal(err)
	}
	refreshing := time.Now()
	if _, err := s.RefreshLease(ctx, g.id); err != nil {
		t.Fatal(err)
	}
	refreshed := time.Now()
	// The refresh of the untracked lease came first: had it been
	// announced, its notice would come before this one.
	select {
	case <-n.Done():
		if got := n.Leases(); !slices.Equal(got, []int64{g.id}) {
			t.Errorf("first notice names %x, want only the tracked lease %x", got, g.id)
		}
	case <-time.After(time.Until(check)):
		t.Fatalf("no notice before the check before expiry, %s after the refresh", check.Sub(refreshed))
	}
	t.Logf("refresh announced %s after it was written", time.Since(refreshed).Round(time.Microsecond))
	if got := tr.metric(t, "legation_lease_checks_total"); got != 0 {
		t.Errorf("legation_lease_checks_total = %v: the notice came from a check, not the marker", got)
	}
	// The counter moves as the notice is announced, not before it: wait
	// for it briefly.
	xdstest.WaitFor(t, "legation_lease_extensions_total at 1", func() (bool, string) {
		got := tr.metric(t, "legation_lease_extensions_total")
		return got == 1, fmt.Sprint(got)
	})

	after := tr.Expiry(ctx, g.entry())
	checkBound(t, "after the refresh", after, g, refreshing, refreshed)
	if after.Sub(exp) < time.Second {
		t.Errorf("the refresh moved the expiry by %s, want at least 1s", after.Sub(exp))
	}
	if nc := tr.NextCheck(g.id); nc.Sub(check) < time.Second || !nc.Before(after) {
		t.Errorf("after the refresh NextCheck moved by %s to %s before the expiry; want later by 1s or more, and before the expiry", nc.Sub(check), after.Sub(nc))
	}

	// No more notices: nothing else was extended.
	if _, _, ok := waitNotice(n.Next(), g.id, time.Now().Add(testShortTimeout)); ok {
		t.Error("a second notice for one refresh")
	}
	for _, i := range tr.Tracked() {
		if i.ID == other.id {
			t.Errorf("the untracked lease's marker made it tracked: %+v", i)
		}
	}
}

// TestCheckBeforeExpiry: a lease extended without a marker (a keepalive
// by someone else) is found extended by the check a margin before it
// expires, and announced before the old expiry, so that clients are
// heartbeated before they drop its resources.
func TestCheckBeforeExpiry(t *testing.T) {
	t.Parallel()
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	ctx := testbase.Context(t)
	g := grant(t, c, 6)
	tr := newTracker(t, c, "")
	tr.run(t)
	exp := tr.Expiry(ctx, g.entry())
	check := tr.NextCheck(g.id)
	if !check.Before(exp) || exp.Sub(check) < 300*time.Millisecond || !check.After(time.Now()) {
		t.Fatalf("NextCheck is %s before the expiry and %s from now; want at least 300ms before it, and ahead", exp.Sub(check), time.Until(check))
	}
	n := tr.Notice()

	// Extend it by 2.5s, well before the check: a gain of more than the
	// one second etcd's whole seconds can hide.
	sleepUntil(g.after.Add(2500 * time.Millisecond))
	if !time.Now().Before(check) {
		t.Fatalf("the keepalive is late: %s after the check", time.Since(check))
	}
	kaFrom := time.Now()
	if _, err := c.KeepAliveOnce(ctx, clientv3.LeaseID(g.id)); err != nil {
		t.Fatal(err)
	}
	kaTo := time.Now()

	_, at, ok := waitNotice(n, g.id, exp)
	if !ok {
		t.Fatalf("no notice naming the lease before its old expiry (checks: %v)", tr.metric(t, "legation_lease_checks_total"))
	}
	t.Logf("extension announced %s before the old expiry, %s after the check was due", exp.Sub(at).Round(time.Millisecond), at.Sub(check).Round(time.Millisecond))
	if at.Before(check) {
		t.Errorf("announced %s before the check was due, with no marker", check.Sub(at))
	}
	if got := tr.metric(t, "legation_lease_checks_total"); got < 1 {
		t.Errorf("legation_lease_checks_total = %v, want at least 1", got)
	}
	after := tr.Expiry(ctx, g.entry())
	checkBound(t, "after the keepalive", after, g, kaFrom, kaTo)
	if nc := tr.NextCheck(g.id); !nc.After(check) || !nc.Before(after) {
		t.Errorf("NextCheck after the extension is %s after the first and %s before the new expiry; want after the first and before the expiry", nc.Sub(check), after.Sub(nc))
	}
}

// TestNotExtended: a lease left to expire is checked before its expiry,
// found not extended, and never announced; once etcd deleted it, its
// expiry is past and nothing is scheduled for it. A tracker asked about
// it afterwards (a restart) finds it gone.
func TestNotExtended(t *testing.T) {
	t.Parallel()
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	ctx := testbase.Context(t)
	g := grant(t, c, 6)
	tr := newTracker(t, c, "")
	tr.run(t)
	exp := tr.Expiry(ctx, g.entry())
	n := tr.Notice()

	// What must not happen, for as long as the lease lives.
	if _, at, ok := waitNotice(n, g.id, exp); ok {
		t.Fatalf("a notice for a lease nobody extended, %s before it expires", exp.Sub(at))
	}
	waitGone(t, c, g.id)
	if _, at, ok := waitNotice(n, g.id, time.Now().Add(testShortTimeout)); ok {
		t.Fatalf("a notice for an expired lease, %s after it expired", at.Sub(exp))
	}
	if got := tr.metric(t, "legation_lease_checks_total"); got < 1 || got > 2 {
		t.Errorf("legation_lease_checks_total = %v, want 1 or 2 checks before the expiry", got)
	}
	if got := tr.metric(t, "legation_lease_extensions_total"); got != 0 {
		t.Errorf("legation_lease_extensions_total = %v, want 0", got)
	}
	if got := tr.Expiry(ctx, g.entry()); got.After(time.Now()) {
		t.Errorf("Expiry after etcd deleted the lease: %s from now, want past", time.Until(got))
	}
	if i := tr.info(t, g.id); !i.NextCheck.IsZero() || i.Expires.After(time.Now()) {
		t.Errorf("Tracked after the expiry: %+v; want no next check and a past expiry", i)
	}

	restarted := newTracker(t, c, "")
	if got := restarted.Expiry(ctx, g.entry()); got.After(time.Now()) {
		t.Errorf("Expiry of an expired lease after a restart: %s from now, want past", time.Until(got))
	}
	if i := restarted.info(t, g.id); !i.Gone || !i.NextCheck.IsZero() {
		t.Errorf("Tracked after a restart: %+v; want gone, no next check", i)
	}
	// A lease that never existed is gone too.
	if got := restarted.Expiry(ctx, &view.Entry{Lease: 0x1234, TTL: 10 * time.Second, WrittenAt: time.Now()}); got.After(time.Now()) {
		t.Errorf("Expiry of an unknown lease: %s from now, want past", time.Until(got))
	}
	if i := restarted.info(t, 0x1234); !i.Gone {
		t.Errorf("Tracked of an unknown lease: %+v; want gone", i)
	}
}

// waitGone waits until etcd no longer knows lease id.
func waitGone(t *testing.T, c *clientv3.Client, id int64) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		resp, err := c.TimeToLive(testbase.Context(t), clientv3.LeaseID(id))
		if err != nil {
			t.Fatal(err)
		}
		if resp.TTL == -1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease %x still there after %s: %ds left", id, testTimeout, resp.TTL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMalformedMarkers: refresh markers that do not decode, whether there
// when Run starts or written while it runs, are counted and skipped, and
// Run goes on to announce a good one.
func TestMalformedMarkers(t *testing.T) {
	t.Parallel()
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	ctx := testbase.Context(t)
	const prefix = "/malformed/"
	bad := func(round int) map[string]string {
		return map[string]string{
			fmt.Sprintf("%sleases/not-hex-%d", prefix, round):  `{"ttl_seconds":10}`,
			fmt.Sprintf("%sleases/%016x", prefix, 0xb00+round): `{"ttl_seconds":`,
			fmt.Sprintf("%sleases/%016x", prefix, 0xc00+round): `{"ttl_seconds":0,"refreshed_at":"2025-01-02T03:04:05Z"}`,
		}
	}
	putAll := func(kvs map[string]string) {
		for k, v := range kvs {
			if _, err := c.Put(ctx, k, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitMetric := func(tr *tracker, name string, want float64) {
		t.Helper()
		deadline := time.Now().Add(testTimeout)
		for {
			got := tr.metric(t, name)
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s = %v, want %v", name, got, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	g := grant(t, c, 20)
	putAll(bad(0)) // read by Run's first load
	tr := newTracker(t, c, prefix)
	tr.Expiry(ctx, g.entry())
	n := tr.Notice()
	tr.run(t)
	waitMetric(tr, "legation_lease_malformed_markers_total", 3)
	putAll(bad(1)) // seen by the watch
	waitMetric(tr, "legation_lease_malformed_markers_total", 6)

	s, err := store.New(store.Config{Client: c, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RefreshLease(ctx, g.id); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := waitNotice(n, g.id, time.Now().Add(testTimeout)); !ok {
		t.Fatal("no notice for a good marker after malformed ones")
	}
	select {
	case <-tr.done:
		t.Fatal("Run returned")
	default:
	}
	if got := tr.metric(t, "legation_lease_malformed_markers_total"); got != 6 {
		t.Errorf("legation_lease_malformed_markers_total = %v after a good marker, want still 6", got)
	}
}

func TestWireTTL(t *testing.T) {
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC) // on a quantum's start
	for _, tc := range []struct {
		name     string
		exp, now time.Time
		want     time.Duration
	}{
		{"at a quantum's start", t0.Add(10 * time.Second), t0, 9900 * time.Millisecond},
		{"within the quantum", t0.Add(10 * time.Second), t0.Add(50 * time.Millisecond), 9900 * time.Millisecond},
		{"at the quantum's end", t0.Add(10 * time.Second), t0.Add(lease.Quantum - time.Nanosecond), 9900 * time.Millisecond},
		{"the next quantum", t0.Add(10 * time.Second), t0.Add(lease.Quantum), 9800 * time.Millisecond},
		{"expiry within a quantum", t0.Add(10*time.Second + 42*time.Millisecond), t0.Add(250 * time.Millisecond), 9742 * time.Millisecond},
		{"less than a quantum left after it", t0.Add(150 * time.Millisecond), t0.Add(20 * time.Millisecond), 50 * time.Millisecond},
		{"expiry at the quantum's end", t0.Add(lease.Quantum), t0, lease.MinTTL},
		{"expiry within this quantum", t0.Add(30 * time.Millisecond), t0, lease.MinTTL},
		{"expiry past", t0.Add(-time.Hour), t0, lease.MinTTL},
		{"expiry unknown", time.Time{}, t0, lease.MinTTL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := lease.WireTTL(tc.exp, tc.now)
			if got != tc.want {
				t.Errorf("WireTTL(%s, %s) = %s, want %s", tc.exp.Sub(t0), tc.now.Sub(t0), got, tc.want)
			}
			// A client told it at now drops the resource no later than
			// the lease ends, unless only the floor is left.
			if got > lease.MinTTL && tc.now.Add(got).After(tc.exp) {
				t.Errorf("WireTTL(%s, %s) = %s outlasts the lease", tc.exp.Sub(t0), tc.now.Sub(t0), got)
			}
		})
	}
	if lease.MinTTL <= 0 {
		t.Errorf("MinTTL %s: a TTL of zero means none", lease.MinTTL)
	}
}

func TestFeatures(t *testing.T) {
	for _, tc := range []struct {
		name              string
		node              *corev3.Node
		wantTTL, wantWrap bool
	}{
		{name: "no node", node: nil},
		{name: "no features", node: &corev3.Node{Id: "n"}},
		{name: "TTL alone: delta only", node: &corev3.Node{ClientFeatures: []string{lease.FeatureTTL}}, wantTTL: true},
		{name: "resource-in-sotw alone (grpc-go)", node: &corev3.Node{ClientFeatures: []string{"envoy.lb.does_not_support_overprovisioning", lease.FeatureResourceInSotW}}},
		{name: "both", node: &corev3.Node{ClientFeatures: []string{lease.FeatureTTL, lease.FeatureResourceInSotW}}, wantTTL: true, wantWrap: true},
		{name: "both, reversed, among others, twice", node: &corev3.Node{ClientFeatures: []string{"x", lease.FeatureResourceInSotW, "y", lease.FeatureTTL, lease.FeatureTTL}}, wantTTL: true, wantWrap: true},
		{name: "near misses", node: &corev3.Node{ClientFeatures: []string{"XDS.CONFIG.SUPPORTS-RESOURCE-TTL", lease.FeatureTTL + " ", "xds.config.resource-in-sotw2"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ttl, wrap := lease.Features(tc.node)
			if ttl != tc.wantTTL || wrap != tc.wantWrap {
				t.Errorf("Features(%v) = %v, %v; want %v, %v", tc.node.GetClientFeatures(), ttl, wrap, tc.wantTTL, tc.wantWrap)
			}
		})
	}
	if lease.FeatureTTL != "xds.config.supports-resource-ttl" || lease.FeatureResourceInSotW != "xds.config.resource-in-sotw" {
		t.Errorf("feature names %q, %q: not the ones clients send", lease.FeatureTTL, lease.FeatureResourceInSotW)
	}
}

func TestNewNeedsClient(t *testing.T) {
	if _, err := lease.New(lease.Config{}); err == nil {
		t.Error("New without a client succeeded")
	}
}

// TestRefreshInLastSecond: a lease refreshed in the last second before
// its expiry, after the check before expiry, is announced like any other.
// With a 3s lease the check runs 750ms before the expiry, when etcd's
// TimeToLive answers 0 (it rounds down) for a lease that still lives.
func TestRefreshInLastSecond(t *testing.T) {
	t.Parallel()
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	ctx := testbase.Context(t)
	const prefix = "/last/"
	s, err := store.New(store.Config{Client: c, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	g := grant(t, c, 3)
	tr := newTracker(t, c, prefix)
	tr.run(t)
	exp := tr.Expiry(ctx, g.entry())
	check := tr.NextCheck(g.id)
	n := tr.Notice()
	// After the check, which finds under a second left.
	deadline := time.Now().Add(testTimeout)
	for tr.metric(t, "legation_lease_checks_total") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("no check")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("check due %s before the expiry ran; %+v", exp.Sub(check), tr.info(t, g.id))
	if _, err := s.RefreshLease(ctx, g.id); err != nil {
		t.Fatalf("refresh %s before the expiry: %v", time.Until(exp), err)
	}
	if _, _, ok := waitNotice(n, g.id, time.Now().Add(testTimeout)); !ok {
		t.Fatalf("no notice for a refresh in the lease's last second: clients drop its resources though it lives on; %+v", tr.info(t, g.id))
	}
	// The refresh, in the lease's last second, sets it 3s ahead: a move of
	// 2-3s, less up to the 1s etcd's whole-second TTLs leave unknown.
	if got := tr.Expiry(ctx, g.entry()); got.Sub(exp) < time.Second {
		t.Errorf("the refresh moved the expiry by %s, want about 3s", got.Sub(exp))
	}
}
