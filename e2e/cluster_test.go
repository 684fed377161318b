package e2e

// Tests of the whole deployment: real etcd members, xds-node replicas and
// HAProxy as processes (internal/tools/localcluster), with hundreds of clients
// through HAProxy (cluster_clients_test.go). Their sizes are in
// size_small_test.go (go test ./...) and size_full_test.go (-tags e2e).

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/tools/localcluster"
)

// failoverBound is the failover target of docs/concepts/design.md: every client of a killed
// replica re-homed and ACKed within 10s.
const failoverBound = 10 * time.Second

// clusterFlags are the xds-node flags of every cluster test: a replica
// stopped at the end drains for 2s at most.
var clusterFlags = []string{"--shutdown-timeout", "2s", "--drain-period", "1s"}

// clusterConfig is the cluster of the cluster tests: 3 etcd members, 3
// replicas and HAProxy, each replica run with flags.
func clusterConfig(flags []string) localcluster.Config {
	cfg := localcluster.DefaultConfig()
	cfg.XDSNodeFlags = flags
	return cfg
}

// startFleetCluster starts a cluster of cfg, applies the fleet's
// resources at generation 1 (svc-cluster's endpoint on a backend of its
// own) and starts mix's clients through HAProxy, returning once every
// client is synced and every node settled on its home. It returns the
// revision of the apply. In a secure cluster (cfg.Secure) the clients
// present localcluster.ClientIdentity's certificate.
func startFleetCluster(t *testing.T, cfg localcluster.Config, prefix string, mix clientMix) (*localcluster.TestCluster, *fleet, int64) {
	t.Helper()
	c := localcluster.StartForTest(t, cfg)
	c.WaitRing()
	a := startBackend(t)
	rev := clusterApply(t, c, fleetYAML(a.port, 1))
	c.WaitRevision(rev)
	start := time.Now()
	// A secure cluster's fleet presents the client certificate.
	var creds *clientCreds
	if sec := c.Security(); sec != nil {
		creds = newClientCreds(t, sec, sec.Client)
	}
	f := startFleetWith(t, c.LBAddr, prefix, mix, a.port, creds)
	synced := f.waitSynced(t, 1, rev)
	h := waitHomed(t, c, f, f.expect(rev, rev), start, clusterTimeout)
	t.Logf("%s synced through HAProxy in %s, settled on their homes in %s", mix, synced.Round(time.Millisecond), h.All.Round(time.Millisecond))
	return c, f, rev
}

// TestClusterAffinity: with 3 replicas behind HAProxy, every node (raw
// SotW, raw delta and grpc-go clients, each on a connection of its own
// that HAProxy sent to any replica) is served by its home: exactly one
// replica serves its stream locally, the home on the ring every replica
// agrees on (shard.NewRing over the replicas' names), and the replicas
// that got its connection relay it there. Each replica owns a third of
// the ring and serves about a third of the nodes (each within ±25%).
//
// It catches a stream served where it landed instead of at its home, a
// replica relaying to a replica that is not the home, a node served
// twice, replicas disagreeing on the ring, and a ring or hash that
// spreads nodes unevenly.
func TestClusterAffinity(t *testing.T) {
	checkLeaks(t)
	c, f, rev := startFleetCluster(t, clusterConfig(clusterFlags), "aff", affinityMix)

	views, err := readDebug(c)
	if err != nil {
		t.Fatal(err)
	}
	want := f.expect(rev, rev)
	hc := checkHomes(c, views, want)
	if !hc.ringsAgree || len(hc.bad) > 0 {
		t.Fatalf("%d nodes not on their homes (rings agree: %t); e.g. %s", len(hc.bad), hc.ringsAgree, example(hc.bad))
	}

	// The ring: every replica reports the same shares, each within ±25%
	// of an even third.
	even := 1.0 / float64(len(views))
	for _, v := range views {
		if fmt.Sprint(v.Shares) != fmt.Sprint(views[0].Shares) {
			t.Errorf("%s's ring shares %v differ from %s's %v", v.Name, v.Shares, views[0].Name, views[0].Shares)
		}
	}
	for _, name := range runningNames(c) {
		share := views[0].Shares[name]
		if share < 0.75*even || share > 1.25*even {
			t.Errorf("%s owns %.3f of the ring, want %.3f ± 25%%", name, share, even)
		}
	}
	// The nodes: each replica serves about a third of them.
	relayed := 0
	for _, v := range views {
		for _, r := range v.Relay {
			if _, ok := want[r.NodeID]; ok && r.RelayedBy != "" {
				relayed++
			}
		}
	}
	total := len(want)
	var shares []string
	for _, name := range runningNames(c) {
		n := hc.perReplica[name]
		shares = append(shares, fmt.Sprintf("%s %d (ring %.3f)", name, n, views[0].Shares[name]))
		if got := float64(n) / float64(total); got < 0.75*even || got > 1.25*even {
			t.Errorf("%s serves %d of %d nodes (%.3f), want %.3f ± 25%%", name, n, total, got, even)
		}
	}
	t.Logf("%d nodes, each served by its home only; per replica: %s; %d streams reached their home relayed by another replica",
		total, strings.Join(shares, ", "), relayed)

	// What operators see: xdsadmin status lists every node with its home.
	start := time.Now()
	waitStatusHomes(t, c, want)
	t.Logf("xdsadmin status lists every node with its home (%s)", time.Since(start).Round(time.Millisecond))
}

// TestClusterFailover: with 3 replicas and clients running, kill -9 the
// replica serving the most nodes. Every client reconnects through
// HAProxy and is settled on its new home within failoverBound; the raw
// delta clients and the SotW wildcard types (CDS, LDS) are sent nothing
// on their new streams (promise 4: they present what they hold, which
// did not change); grpc-go clients' RPCs keep reaching the backend. Then,
// with the killed replica back, kill the busiest again while three applies
// land: every client ends at the last apply's revision, no client saw a
// version go backwards (promise 3) or half of an apply (promise 5), and
// the replicas' views reach etcd's revision.
//
// It catches re-homing that is slow or never settles, a resend on
// reconnect (initial_resource_versions or a presented version_info
// ignored), a replica answering with older config than a client holds,
// applies seen in halves, and RPC outages caused by the control plane.
func TestClusterFailover(t *testing.T) {
	checkLeaks(t)
	c, f, rev1 := startFleetCluster(t, clusterConfig(clusterFlags), "fo", failoverMix)
	want := f.expect(rev1, rev1)

	// Phase 1: kill the busiest replica; nothing changes in etcd.
	victim, held := busiest(t, c, want)
	name := c.Replicas()[victim].Name
	fallbacksBefore := map[string]float64{}
	for _, r := range c.Replicas() {
		if r.Running() && r.Name != name {
			fallbacksBefore[r.Name] = metricAt(t, r.HTTPAddr, "legation_relay_fallbacks_total", "")
		}
	}
	kill := time.Now()
	c.KillReplica(victim)
	t.Logf("killed %s (kill -9), home of %d of %d nodes; HAProxy marked it down in %s",
		name, held, len(want), time.Since(kill).Round(time.Millisecond))
	h := waitHomed(t, c, f, want, kill, clusterTimeout)
	settled := kill.Add(h.All)
	p50, p99, pmax := percentiles(h.PerNode)
	t.Logf("every node settled on its new home %s after the kill (%d polls); per re-homed raw client: p50 %s, p99 %s, max %s",
		h.All.Round(time.Millisecond), h.Polls, p50, p99, pmax)
	if h.All > failoverBound {
		t.Errorf("re-homing took %s after the kill, want <= %s (docs/concepts/design.md, failover target)", h.All.Round(time.Millisecond), failoverBound)
	}
	var fallbacks []string
	for n, before := range fallbacksBefore {
		r := c.Replicas()[slices.IndexFunc(c.Replicas(), func(r localcluster.Replica) bool { return r.Name == n })]
		fallbacks = append(fallbacks, fmt.Sprintf("%s %v", n, metricAt(t, r.HTTPAddr, "legation_relay_fallbacks_total", "")-before))
	}
	sort.Strings(fallbacks)
	t.Logf("streams served locally while their home was unreachable (legation_relay_fallbacks_total): %s", strings.Join(fallbacks, ", "))

	// No resend: what each re-homed raw client received after the kill.
	rehomed, sotwEDS, sotwRehomed := 0, 0, 0
	var bytes int
	for _, cl := range f.raw {
		if len(cl.endsSince(kill)) == 0 {
			continue
		}
		rehomed++
		tr := cl.since(kill)
		bytes += tr.Bytes
		resent := tr.Resources["cluster"] + tr.Resources["listener"]
		if cl.kind == kindDelta {
			resent = tr.total()
		} else {
			sotwRehomed++
			sotwEDS += tr.Resources["endpoint"]
		}
		if resent != 0 {
			t.Errorf("%s: %d resources resent after the kill (%v), want 0: nothing it holds changed", cl, resent, tr.Resources)
		}
	}
	if rehomed < held/2 {
		t.Errorf("only %d raw clients reconnected after the kill of a replica serving %d nodes", rehomed, held)
	}
	t.Logf("%d raw clients reconnected: 0 CDS/LDS resources resent to SotW ones, 0 resources to delta ones; "+
		"SotW named EDS resent by design (grpc-go #7013): %d endpoint sets to %d clients; %d bytes received in all",
		rehomed, sotwEDS, sotwRehomed, bytes)

	// grpc-go clients: RPCs go on; none may fail once re-homed.
	failed, ok, ex, gap := f.rpcStats(kill, settled)
	t.Logf("grpc-go RPCs while re-homing: %d answered, %d failed (%s), longest gap %s", ok, failed, ex, gap.Round(time.Millisecond))

	// Phase 2: bring it back, then kill the busiest replica while three
	// applies land.
	c.StartReplica(victim)
	c.WaitRing()
	back := time.Now()
	failed, ok, ex, gap = f.rpcStats(settled, back)
	if failed > 0 {
		t.Errorf("grpc-go RPCs after re-homing: %d of %d failed, e.g. %s", failed, failed+ok, ex)
	}
	t.Logf("grpc-go RPCs from the settled re-home to the restart: %d answered, %d failed, longest gap %s", ok, failed, gap.Round(time.Millisecond))
	h = waitHomed(t, c, f, want, back, clusterTimeout)
	t.Logf("%s restarted: nodes settled on their homes %s after the ring had it", name, h.All.Round(time.Millisecond))

	victim2, held2 := busiest(t, c, want)
	type applied struct {
		rev int64
		err error
	}
	applies := make(chan applied, 3)
	kill2 := time.Now()
	go func() {
		// Spread over the re-homing: before HAProxy marks the replica
		// down, while clients reconnect, and around the ring change.
		for i, at := range []time.Duration{100 * time.Millisecond, 1500 * time.Millisecond, 4 * time.Second} {
			time.Sleep(time.Until(kill2.Add(at)))
			rev, err := clusterApplyErr(c, pairYAML(2+i))
			applies <- applied{rev, err}
		}
		close(applies)
	}()
	c.KillReplica(victim2)
	var last int64
	for a := range applies {
		if a.err != nil {
			t.Fatal(a.err)
		}
		last = a.rev
	}
	t.Logf("killed %s, home of %d nodes, with three applies spread over its re-homing; the last made revision %d",
		c.Replicas()[victim2].Name, held2, last)
	f.waitSynced(t, 4, last)
	want2 := f.expect(last, rev1)
	h = waitHomed(t, c, f, want2, kill2, clusterTimeout)
	t.Logf("every node at the last apply and settled on its home %s after the second kill", h.All.Round(time.Millisecond))

	cli := etcdClient(t, c.EtcdEndpoints)
	etcdRev := etcdRevision(t, cli)
	c.WaitRevision(etcdRev)
	for _, cl := range f.raw {
		lastV, maxRes := cl.versions()
		for typ, v := range lastV {
			if cl.kind == kindDelta {
				v = maxRes[typ]
			}
			if v < last || v > etcdRev {
				t.Errorf("%s: %s at version %d, want from the last apply's %d to etcd's %d", cl, typ, v, last, etcdRev)
			}
		}
	}
	f.checkHistories(t)
	waitStatusHomes(t, c, want2)
	end := time.Now()
	failed, ok, ex, gap = f.rpcStats(back, end)
	if failed > 0 {
		t.Errorf("grpc-go RPCs during the second failover: %d of %d failed, e.g. %s", failed, failed+ok, ex)
	}
	t.Logf("grpc-go RPCs from the restart to the end: %d answered, %d failed, longest gap %s", ok, failed, gap.Round(time.Millisecond))
}

// percentiles returns the 50th, 99th and 100th percentiles of d's values,
// rounded to milliseconds.
func percentiles(d map[string]time.Duration) (p50, p99, pmax time.Duration) {
	if len(d) == 0 {
		return 0, 0, 0
	}
	vs := make([]time.Duration, 0, len(d))
	for _, v := range d {
		vs = append(vs, v)
	}
	slices.Sort(vs)
	at := func(p float64) time.Duration {
		i := int(p*float64(len(vs))+0.5) - 1
		return vs[max(0, min(i, len(vs)-1))].Round(time.Millisecond)
	}
	return at(0.50), at(0.99), vs[len(vs)-1].Round(time.Millisecond)
}

// TestClusterAddReplica: adding a 4th replica moves about a quarter of the
// nodes (within ±50% of N/4), exactly those whose home the new ring gives
// to the new replica, and no other: the nodes that stay keep their
// streams. The moves are paced by --rebalance-rate (a rate per replica):
// they span at least half the time that rate allows. No moved raw client
// is resent anything it holds (delta: nothing; SotW: nothing for CDS and
// LDS).
//
// It catches a rebalance that moves too many nodes (a hash that is not
// consistent) or the wrong ones, closes streams in one burst, or costs
// the moved clients a resend.
func TestClusterAddReplica(t *testing.T) {
	checkLeaks(t)
	flags := append(slices.Clone(clusterFlags), "--rebalance-rate", strconv.Itoa(addReplicaRate))
	c, f, rev := startFleetCluster(t, clusterConfig(flags), "add", addReplicaMix)
	want := f.expect(rev, rev)

	views, err := readDebug(c)
	if err != nil {
		t.Fatal(err)
	}
	before := placement(views)
	oldHome := ringHome(runningNames(c))
	closesBefore := map[string]float64{}
	for _, r := range c.Replicas() {
		closesBefore[r.Name] = metricAt(t, r.HTTPAddr, "legation_relay_rebalance_closes_total", "")
	}

	add := time.Now()
	i := c.AddReplica()
	added := c.Replicas()[i].Name
	t.Logf("added %s in %s", added, time.Since(add).Round(time.Millisecond))
	c.WaitRing()
	h := waitHomed(t, c, f, want, add, clusterTimeout)
	views, err = readDebug(c)
	if err != nil {
		t.Fatal(err)
	}
	after := placement(views)
	newHome := ringHome(runningNames(c))

	var moved, wrong []string
	for _, id := range f.ids() {
		shouldMove := oldHome(id) != newHome(id)
		if shouldMove && newHome(id) != added {
			t.Errorf("node %s: the new ring moves it from %s to %s, not to the new replica %s", id, oldHome(id), newHome(id), added)
		}
		if before[id] != after[id] {
			moved = append(moved, id)
			if !shouldMove || after[id] != added {
				wrong = append(wrong, fmt.Sprintf("%s (%s -> %s)", id, before[id], after[id]))
			}
		} else if shouldMove {
			wrong = append(wrong, fmt.Sprintf("%s (stayed on %s, home now %s)", id, before[id], newHome(id)))
		}
	}
	n := len(f.ids())
	if len(wrong) > 0 {
		t.Errorf("%d nodes moved where the ring does not say, or stayed where it says move: %v", len(wrong), wrong[:min(5, len(wrong))])
	}
	quarter := float64(n) / 4
	if m := float64(len(moved)); m < 0.5*quarter || m > 1.5*quarter {
		t.Errorf("%d of %d nodes moved, want %.0f ± 50%%", len(moved), n, quarter)
	}

	// Pacing: the moved raw clients' streams were closed over a span at
	// least half of what --rebalance-rate allows for the busiest
	// replica's closes (after its burst of rate/5).
	var first, lastEnd time.Time
	rebalanced := 0
	movedSet := map[string]bool{}
	for _, id := range moved {
		movedSet[id] = true
	}
	for _, cl := range f.raw {
		ends := cl.endsSince(add)
		if !movedSet[cl.id] {
			if len(ends) > 0 {
				t.Errorf("%s did not move, yet its stream ended after the add: %v", cl, ends[0].Err)
			}
			continue
		}
		if len(ends) == 0 {
			t.Errorf("%s moved to %s but its stream never ended", cl, after[cl.id])
			continue
		}
		e := ends[0]
		if !isUnavailable(e.Err) || !strings.Contains(e.Err.Error(), "rebalance: home moved") {
			t.Errorf("%s: stream ended with %v, want UNAVAILABLE rebalance: home moved", cl, e.Err)
		}
		rebalanced++
		if first.IsZero() || e.Ended.Before(first) {
			first = e.Ended
		}
		if e.Ended.After(lastEnd) {
			lastEnd = e.Ended
		}
		tr := cl.since(add)
		resent := tr.Resources["cluster"] + tr.Resources["listener"]
		if cl.kind == kindDelta {
			resent = tr.total()
		}
		if resent != 0 {
			t.Errorf("%s: %d resources resent after moving (%v), want 0", cl, resent, tr.Resources)
		}
	}
	var closes []string
	maxCloses := 0.0
	for _, r := range c.Replicas() {
		d := metricAt(t, r.HTTPAddr, "legation_relay_rebalance_closes_total", "") - closesBefore[r.Name]
		maxCloses = max(maxCloses, d)
		closes = append(closes, fmt.Sprintf("%s %v", r.Name, d))
	}
	burst := max(1, addReplicaRate/5)
	span := lastEnd.Sub(first)
	minSpan := time.Duration(0.5 * (maxCloses - float64(burst)) / addReplicaRate * float64(time.Second))
	if span < minSpan {
		t.Errorf("the moved raw clients' streams were closed within %s, want >= %s: up to %v closes on one replica at --rebalance-rate %d (burst %d)",
			span.Round(time.Millisecond), minSpan.Round(time.Millisecond), maxCloses, addReplicaRate, burst)
	}
	t.Logf("%d of %d nodes moved to %s (ring: %.0f%%); %d raw clients' streams closed over %s (>= %s), closes per replica %s; "+
		"all settled %s after the add; 0 resources resent to moved raw clients",
		len(moved), n, added, 100*views[0].Shares[added], rebalanced, span.Round(time.Millisecond), minSpan.Round(time.Millisecond),
		strings.Join(closes, ", "), h.All.Round(time.Millisecond))
	f.checkHistories(t)
}

// placement maps each node id to the replica serving it locally (the
// first, if several).
func placement(views []replicaDebug) map[string]string {
	out := map[string]string{}
	for id, ss := range localStreams(views) {
		out[id] = ss[0].Replica
	}
	return out
}

// TestClusterEtcdLoss: with one etcd member of three stopped, replicas
// serve and applies reach every client. With a second stopped (no
// quorum), replicas keep serving their last view: existing streams stay,
// a new stream straight to a replica gets the whole view; /readyz says 503
// naming etcd; xdsadmin apply fails naming etcd. With both members back,
// every replica is ready again and a new apply reaches every client, with
// no replica restarted.
//
// It catches a replica that drops its streams or its view when etcd goes,
// stays not ready or stuck at an old revision once etcd is back, and an
// apply that hangs or fails without saying why.
func TestClusterEtcdLoss(t *testing.T) {
	checkLeaks(t)
	c, f, _ := startFleetCluster(t, clusterConfig(clusterFlags), "etcd", etcdLossMix)
	pids := map[string]int{}
	for _, r := range c.Replicas() {
		pids[r.Name] = r.PID
	}

	step := time.Now()
	c.StopEtcd(0)
	rev2 := clusterApply(t, c, pairYAML(2))
	took := f.waitSynced(t, 2, rev2)
	t.Logf("stopped %s (%s); an apply (revision %d) reached every client in %s",
		c.Etcd()[0].Name, time.Since(step).Round(time.Millisecond), rev2, took.Round(time.Millisecond))

	loss := time.Now()
	c.StopEtcd(1)
	t.Logf("stopped %s in %s: no quorum", c.Etcd()[1].Name, time.Since(loss).Round(time.Millisecond))
	for _, r := range c.Replicas() {
		waitFor(t, r.Name+" /readyz 503 naming etcd", func() (bool, string) {
			code, body, err := httpGet(r.HTTPAddr, "/readyz")
			if err != nil {
				return false, err.Error()
			}
			return code == http.StatusServiceUnavailable && strings.Contains(body, "etcd"), fmt.Sprintf("%d %s", code, strings.TrimSpace(body))
		})
	}
	_, body, _ := httpGet(c.Replicas()[0].HTTPAddr, "/readyz")
	t.Logf("every replica not ready %s after the quorum loss: %q", time.Since(loss).Round(time.Millisecond), strings.TrimSpace(body))

	// A new stream, straight to a replica (HAProxy has none ready), is
	// served the last view.
	var fresh []*loadClient
	for _, kind := range []loadKind{kindSotW, kindDelta} {
		cl, err := newLoadClient("etcd-fresh-"+kind.String(), kind, c.Replicas()[0].XDSAddr, nil)
		if err != nil {
			t.Fatal(err)
		}
		cl.start()
		t.Cleanup(cl.close)
		fresh = append(fresh, cl)
	}
	waitFor(t, "new streams on "+c.Replicas()[0].Name+" served the last view", func() (bool, string) {
		for _, cl := range fresh {
			if ok, why := cl.holds(2, rev2); !ok {
				return false, why
			}
		}
		return true, ""
	})

	// xdsadmin apply fails, and says etcd is why.
	start := time.Now()
	out, errOut, code := clusterAdmin(c, pairYAML(9), "--dial-timeout", "2s", "--timeout", "3s", "apply", "-f", "-")
	if code == 0 {
		t.Errorf("xdsadmin apply without an etcd quorum: exit 0, want an error\nstdout:\n%s", out)
	}
	if !strings.Contains(strings.ToLower(errOut), "etcd") {
		t.Errorf("xdsadmin apply without an etcd quorum: error %q does not name etcd", strings.TrimSpace(errOut))
	}
	t.Logf("xdsadmin apply without quorum: exit %d after %s: %s", code, time.Since(start).Round(time.Millisecond), strings.TrimSpace(errOut))

	// Existing streams stayed, RPCs went on.
	ended, ex := 0, ""
	for _, cl := range f.raw {
		if ends := cl.endsSince(loss); len(ends) > 0 {
			if ended++; ex == "" {
				ex = fmt.Sprintf("%s: %v", cl, ends[0].Err)
			}
		}
	}
	if ended > 0 {
		t.Errorf("%d of %d raw clients' streams ended after the quorum loss, want none; e.g. %s", ended, len(f.raw), ex)
	}
	lossEnd := time.Now()
	if failed, ok, ex, _ := f.rpcStats(loss, lossEnd); failed > 0 {
		t.Errorf("grpc-go RPCs without etcd: %d of %d failed, e.g. %s", failed, failed+ok, ex)
	}

	step = time.Now()
	c.StartEtcd(0)
	c.StartEtcd(1)
	for _, r := range c.Replicas() {
		waitFor(t, r.Name+" /readyz 200", func() (bool, string) {
			code, body, err := httpGet(r.HTTPAddr, "/readyz")
			if err != nil {
				return false, err.Error()
			}
			return code == http.StatusOK, fmt.Sprintf("%d %s", code, strings.TrimSpace(body))
		})
	}
	t.Logf("etcd members back; every replica ready %s later", time.Since(step).Round(time.Millisecond))
	rev3 := clusterApply(t, c, pairYAML(3))
	took = f.waitSynced(t, 3, rev3)
	for _, cl := range fresh {
		waitFor(t, cl.String()+" at the new apply", func() (bool, string) { return cl.holds(3, rev3) })
	}
	t.Logf("an apply after etcd came back (revision %d) reached every client in %s", rev3, took.Round(time.Millisecond))
	for _, r := range c.Replicas() {
		if !r.Running() || r.PID != pids[r.Name] {
			t.Errorf("%s: pid %d (running %t), was %d: restarted", r.Name, r.PID, r.Running(), pids[r.Name])
		}
	}
	f.checkHistories(t)
	for _, cl := range fresh {
		for _, p := range cl.checkHistory() {
			t.Error(p)
		}
	}
}

// TestClusterFrozenEtcd: a replica whose only etcd member is frozen
// (SIGSTOP: no answer, no error) is behind the others. A client holding
// the newer version, got from another replica, that connects straight to
// it presenting that version is held and then bounced with UNAVAILABLE
// after --catchup-timeout, never answered with older config (promise 3);
// both a SotW client (version_info) and a delta one
// (initial_resource_versions). Once the member thaws, the replica catches
// up and serves them at the newer version.
//
// It catches a replica that answers a client from a view older than what
// the client holds, or holds it forever.
func TestClusterFrozenEtcd(t *testing.T) {
	checkLeaks(t)
	const catchup = 2 * time.Second
	cfg := clusterConfig(clusterFlags)
	cfg.Replicas = 1
	c := localcluster.StartForTest(t, cfg)
	cli := etcdClient(t, c.EtcdEndpoints)
	k := etcdFollower(t, cli, c)
	var others []string
	for i, m := range c.Etcd() {
		if i != k {
			others = append(others, m.ClientAddr)
		}
	}
	// The frozen one: standalone (no relaying: it serves what connects to
	// it), on one etcd member, in a cluster of its own.
	fcfg := localcluster.DefaultConfig()
	fcfg.NamePrefix = "frozen-"
	fcfg.EtcdMembers, fcfg.EtcdEndpoints = 0, []string{c.Etcd()[k].ClientAddr}
	fcfg.Replicas, fcfg.HAProxy = 1, false
	fcfg.XDSNodeFlags = append(slices.Clone(clusterFlags), "--standalone", "--catchup-timeout", catchup.String())
	fc := localcluster.StartForTest(t, fcfg)
	fr := fc.Replicas()[0]

	rev1 := clusterApply(t, c, fleetYAML(1, 1))
	c.WaitRevision(rev1)
	fc.WaitRevision(rev1)
	var holders []*loadClient
	for _, kind := range []loadKind{kindSotW, kindDelta} {
		cl, err := newLoadClient("frozen-"+kind.String(), kind, c.LBAddr, nil)
		if err != nil {
			t.Fatal(err)
		}
		cl.start()
		t.Cleanup(cl.close)
		holders = append(holders, cl)
	}
	for _, cl := range holders {
		waitFor(t, cl.String()+" synced", func() (bool, string) { return cl.holds(1, rev1) })
	}

	c.FreezeEtcd(k)
	frozen := true
	t.Cleanup(func() {
		if frozen {
			c.ThawEtcd(k)
		}
	})
	rev2, err := applyAt(others, pairYAML(2))
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range holders {
		waitFor(t, cl.String()+" at the new apply", func() (bool, string) { return cl.holds(2, rev2) })
	}
	if v := viewRevision(t, fr.HTTPAddr); v >= rev2 {
		t.Fatalf("the replica on the frozen %s is at revision %d, not behind %d", c.Etcd()[k].Name, v, rev2)
	}
	t.Logf("froze %s; applied revision %d through the others; the holders have it; the replica on %s is behind at %d",
		c.Etcd()[k].Name, rev2, c.Etcd()[k].Name, viewRevision(t, fr.HTTPAddr))

	// Each holder moves to the frozen replica with what it holds.
	var movers []*loadClient
	for _, h := range holders {
		h.close()
		m, err := newLoadClient(h.id, h.kind, fr.XDSAddr, h.heldCopy())
		if err != nil {
			t.Fatal(err)
		}
		m.start()
		t.Cleanup(m.close)
		movers = append(movers, m)
	}
	moved := time.Now()
	for _, m := range movers {
		waitFor(t, m.String()+"'s first stream on the frozen replica ended", func() (bool, string) {
			ss := m.streamsCopy()
			return !ss[0].Ended.IsZero(), fmt.Sprintf("%d streams", len(ss))
		})
		s := m.streamsCopy()[0]
		held := s.Ended.Sub(s.Opened)
		if !isUnavailable(s.Err) {
			t.Errorf("%s: stream on the frozen replica ended with %v, want UNAVAILABLE", m, s.Err)
		}
		if held < catchup*9/10 {
			t.Errorf("%s: bounced after %s, want held about --catchup-timeout %s first", m, held.Round(time.Millisecond), catchup)
		}
		t.Logf("%s: held %s, then %v", m, held.Round(time.Millisecond), s.Err)
	}
	for _, m := range movers {
		if tr := m.since(moved); tr.Responses > 0 {
			t.Errorf("%s: %d responses from the frozen replica (%v), want none", m, tr.Responses, tr.Resources)
		}
	}

	c.ThawEtcd(k)
	frozen = false
	thawed := time.Now()
	fc.WaitRevision(rev2)
	t.Logf("thawed %s; the replica caught up to %d in %s", c.Etcd()[k].Name, rev2, time.Since(thawed).Round(time.Millisecond))
	for _, m := range movers {
		waitFor(t, m.String()+" settled on the caught-up replica", func() (bool, string) {
			views, err := replicaStreams(fr.HTTPAddr)
			if err != nil {
				return false, err.Error()
			}
			s := views[m.id]
			if s.SotW == nil && s.Delta == nil {
				return false, "no stream"
			}
			return s.settled(nodeExpect{kind: m.kind.String(), minRev: rev2})
		})
		if ok, why := m.holds(2, rev2); !ok {
			t.Error(why)
		}
		m.mu.Lock()
		for _, r := range m.resps {
			if parseRev(r.Version) < rev2 {
				t.Errorf("%s: %s response at version %s, older than the %d it presented", m, r.Type, r.Version, rev2)
			}
		}
		m.mu.Unlock()
		for _, p := range m.checkHistory() {
			t.Error(p)
		}
	}
}

// etcdFollower returns the index in c.Etcd of a member that is not the
// leader: freezing it leaves the others their quorum and their leader.
func etcdFollower(t *testing.T, cli *clientv3.Client, c *localcluster.TestCluster) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for i, m := range c.Etcd() {
		st, err := cli.Status(ctx, m.ClientAddr)
		if err != nil {
			t.Fatalf("etcd status of %s: %v", m.Name, err)
		}
		if st.Leader != st.Header.MemberId {
			return i
		}
	}
	t.Fatal("every etcd member says it is the leader")
	return -1
}

// viewRevision is the revision of the view of the replica whose HTTP
// server is at addr.
func viewRevision(t *testing.T, addr string) int64 {
	t.Helper()
	var v struct {
		Revision int64 `json:"revision"`
	}
	if err := getJSON(addr, "/debug/view", &v); err != nil {
		t.Fatal(err)
	}
	return v.Revision
}

// replicaStreams returns the streams the replica at addr serves locally,
// by node id.
func replicaStreams(addr string) (map[string]served, error) {
	var st xdstest.DebugStreams
	if err := getJSON(addr, "/debug/streams", &st); err != nil {
		return nil, err
	}
	out := map[string]served{}
	for i := range st.Streams {
		out[st.Streams[i].NodeID] = served{SotW: &st.Streams[i]}
	}
	for i := range st.DeltaStreams {
		out[st.DeltaStreams[i].NodeID] = served{Delta: &st.DeltaStreams[i]}
	}
	return out, nil
}
