package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/tools/localcluster"
)

// benchMix is BenchmarkFailover's fleet: with 3 replicas, the busiest
// holds about 1,000 (the failover target of docs/concepts/design.md).
// LEGATION_FAILOVER_CLIENTS sets another size (9000: about 3,000 on the
// busiest).
func benchMix(b *testing.B) clientMix { return envClients(b, "LEGATION_FAILOVER_CLIENTS", 3000) }

// envClients is a benchmark's fleet: the number of clients in the
// environment variable name, or def, half SotW and half delta.
func envClients(b *testing.B, name string, def int) clientMix {
	n := def
	if v := os.Getenv(name); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 2 {
			b.Fatalf("%s=%q: want a number of clients, at least 2", name, v)
		}
	}
	return clientMix{SotW: n / 2, Delta: n - n/2}
}

// benchCluster starts a benchmark's cluster (3 etcd members, 3 replicas,
// HAProxy) and the fleet mix through HAProxy, its node ids prefixed
// with prefix, and returns once every node is settled on its home, with
// what each node must hold.
func benchCluster(b *testing.B, prefix string, mix clientMix) (*localcluster.TestCluster, *fleet, map[string]nodeExpect) {
	b.Helper()
	cfg := clusterConfig(clusterFlags)
	cfg.Timeout = 2 * time.Minute
	c := localcluster.StartForTest(b, cfg)
	c.WaitRing()
	rev := clusterApply(b, c, fleetYAML(1, 1)) // no grpc-go clients: svc-cluster's endpoint is never dialed
	c.WaitRevision(rev)
	start := time.Now()
	f := startFleet(b, c.LBAddr, prefix, mix, 1)
	synced := f.waitSynced(b, 1, rev)
	want := f.expect(rev, rev)
	h := waitHomed(b, c, f, want, start, 3*clusterTimeout)
	b.Logf("%s synced through HAProxy in %s, settled on their homes in %s", mix, synced.Round(time.Millisecond), h.All.Round(time.Millisecond))
	return c, f, want
}

// benchPoll paces BenchmarkFailover's polls of /debug/streams: one costs
// the survivors about 0.1 CPU s with 3,000 streams, on two cores shared
// with the clients.
const benchPoll = 500 * time.Millisecond

// BenchmarkFailover measures the failover target of docs/concepts/design.md: 3 replicas
// behind HAProxy, 3,000 raw clients (half SotW, half delta, each with a
// connection of its own), kill -9 the replica serving the most nodes, and
// measure until every node is settled on its new home (served there, every
// type ACKed at the current version; waitHomed polls the survivors'
// /debug/streams every benchPoll). Run it alone, once, without -race:
//
//	go test -run '^$' -bench BenchmarkFailover -benchtime 1x ./e2e/
//
// Metrics:
//   - rehome-s: from the kill until every node is settled on its home.
//   - rehome-p50-s, rehome-p99-s, rehome-max-s: the same per re-homed raw
//     client (those whose stream ended after the kill), to the first poll
//     that saw it settled, so within a poll's time.
//   - victim-nodes, rehomed-clients: nodes the killed replica served, raw
//     clients whose stream ended after the kill.
//   - moved-twice, last-close-s: re-homed raw clients whose stream ended
//     more than once after the kill (served off their home until the ring
//     changed, then moved by the rebalance), and when the last stream
//     ended.
//   - resent/delta, resent-cds-lds/sotw, resent-eds/sotw: resources
//     received after the kill per re-homed delta client, and per re-homed
//     SotW client for the wildcard types and for the named endpoint sets
//     (resent by design: promise 4, grpc-go #7013).
//   - rx-bytes: bytes every client received after the kill, together;
//     rx-bytes/rehomed per re-homed client.
//   - survivor-cpu-s: CPU seconds (user+system, /proc/PID/stat) the
//     surviving replicas used from the kill until all settled, less what
//     the /debug/streams polls cost them (measured before the kill);
//     survivor-cpu-raw-s without that correction.
func BenchmarkFailover(b *testing.B) {
	if testing.Short() {
		b.Skip("starts etcd, xds-node and HAProxy processes and thousands of clients")
	}
	b.ReportMetric(0, "ns/op") // one failover is not an op: see the metrics
	for range b.N {
		benchFailoverOnce(b)
	}
}

func benchFailoverOnce(b *testing.B) {
	b.StopTimer()
	c, f, want := benchCluster(b, "bench", benchMix(b))
	victim, held := busiest(b, c, want)
	var survivors []localcluster.Replica
	for i, r := range c.Replicas() {
		if r.Running() && i != victim {
			survivors = append(survivors, r)
		}
	}
	// What a poll of /debug/streams costs the survivors, to take it out
	// of their CPU during the re-homing.
	const calibration = 5
	cpu0 := cpuSeconds(b, survivors)
	for range calibration {
		if _, err := readDebug(c); err != nil {
			b.Fatal(err)
		}
	}
	perPoll := (cpuSeconds(b, survivors) - cpu0) / calibration

	cpu0 = cpuSeconds(b, survivors)
	b.StartTimer()
	kill := time.Now()
	c.KillReplica(victim)
	h := waitHomedEvery(b, c, f, want, kill, 3*clusterTimeout, benchPoll)
	b.StopTimer()
	cpu := cpuSeconds(b, survivors) - cpu0

	var rehomed, twice, deltas, sotws, resentDelta, resentWild, resentEDS, bytes int
	var lastEnd time.Duration
	for _, cl := range f.raw {
		tr := cl.since(kill)
		bytes += tr.Bytes
		ends := cl.endsSince(kill)
		if len(ends) == 0 {
			continue
		}
		rehomed++
		if len(ends) > 1 {
			twice++
		}
		lastEnd = max(lastEnd, ends[len(ends)-1].Ended.Sub(kill))
		if cl.kind == kindDelta {
			deltas++
			resentDelta += tr.total()
		} else {
			sotws++
			resentWild += tr.Resources["cluster"] + tr.Resources["listener"]
			resentEDS += tr.Resources["endpoint"]
		}
	}
	p50, p99, pmax := percentiles(h.PerNode)
	b.ReportMetric(h.All.Seconds(), "rehome-s")
	b.ReportMetric(p50.Seconds(), "rehome-p50-s")
	b.ReportMetric(p99.Seconds(), "rehome-p99-s")
	b.ReportMetric(pmax.Seconds(), "rehome-max-s")
	b.ReportMetric(float64(held), "victim-nodes")
	b.ReportMetric(float64(rehomed), "rehomed-clients")
	b.ReportMetric(float64(twice), "moved-twice")
	b.ReportMetric(lastEnd.Seconds(), "last-close-s")
	b.ReportMetric(perClient(resentDelta, deltas), "resent/delta")
	b.ReportMetric(perClient(resentWild, sotws), "resent-cds-lds/sotw")
	b.ReportMetric(perClient(resentEDS, sotws), "resent-eds/sotw")
	b.ReportMetric(float64(bytes), "rx-bytes")
	b.ReportMetric(perClient(bytes, rehomed), "rx-bytes/rehomed")
	b.ReportMetric(cpu-perPoll*float64(h.Polls), "survivor-cpu-s")
	b.ReportMetric(cpu, "survivor-cpu-raw-s")
	b.Logf("killed %s serving %d of %d nodes: all settled on their homes in %s (%d polls, each costing the survivors %.3f CPU s); "+
		"per re-homed client p50 %s, p99 %s, max %s; %d re-homed (%d delta, %d SotW), %d of them moved twice (the last stream closed %s after the kill); resent: delta %d, SotW CDS/LDS %d, SotW EDS %d; "+
		"%d bytes received; survivors used %.2f CPU s (%.2f less polls)",
		c.Replicas()[victim].Name, held, len(want), h.All.Round(time.Millisecond), h.Polls, perPoll, p50, p99, pmax,
		rehomed, deltas, sotws, twice, lastEnd.Round(time.Millisecond), resentDelta, resentWild, resentEDS, bytes, cpu, cpu-perPoll*float64(h.Polls))
	if resentDelta != 0 || resentWild != 0 {
		b.Errorf("resources resent after the kill: delta %d, SotW CDS/LDS %d; want none (promise 4)", resentDelta, resentWild)
	}
	f.checkHistories(b)
}

func perClient(n, clients int) float64 {
	if clients == 0 {
		return 0
	}
	return float64(n) / float64(clients)
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// cpuSeconds sums the user and system CPU time of the replicas'
// processes, from /proc/PID/stat (fields 14 and 15).
func cpuSeconds(tb testing.TB, rs []localcluster.Replica) float64 {
	tb.Helper()
	var ticks int64
	for _, r := range rs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.PID))
		if err != nil {
			tb.Fatalf("%s's CPU time: %v", r.Name, err)
		}
		// "PID (COMM) STATE PPID ...": fields after COMM, from 3.
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 13 {
			tb.Fatalf("%s: /proc/%d/stat: %q", r.Name, r.PID, s)
		}
		for _, f := range fields[11:13] { // utime, stime
			n, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				tb.Fatalf("%s: /proc/%d/stat: %v", r.Name, r.PID, err)
			}
			ticks += n
		}
	}
	return float64(ticks) / clockTicks
}
