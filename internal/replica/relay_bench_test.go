package replica_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/fixture"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	legationv1 "github.com/legation-io/legation/proto/legation/v1"
)

// relayEnvoysEnv sets the Envoys of BenchmarkRelayedEnvoys (default 500).
const relayEnvoysEnv = "LEGATION_RELAY_ENVOYS"

// relayProfileEnv, set to a path prefix, has BenchmarkRelayedEnvoys write
// a heap profile (PREFIX.CASE.heap, every 4 KiB allocated sampled) and a
// goroutine profile (PREFIX.CASE.goroutine, text) of each case while its
// Envoys are open and synced; CASE is local or relayed.
const relayProfileEnv = "LEGATION_RELAY_PROFILE"

// relayCaseEnv, set to local or relayed, makes the test binary one case
// of BenchmarkRelayedEnvoys (relayCase), pushing $LEGATION_RELAY_PUSHES
// changes; it prints its figures on stdout after relayFiguresPrefix.
const (
	relayCaseEnv       = "LEGATION_RELAY_CASE"
	relayPushesEnv     = "LEGATION_RELAY_PUSHES"
	relayFiguresPrefix = "relay-figures: "
)

// The fleet's shape, the memory benchmarks' (xdstest.BenchmarkStreamMemory):
// every Envoy holds 200 clusters (CDS, wildcard) and their 200 endpoint
// sets of 20 endpoints (EDS, by name).
const (
	fleetClusters  = 200
	fleetEndpoints = 20
)

// The pauses of a push: ackSettle after the last Envoy sent its ACK, for
// the replicas to take it, inside the measured window; pushQuiet after
// it, outside, for the status records the home writes of the ACKs (once
// a second, the same whether the Envoys are relayed or not) to be written
// before the next push.
const (
	ackSettle = 20 * time.Millisecond
	pushQuiet = 1500 * time.Millisecond
)

// BenchmarkRelayedEnvoys compares what an Envoy costs the cluster when
// its stream is relayed with what it costs when it reaches its home, in
// a fleet's shape: one connection per Envoy, SotW ADS holding 200
// clusters and their 200 endpoint sets. Two replicas, a and b, share a
// process and an etcd; the Envoys (fleetClients) are a process of their
// own, so that what the replicas' process holds and spends is theirs
// (with etcd's, which does not grow with the Envoys). Every Envoy's home
// is b. served=local: they connect to b; served=relayed: to a, which
// relays each to b. Each case runs in a process of its own (relayCase):
// in one process the second case would reuse the heap the first freed,
// and look cheaper than it is.
//
// A case opens its Envoys and reads what the process holds beyond what
// it held before, per Envoy: resident memory once free memory is
// returned to the system (rss-KiB/envoy), live heap (heap-KiB/envoy),
// goroutine stacks (stack-KiB/envoy) and goroutines. Each op is then one
// endpoint set changed and pushed to every Envoy, ending once each has
// ACKed it: the process's CPU per change per Envoy (cpu-us/envoy/change),
// what it allocated (alloc-B/envoy/change, which the collector pays for
// later) and the time to the last ACK (ms-to-all-acked). ns/op is the
// case's whole process, set-up included, over b.N. served=relayed, run
// after served=local, reports the ratios relayed/local too. The CPU of
// a single push is noisy: -benchtime 10x steadies it.
//
// A case fails unless every Envoy is synced at b (200 clusters and 200
// endpoint sets ACKed, and each push), a serves none of them, and a
// relays all of them (legation_relay_streams_relayed) or none. The
// Envoys: $LEGATION_RELAY_ENVOYS, 500 unless set.
func BenchmarkRelayedEnvoys(b *testing.B) {
	n := countFromEnv(b, relayEnvoysEnv, 500)
	if served := os.Getenv(relayCaseEnv); served != "" {
		relayCase(b, served, n, countFromEnv(b, relayPushesEnv, 1))
		return
	}
	var local *relayFigures
	for _, served := range []string{"local", "relayed"} {
		b.Run("served="+served, func(b *testing.B) {
			b.Run(fmt.Sprintf("envoys=%d", n), func(b *testing.B) {
				fig := runRelayCase(b, served, b.N)
				fig.report(b, n)
				switch {
				case served == "local":
					local = &fig
				case local != nil:
					fig.reportRatios(b, *local)
				}
			})
		})
	}
}

// runRelayCase runs one case with pushes changes in a process of its
// own and returns its figures.
func runRelayCase(b *testing.B, served string, pushes int) relayFigures {
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^BenchmarkRelayedEnvoys$", "-test.benchtime=1x", "-test.timeout=10m")
	cmd.Env = append(os.Environ(), relayCaseEnv+"="+served, fmt.Sprintf("%s=%d", relayPushesEnv, pushes))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("the %s case: %v; its output:\n%s", served, err, out)
	}
	for line := range strings.Lines(string(out)) {
		if js, ok := strings.CutPrefix(line, relayFiguresPrefix); ok {
			var fig relayFigures
			if err := json.Unmarshal([]byte(js), &fig); err != nil {
				b.Fatalf("the %s case's figures %q: %v", served, js, err)
			}
			return fig
		}
	}
	b.Fatalf("the %s case printed no figures; its output:\n%s", served, out)
	return relayFigures{}
}

// relayCase is one case, served local or relayed, of n Envoys: it opens
// them, makes pushes changes and prints the figures.
func relayCase(b *testing.B, served string, n, pushes int) {
	if served != "local" && served != "relayed" {
		b.Fatalf("%s=%q: want local or relayed", relayCaseEnv, served)
	}
	if os.Getenv(relayProfileEnv) != "" {
		rate := runtime.MemProfileRate
		runtime.MemProfileRate = 4096
		b.Cleanup(func() { runtime.MemProfileRate = rate })
	}
	c := startRelayPair(b, n)
	f := c.open(b, served)
	b.Cleanup(func() { f.close(b) })
	fig := f.push(b, pushes)
	js, err := json.Marshal(fig)
	if err != nil {
		b.Fatal(err)
	}
	fmt.Printf("%s%s\n", relayFiguresPrefix, js)
}

// relayPair is the two replicas and their etcd, holding the fleet's
// resources.
type relayPair struct {
	e          *xdsEnv
	a, b       *running
	regA, regB prometheus.Gatherer
	ids        []string // the Envoys' node ids, each homed at b
	names      []string // the clusters, and the endpoint sets
	changes    int      // endpoint sets changed so far
}

// startRelayPair writes the fleet's resources, starts replicas a and b
// and waits until they are a ring of two, and picks n node ids homed at
// b.
func startRelayPair(b *testing.B, n int) *relayPair {
	c := &relayPair{e: newXDSEnv(b)}
	var puts []store.Put
	for i := range fleetClusters {
		name := fmt.Sprintf("fleet-%03d", i)
		c.names = append(c.names, name)
		puts = append(puts,
			xdstest.Put(b, resource.Cluster, store.DefaultScope, xdstest.Cluster(name, 1000)),
			xdstest.Put(b, resource.Endpoint, store.DefaultScope, xdstest.Endpoints(name, fixture.Ports(10000, fleetEndpoints)...)))
	}
	var rev int64
	for i := 0; i < len(puts); i += 100 { // within etcd's default --max-txn-ops
		rev = c.e.Apply(b, puts[i:min(i+100, len(puts))])
	}
	replica := func(name string) (*running, prometheus.Gatherer) {
		cfg := c.e.config(b)
		cfg.Name = name
		cfg.StreamRate = 0 // the Envoys connect as fast as they can
		reg := prometheus.NewRegistry()
		cfg.Registerer = reg
		return startXDS(b, cfg, rev), reg
	}
	c.a, c.regA = replica("a")
	c.b, c.regB = replica("b")
	for _, r := range []*running{c.a, c.b} {
		xdstest.WaitFor(b, "a ring of two replicas", func() (bool, string) {
			cl := getDebugCluster(b, r)
			return len(cl.Ring) == 2, jsonString(cl)
		})
	}
	for i := 0; len(c.ids) < n; i++ {
		id := fmt.Sprintf("envoy-%d", i)
		if c.a.HomeForTest(id) == "b" && c.b.HomeForTest(id) == "b" {
			c.ids = append(c.ids, id)
		}
	}
	return c
}

// fleet is the Envoys of one case, open.
type fleet struct {
	pair    *relayPair
	served  string // local or relayed
	clients *clientProcess
	mem     relayFigures // the memory figures, read when the Envoys opened
}

// relayFigures are a case's figures, per Envoy but for PushMS: bytes,
// goroutines, CPU microseconds and bytes allocated per change, and the
// milliseconds from a change's write to the last ACK.
type relayFigures struct {
	RSS, Heap, Stack, Goroutines float64
	CPU, Alloc, PushMS           float64
}

// open connects the Envoys to b (local) or to a (relayed), waits until
// each is synced, and reads what they cost the process.
func (c *relayPair) open(b *testing.B, served string) *fleet {
	addr := c.b.XDSAddr()
	if served == "relayed" {
		addr = c.a.XDSAddr()
	}
	before := settledSample(b)
	f := &fleet{pair: c, served: served, clients: startClientProcess(b, fleetClientEnv+"=1")}
	spec, err := json.Marshal(fleetSpec{Addr: addr, IDs: c.ids, EDS: c.names})
	if err != nil {
		b.Fatal(err)
	}
	f.clients.say(b, string(spec))
	f.clients.expect(b, "open")
	c.checkServed(b, served, 0)
	after := settledSample(b)
	n := float64(len(c.ids))
	f.mem = relayFigures{
		RSS:        float64(after.rss-before.rss) / n,
		Heap:       float64(after.live-before.live) / n,
		Stack:      float64(after.stack-before.stack) / n,
		Goroutines: float64(after.goroutines-before.goroutines) / n,
	}
	writeRelayProfiles(b, served)
	return f
}

// close stops the Envoys and waits until neither replica holds their
// streams. A nil fleet is closed already.
func (f *fleet) close(tb testing.TB) {
	if f == nil {
		return
	}
	f.clients.stop()
	xdstest.WaitFor(tb, "the Envoys' streams gone from both replicas", func() (bool, string) {
		onA, onB := len(getStreams(tb, f.pair.a).Streams), len(getStreams(tb, f.pair.b).Streams)
		relayed := xdstest.GaugeSum(tb, f.pair.regA, relayedGauge)
		return onA+onB == 0 && relayed == 0, fmt.Sprintf("a serves %d, b %d, a relays %v", onA, onB, relayed)
	})
}

// relayedGauge counts the streams a replica relays to their homes.
const relayedGauge = "legation_relay_streams_relayed"

// checkServed fails tb unless b serves every Envoy, each holding the
// clusters and endpoint sets and having ACKed them, the endpoint sets at
// revision rev or later; a serves none, relaying all of them (relayed)
// or none (local).
func (c *relayPair) checkServed(tb testing.TB, served string, rev int64) {
	tb.Helper()
	fleetIDs := make(map[string]bool, len(c.ids))
	for _, id := range c.ids {
		fleetIDs[id] = true
	}
	xdstest.WaitFor(tb, "every Envoy synced at b", func() (bool, string) {
		d := getStreams(tb, c.b)
		if len(d.Streams) != len(c.ids) {
			return false, fmt.Sprintf("b serves %d streams, want %d", len(d.Streams), len(c.ids))
		}
		for _, s := range d.Streams {
			if why := syncedWhy(s, fleetIDs, rev); why != "" {
				return false, why
			}
		}
		return true, ""
	})
	if onA := len(getStreams(tb, c.a).Streams); onA != 0 {
		tb.Fatalf("a serves %d streams, want none (every Envoy's home is b)", onA)
	}
	want := 0.0
	if served == "relayed" {
		want = float64(len(c.ids))
	}
	if got := xdstest.GaugeSum(tb, c.regA, relayedGauge); got != want {
		tb.Fatalf("a relays %v streams, want %v (served=%s)", got, want, served)
	}
	if got := xdstest.GaugeSum(tb, c.regB, relayedGauge); got != 0 {
		tb.Fatalf("b relays %v streams, want none", got)
	}
}

// syncedWhy says why stream s of /debug/streams is not one of the
// fleet's Envoys holding and having ACKed every cluster and every
// endpoint set, the endpoint sets at rev or later; "" when it is.
func syncedWhy(s xdstest.SotWStatus, fleetIDs map[string]bool, rev int64) string {
	if !fleetIDs[s.NodeID] {
		return fmt.Sprintf("b serves node %q, not one of the fleet's", s.NodeID)
	}
	for _, typ := range []string{"cluster", "endpoint"} {
		t := s.Types[typ]
		if t == nil || t.Resources != fleetClusters || t.VersionAcked == "" || t.VersionAcked != t.VersionSent {
			return fmt.Sprintf("node %s, %s: %s, want %d resources ACKed", s.NodeID, typ, jsonString(t), fleetClusters)
		}
	}
	if v, err := strconv.ParseInt(s.Types["endpoint"].VersionAcked, 10, 64); err != nil || v < rev {
		return fmt.Sprintf("node %s ACKed endpoints at %q, want %d or later", s.NodeID, s.Types["endpoint"].VersionAcked, rev)
	}
	return ""
}

// push makes pushes pushes of one changed endpoint set to every Envoy
// and returns the case's figures: its memory figures, and the CPU and
// allocations of a push, from the change's write until every Envoy has
// ACKed it (and ackSettle more).
func (f *fleet) push(tb testing.TB, pushes int) relayFigures {
	fig := f.mem
	var cpu, wall time.Duration
	var alloc uint64
	var rev int64
	for range pushes {
		start := xdstest.MarkNow()
		rev = f.pair.change(tb)
		f.clients.say(tb, fmt.Sprintf("wait %d", rev))
		f.clients.expect(tb, "acked")
		wall += time.Since(start.At)
		time.Sleep(ackSettle)
		end := xdstest.MarkNow()
		cpu += end.CPU - start.CPU
		alloc += end.Mem.TotalAlloc - start.Mem.TotalAlloc
		time.Sleep(pushQuiet)
	}
	f.pair.checkServed(tb, f.served, rev)
	per := float64(pushes) * float64(len(f.pair.ids))
	fig.CPU = float64(cpu.Microseconds()) / per
	fig.Alloc = float64(alloc) / per
	fig.PushMS = float64(wall.Milliseconds()) / float64(pushes)
	return fig
}

// change writes a new version of one endpoint set, straight into etcd
// in the store's envelope (as xdstest's push benchmarks do: a plan would
// read every resource, CPU that is not the push's), and returns the
// revision of the write.
func (c *relayPair) change(tb testing.TB) int64 {
	tb.Helper()
	c.changes++
	name := c.names[c.changes%len(c.names)]
	p := xdstest.Put(tb, resource.Endpoint, store.DefaultScope, xdstest.Endpoints(name, fixture.Ports(uint32(20000+c.changes), fleetEndpoints)...))
	val, err := proto.Marshal(&legationv1.Envelope{Body: p.Body, WrittenBy: "bench"})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	resp, err := c.e.Client.Put(ctx, c.e.Store.EtcdKey(p.Key), string(val))
	if err != nil {
		tb.Fatalf("put %s: %v", name, err)
	}
	return resp.Header.Revision
}

// report reports the figures of one case over n Envoys.
func (fig relayFigures) report(b *testing.B, n int) {
	b.ReportMetric(fig.RSS/1024, "rss-KiB/envoy")
	b.ReportMetric(fig.Heap/1024, "heap-KiB/envoy")
	b.ReportMetric(fig.Stack/1024, "stack-KiB/envoy")
	b.ReportMetric(fig.Goroutines, "goroutines/envoy")
	b.ReportMetric(fig.CPU, "cpu-us/envoy/change")
	b.ReportMetric(fig.Alloc, "alloc-B/envoy/change")
	b.ReportMetric(fig.PushMS, "ms-to-all-acked")
	b.ReportMetric(float64(n), "envoys")
}

// reportRatios reports the relayed case's figures over the local one's.
func (fig relayFigures) reportRatios(b *testing.B, local relayFigures) {
	b.ReportMetric(fig.RSS/local.RSS, "rss-relayed/local")
	b.ReportMetric((fig.Heap+fig.Stack)/(local.Heap+local.Stack), "heap+stack-relayed/local")
	b.ReportMetric(fig.Goroutines/local.Goroutines, "goroutines-relayed/local")
	b.ReportMetric(fig.CPU/local.CPU, "cpu-relayed/local")
}

// memSample is what the process holds, read after collections: resident
// memory once free memory is returned to the system, live heap, goroutine
// stacks and goroutines.
type memSample struct {
	rss, live, stack int64
	goroutines       int
}

func settledSample(tb testing.TB) memSample {
	s := idleSample() // collects, and reads the stacks and goroutines
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	debug.FreeOSMemory()
	return memSample{rss: rssBytes(tb), live: int64(ms.HeapAlloc), stack: int64(s.stack), goroutines: s.goroutines}
}

// writeRelayProfiles writes the heap and goroutine profiles of a case
// (see relayProfileEnv), if asked to.
func writeRelayProfiles(tb testing.TB, served string) {
	prefix := os.Getenv(relayProfileEnv)
	if prefix == "" {
		return
	}
	runtime.GC() // the heap profile is of the last collection
	for _, p := range []struct {
		name  string
		debug int
	}{{"heap", 0}, {"goroutine", 1}} {
		f, err := os.Create(prefix + "." + served + "." + p.name)
		if err != nil {
			tb.Fatal(err)
		}
		err = pprof.Lookup(p.name).WriteTo(f, p.debug)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
}
