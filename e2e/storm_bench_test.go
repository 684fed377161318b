package e2e

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/tools/localcluster"
)

// BenchmarkReconnectStorm measures a load balancer restart: 3 replicas
// behind HAProxy, stormClients raw clients (half SotW, half delta, each
// on a connection of its own) settled on their homes; then HAProxy is
// killed, which closes every client's connection at once, and started
// again. Every client reconnects at once, each after its own backoff,
// and the replicas admit the new streams at their --stream-rate (1,000
// a second each, the default). It measures until every node is settled
// on its home again, every type ACKed at the current version (polling
// the replicas' /debug/streams every benchPoll). Run it alone, once,
// without -race:
//
//	go test -run '^$' -bench BenchmarkReconnectStorm -benchtime 1x ./e2e/
//
// LEGATION_STORM_CLIENTS sets the clients (9,000 by default: HAProxy
// holds two descriptors a connection, and at the usual limit of 20,000
// open files a process it cannot take 10,000).
// Metrics:
//   - resync-s: from the kill until every node is settled on its home.
//   - resync-p50-s, resync-p99-s, resync-max-s: the same per node, to the
//     first poll that saw it settled.
//   - lb-down-s: how long HAProxy was down (the kill and the start).
//   - streams-ended/client: the streams each client saw end after the
//     kill (1: the restart alone; more: a stream refused or moved).
//   - replica-cpu-s: CPU seconds the replicas used from the kill until
//     all settled.
func BenchmarkReconnectStorm(b *testing.B) {
	if testing.Short() {
		b.Skip("starts etcd, xds-node and HAProxy processes and thousands of clients")
	}
	b.ReportMetric(0, "ns/op") // one storm is not an op: see the metrics
	for range b.N {
		benchStormOnce(b)
	}
}

// stormClients is BenchmarkReconnectStorm's fleet size:
// LEGATION_STORM_CLIENTS, or 9,000.
func stormClients(b *testing.B) clientMix {
	n := 9000
	if v := os.Getenv("LEGATION_STORM_CLIENTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 2 {
			b.Fatalf("LEGATION_STORM_CLIENTS=%q: want a number of clients, at least 2", v)
		}
	}
	return clientMix{SotW: n / 2, Delta: n - n/2}
}

func benchStormOnce(b *testing.B) {
	b.StopTimer()
	cfg := clusterConfig(clusterFlags)
	cfg.Timeout = 2 * time.Minute
	c := localcluster.StartForTest(b, cfg)
	c.WaitRing()
	rev := clusterApply(b, c, fleetYAML(1, 1))
	c.WaitRevision(rev)
	start := time.Now()
	mix := stormClients(b)
	f := startFleet(b, c.LBAddr, "storm", mix, 1)
	synced := f.waitSynced(b, 1, rev)
	want := f.expect(rev, rev)
	h := waitHomed(b, c, f, want, start, 3*clusterTimeout)
	b.Logf("%s synced through HAProxy in %s, settled on their homes in %s", mix, synced.Round(time.Millisecond), h.All.Round(time.Millisecond))

	lb := c.Cluster().Config().NamePrefix + "haproxy"
	replicas := c.Replicas()
	cpu0 := cpuSeconds(b, replicas)
	ctx := context.Background()
	b.StartTimer()
	kill := time.Now()
	if err := c.Cluster().Kill(ctx, lb); err != nil {
		b.Fatal(err)
	}
	if err := c.Cluster().Start(ctx, lb); err != nil {
		b.Fatal(err)
	}
	lbDown := time.Since(kill)
	h = waitHomedEvery(b, c, f, want, kill, 3*clusterTimeout, benchPoll)
	b.StopTimer()
	cpu := cpuSeconds(b, replicas) - cpu0

	ended := 0
	for _, cl := range f.raw {
		ended += len(cl.endsSince(kill))
	}
	p50, p99, pmax := percentiles(h.PerNode)
	b.ReportMetric(h.All.Seconds(), "resync-s")
	b.ReportMetric(p50.Seconds(), "resync-p50-s")
	b.ReportMetric(p99.Seconds(), "resync-p99-s")
	b.ReportMetric(pmax.Seconds(), "resync-max-s")
	b.ReportMetric(lbDown.Seconds(), "lb-down-s")
	b.ReportMetric(perClient(ended, len(f.raw)), "streams-ended/client")
	b.ReportMetric(cpu, "replica-cpu-s")
	b.Logf("HAProxy restarted (down %s) under %d clients: every node settled on its home again %s after the kill (%d polls); per node p50 %s, p99 %s, max %s; %d streams ended (%.2f a client); the replicas used %.2f CPU s",
		lbDown.Round(time.Millisecond), len(f.raw), h.All.Round(time.Millisecond), h.Polls, p50, p99, pmax, ended, perClient(ended, len(f.raw)), cpu)
	if h.All <= 0 || len(h.PerNode) != len(want) {
		b.Fatalf("%d of %d nodes settled", len(h.PerNode), len(want))
	}
}
