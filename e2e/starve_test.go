package e2e

import (
	"bufio"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/tools/localcluster"
)

// starveFreezes and starveFreeze are the freezes of
// TestClusterStarvedReplica: a replica is starved of CPU (SIGSTOP) for
// 2s, five times.
const (
	starveFreezes = 5
	starveFreeze  = 2 * time.Second
)

// calmMetrics are the counters that must not move on any replica while
// one is starved: ring changes, streams moved by a rebalance, watches
// restarted or given up as stalled, and xDS streams ended (gRPC's own
// count, by every code).
var calmMetrics = []string{
	"legation_shard_ring_changes_total",
	"legation_relay_rebalance_closes_total",
	"legation_view_watch_restarts_total",
	"legation_view_watch_stalls_total",
	"legation_view_reloads_total",
	`grpc_server_handled_total{grpc_method="StreamAggregatedResources"}`,
}

// TestClusterStarvedReplica: a replica that is slow, not dead, keeps its
// nodes. One replica of three is stopped with SIGSTOP for 2s, five times
// at random intervals, with grpc-go clients connected through HAProxy:
// no replica's ring changes, no stream is moved or ended, no etcd watch
// is restarted, on the frozen replica or its peers, and the frozen one
// saw each freeze as a starvation of its own. Then it is killed (kill
// -9): its nodes are re-homed within the failover bound.
//
// It catches a detector that takes the process's own pause for its
// peer's silence: memberlist declaring the frozen replica dead and the
// ring moving its nodes, a watch declared stalled on resume, the relay
// giving up on a home that was only slow.
func TestClusterStarvedReplica(t *testing.T) {
	checkLeaks(t)
	c, f, rev := startFleetCluster(t, clusterConfig(clusterFlags), "sv", starveMix)
	want := f.expect(rev, rev)
	victim, held := busiest(t, c, want)
	name := c.Replicas()[victim].Name
	before := calmCounters(t, c)
	starvedBefore := metricAt(t, c.Replicas()[victim].HTTPAddr, "legation_awake_starvations_total", "")

	seed := time.Now().UnixNano()
	r := rand.New(rand.NewPCG(uint64(seed), 0))
	start := time.Now()
	for i := range starveFreezes {
		time.Sleep(time.Second + time.Duration(r.Int64N(int64(3*time.Second))))
		c.FreezeReplica(victim)
		time.Sleep(starveFreeze)
		c.ThawReplica(victim)
		t.Logf("froze %s (home of %d nodes) for %s (%d of %d)", name, held, starveFreeze, i+1, starveFreezes)
	}
	// A death memberlist declared would move nodes within its detection
	// and --ring-damping (5s each); a watch would be restarted within its
	// stall bound.
	time.Sleep(12 * time.Second)
	after := calmCounters(t, c)
	for replica, counts := range after {
		for metric, v := range counts {
			if d := v - before[replica][metric]; d != 0 {
				t.Errorf("%s: %s moved by %v while %s was frozen %d times for %s (seed %d), want 0",
					replica, metric, d, name, starveFreezes, starveFreeze, seed)
			}
		}
	}
	for _, cl := range f.raw {
		if ends := cl.endsSince(start); len(ends) > 0 {
			t.Errorf("%s: %d stream ends while %s was frozen, first %+v", cl, len(ends), name, ends[0])
		}
	}
	if failed, ok, ex, _ := f.rpcStats(start, time.Now()); failed > 0 {
		t.Errorf("grpc-go RPCs while %s was frozen: %d of %d failed, e.g. %s", name, failed, failed+ok, ex)
	}
	if n := metricAt(t, c.Replicas()[victim].HTTPAddr, "legation_awake_starvations_total", "") - starvedBefore; n < starveFreezes {
		t.Errorf("%s saw %v starvations of its own, want at least %d (the freezes)", name, n, starveFreezes)
	}
	logDeaths(t, c)

	kill := time.Now()
	c.KillReplica(victim)
	h := waitHomed(t, c, f, want, kill, clusterTimeout)
	t.Logf("killed %s (kill -9): every node settled on its new home %s after", name, h.All.Round(time.Millisecond))
	if h.All > failoverBound {
		t.Errorf("re-homing took %s after the kill, want <= %s (docs/concepts/design.md, failover target)", h.All.Round(time.Millisecond), failoverBound)
	}
}

// calmCounters reads calmMetrics from every running replica, by replica
// name, each summed over its label sets (metricSum).
func calmCounters(t *testing.T, c *localcluster.TestCluster) map[string]map[string]float64 {
	t.Helper()
	out := map[string]map[string]float64{}
	for _, r := range c.Replicas() {
		if !r.Running() {
			continue
		}
		code, body, err := httpGet(r.HTTPAddr, "/metrics")
		if err != nil || code != http.StatusOK {
			t.Fatalf("%s: GET /metrics: %d %v", r.Name, code, err)
		}
		out[r.Name] = map[string]float64{}
		for _, m := range calmMetrics {
			out[r.Name][m] = metricSum(body, m)
		}
	}
	return out
}

// metricSum sums the samples of body, a /metrics page, of the metric
// series names, over its label sets; a label given in series
// (name{label="value"}) keeps only the samples that carry it.
func metricSum(body, series string) float64 {
	name, label, _ := strings.Cut(series, "{")
	label = strings.TrimSuffix(label, "}")
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		s, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(s, "#") {
			continue
		}
		if n, labels, _ := strings.Cut(s, "{"); n != name || !strings.Contains(labels, label) {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil {
			sum += v
		}
	}
	return sum
}

// logDeaths logs what each replica's gossip made of the freezes: deaths
// declared, and revivals within --ring-damping.
func logDeaths(t *testing.T, c *localcluster.TestCluster) {
	t.Helper()
	for _, r := range c.Replicas() {
		if r.Running() {
			t.Logf("%s: %v deaths declared, %v revived within --ring-damping, %v starvations of its own", r.Name,
				metricAt(t, r.HTTPAddr, "legation_shard_member_deaths_total", ""),
				metricAt(t, r.HTTPAddr, "legation_shard_member_revivals_total", ""),
				metricAt(t, r.HTTPAddr, "legation_awake_starvations_total", ""))
		}
	}
}
