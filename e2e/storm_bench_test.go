package e2e

import (
	"context"
	"testing"
	"time"
)

// BenchmarkReconnectStorm measures a load balancer restart: 3 replicas
// behind HAProxy, 9,000 raw clients (half SotW, half delta, each
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
//     kill (1: the restart alone; more: attempts while HAProxy was
//     down, streams refused or moved).
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

func benchStormOnce(b *testing.B) {
	b.StopTimer()
	c, f, want := benchCluster(b, "storm", envClients(b, "LEGATION_STORM_CLIENTS", 9000))
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
	h := waitHomedEvery(b, c, f, want, kill, 3*clusterTimeout, benchPoll)
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
