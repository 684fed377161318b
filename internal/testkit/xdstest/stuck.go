package xdstest

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
)

// The stuck-client scenario (a promise of docs/concepts/design.md): normal clients and
// one that never reads, endpoint updates applied back to back; the stuck
// stream must be cut within the send timeout, hold little heap, and leave
// the others' commit-to-ACK latency as it was.

// StuckSize is the scale of a stuck-client run: stuck_small.go for `go
// test` (make test), stuck_full.go under the e2e build tag (the full size:
// 999 normal clients and 2,000 updates).
type StuckSize struct {
	// Normal is the number of normal clients (one stream each).
	Normal int
	// Updates is the number of endpoint updates, each one transaction.
	Updates int
}

const (
	// stuckPerConn normal streams share one ClientConn.
	stuckPerConn = 50
	// stuckPorts is the size of the CLA the normal clients subscribe to
	// (~25 bytes an endpoint): small, so that the run measures the
	// fan-out, not loopback bandwidth.
	stuckPorts = 20
	// stuckBigPorts is the size of the CLA the stuck client subscribes
	// to besides "e": ~200 KB, over the 64 KiB flow-control window its
	// connection is given and grpc-go's 64 KiB write quota per stream
	// (a send waits while the quota is spent; the first one only needs
	// some left). So the initial response goes out, and the server's next
	// send to it, of the first update, blocks: the time its send blocked
	// is known from the client. Written once per run, so that the
	// updates stay small; the stuck stream still wakes on each (it
	// subscribes to "e"), and holds the snapshots published while
	// blocked.
	stuckBigPorts = 8000
	// stuckMidPorts is the size of the CLA "mid" (~10 KB) the stuck
	// client subscribes to besides, written by every update: a server
	// that does not block on the update after "big" (delta) still fills
	// the stuck stream's window and write quota (128 KiB) within
	// stuckFillUpdates updates.
	stuckMidPorts    = 400
	stuckFillUpdates = 14
	// stuckWindow is the stuck client's HTTP/2 windows (stream and
	// connection); setting them turns off grpc-go's BDP estimation,
	// which would otherwise grow them.
	stuckWindow = 64 << 10
)

// StuckServer is the server (or replicas) a stuck-client run measures,
// built by the test's own package.
type StuckServer struct {
	// Addr is where the normal clients connect.
	Addr string
	// StuckAddr is where the stuck client connects; "" is Addr.
	StuckAddr string
	// Delta says the streams are delta ADS; otherwise SotW ADS.
	Delta bool
	// Apply writes puts in one transaction and returns its revision once
	// every view serving the clients has it.
	Apply func(tb testing.TB, puts []store.Put) int64
	// Cuts is the number of streams cut by the send timeout so far where
	// the stuck client is connected.
	Cuts func() float64
	// SendTimeout is the send timeout of whatever cuts the stuck stream.
	SendTimeout time.Duration
	// Etcd, if set, is the client of the etcd holding the resources: each
	// run compacts it first, so that the second run's heap does not also
	// hold the first run's etcd history (the test's etcd shares its
	// process) and the two runs' heaps compare.
	Etcd *clientv3.Client
}

// StuckResult is what one run measured.
type StuckResult struct {
	// P50, P99 and Max are over every (update, normal client) pair: the
	// time from the update's Apply returning to the client's sending its
	// ACK of the first version holding it (0 when the client had ACKed
	// before Apply returned).
	P50, P99, Max time.Duration
	// HeapInuse is runtime.MemStats.HeapInuse after the updates, with the
	// normal streams still open, once garbage collected; HeapBefore the
	// same once the clients were synced, before the updates. A run's
	// growth (HeapInuse - HeapBefore) is what compares between runs: the
	// process's heap also grows from one run to the next by itself (30
	// MiB measured between two runs without a stuck client at 999
	// clients and 2,000 updates).
	HeapInuse, HeapBefore uint64
	// Cut is how long after the first update's Apply returned (when the
	// stuck stream's send blocked, at the latest FillTime later) the
	// server cut its stream; 0 in a run without it.
	Cut time.Duration
	// FillTime is the time from the first update's Apply returning to
	// the stuckFillUpdates-th's: by then the stuck stream's send has
	// blocked.
	FillTime time.Duration
	// Err is the status the stuck client read at the end of its stream.
	Err error
}

func (r StuckResult) String() string {
	return fmt.Sprintf("commit-to-ACK p50 %s, p99 %s, max %s; heap in use %d KiB, %+d KiB over the run",
		r.P50.Round(10*time.Microsecond), r.P99.Round(10*time.Microsecond), r.Max.Round(10*time.Microsecond), r.HeapInuse>>10,
		(int64(r.HeapInuse)-int64(r.HeapBefore))>>10)
}

// stuckClient is one normal stream: its goroutine receives and ACKs every
// response and records when it ACKed which revision.
type stuckClient struct {
	st   grpc.ClientStream
	mu   sync.Mutex // guards acks
	acks []stuckAck
}

type stuckAck struct {
	rev int64
	at  time.Time
}

func stuckPorts32(base, n int) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = uint32(1000 + (base+i)%60000)
	}
	return p
}

// stuckPuts is update i: the CLA "e" every client subscribes to, and
// "mid", which only the stuck client subscribes to; update 0 also writes
// "big", which only the stuck client subscribes to.
func stuckPuts(tb testing.TB, i int) []store.Put {
	puts := []store.Put{
		Put(tb, resource.Endpoint, store.DefaultScope, Endpoints("e", stuckPorts32(i, stuckPorts)...)),
		Put(tb, resource.Endpoint, store.DefaultScope, Endpoints("mid", stuckPorts32(i, stuckMidPorts)...)),
	}
	if i == 0 {
		puts = append(puts, Put(tb, resource.Endpoint, store.DefaultScope, Endpoints("big", stuckPorts32(i, stuckBigPorts)...)))
	}
	return puts
}

// RunStuck runs size.Normal normal clients through size.Updates updates
// on s, with a stuck client alongside when stuck is set, and returns what
// it measured. The normal clients are nodes "normal-<i>", the stuck one
// "stuck". It fails tb when a normal stream fails or, with the stuck
// client, when the stuck stream is not cut with UNAVAILABLE.
func RunStuck(tb testing.TB, s StuckServer, size StuckSize, stuck bool) StuckResult {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &stuckRun{tb: tb, ctx: ctx, s: s, errs: make(chan error, size.Normal)}
	r.seed()
	defer r.closeConns()
	r.startNormal(size.Normal)
	defer r.wg.Wait()
	defer cancel()
	r.waitClients("every normal client synced", func(c *stuckClient) bool { return c.acked() > 0 })

	var res StuckResult
	var sc *stuckStream
	if stuck {
		sc = r.openStuck()
	}
	res.HeapBefore = heapInuse()
	applied := r.updates(size.Updates, sc)
	last := applied[len(applied)-1].rev
	r.waitClients("every normal client ACKed the last update", func(c *stuckClient) bool { return c.acked() >= last })
	if stuck {
		res.FillTime = applied[min(stuckFillUpdates, len(applied))-1].at.Sub(applied[0].at)
		select {
		case at := <-sc.cut:
			res.Cut = at.Sub(sc.blocked)
		case <-time.After(Timeout):
			tb.Fatalf("the stuck stream was not cut within %s", Timeout)
		}
	}
	res.HeapInuse = heapInuse()
	res.P50, res.P99, res.Max = r.latencies(applied)
	if stuck {
		// The stuck client reads at last: what was buffered, then the
		// status.
		res.Err = sc.drain(s.Delta)
		if status.Code(res.Err) != codes.Unavailable || !strings.Contains(res.Err.Error(), "--send-timeout") {
			tb.Errorf("the stuck stream ended with %v, want UNAVAILABLE naming --send-timeout", res.Err)
		}
	}
	return res
}

// stuckRun is one RunStuck: the server, the normal clients and their
// connections.
type stuckRun struct {
	tb    testing.TB
	ctx   context.Context
	s     StuckServer
	conns []*grpc.ClientConn // the normal clients', then the stuck one's
	cls   []*stuckClient
	wg    sync.WaitGroup // the normal clients' goroutines
	errs  chan error     // a normal stream's failure
}

// stuckStream is the stuck client's stream: it subscribes and never
// reads until drained.
type stuckStream struct {
	st grpc.ClientStream
	// blocked is when the server's send to it began to block; cut gets
	// the time the server cut it.
	blocked time.Time
	cut     chan time.Time
}

// seed writes update 0 and compacts etcd, if any, at its revision.
func (r *stuckRun) seed() {
	r.tb.Helper()
	rev := r.s.Apply(r.tb, stuckPuts(r.tb, 0))
	if r.s.Etcd != nil {
		if _, err := r.s.Etcd.Compact(r.ctx, rev, clientv3.WithCompactPhysical()); err != nil {
			r.tb.Fatalf("compacting etcd at %d: %v", rev, err)
		}
	}
}

func (r *stuckRun) closeConns() {
	for _, cc := range r.conns {
		cc.Close()
	}
}

// startNormal opens the n normal clients' streams, stuckPerConn to a
// connection, and runs each on a goroutine of wg.
func (r *stuckRun) startNormal(n int) {
	r.tb.Helper()
	r.cls = make([]*stuckClient, n)
	for i := range r.cls {
		if i%stuckPerConn == 0 {
			r.conns = append(r.conns, Dial(r.tb, r.s.Addr))
		}
		c := &stuckClient{}
		c.st = openStuckStream(r.tb, r.ctx, r.conns[len(r.conns)-1], r.s.Delta, fmt.Sprintf("normal-%d", i), "e")
		r.cls[i] = c
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if err := c.run(r.ctx, r.s.Delta); err != nil && r.ctx.Err() == nil {
				r.errs <- err
			}
		}()
	}
}

// waitClients waits until every normal client is there (what says it).
func (r *stuckRun) waitClients(what string, there func(*stuckClient) bool) {
	r.tb.Helper()
	WaitFor(r.tb, what, func() (bool, string) {
		n := 0
		for _, c := range r.cls {
			if there(c) {
				n++
			}
		}
		return n == len(r.cls), fmt.Sprintf("%d of %d", n, len(r.cls))
	})
}

// openStuck opens the stuck client's stream, on a connection of its own
// with small windows, and watches for its cut while the updates run.
func (r *stuckRun) openStuck() *stuckStream {
	r.tb.Helper()
	cutsBefore := r.s.Cuts()
	addr := r.s.StuckAddr
	if addr == "" {
		addr = r.s.Addr
	}
	cc := Dial(r.tb, addr, grpc.WithInitialWindowSize(stuckWindow), grpc.WithInitialConnWindowSize(stuckWindow))
	r.conns = append(r.conns, cc)
	sc := &stuckStream{blocked: time.Now(), cut: make(chan time.Time, 1)}
	sc.st = openStuckStream(r.tb, r.ctx, cc, r.s.Delta, "stuck", "e", "mid", "big")
	if r.s.Delta {
		// A delta stream has one response per type outstanding
		// until its ACK: a second type's response is the send
		// that blocks, at once (as in delta's
		// TestSendTimeoutStuckClient).
		if err := sc.st.SendMsg(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Listener.URL}); err != nil {
			r.tb.Fatal(err)
		}
	}
	go func() {
		for r.ctx.Err() == nil {
			if r.s.Cuts() > cutsBefore {
				sc.cut <- time.Now()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return sc
}

// updates applies updates 1 to n, failing tb if a normal stream failed
// meanwhile, and returns their revisions and times.
func (r *stuckRun) updates(n int, sc *stuckStream) []stuckAck {
	r.tb.Helper()
	applied := make([]stuckAck, 0, n)
	for i := 1; i <= n; i++ {
		rev := r.s.Apply(r.tb, stuckPuts(r.tb, i))
		applied = append(applied, stuckAck{rev, time.Now()})
		if i == 1 && !r.s.Delta && sc != nil {
			// The stuck stream's send of this update blocks; it began
			// when the view published it, a little before Apply
			// returned.
			sc.blocked = applied[0].at
		}
		select {
		case err := <-r.errs:
			r.tb.Fatalf("a normal stream failed: %v", err)
		default:
		}
	}
	return applied
}

// latencies are the median, 99th percentile and largest time from an
// update's apply to a normal client's ACK of it or of a later one.
func (r *stuckRun) latencies(applied []stuckAck) (p50, p99, maxLat time.Duration) {
	r.tb.Helper()
	lat := make([]time.Duration, 0, len(applied)*len(r.cls))
	for _, c := range r.cls {
		c.mu.Lock()
		acks := slices.Clone(c.acks)
		c.mu.Unlock()
		j := 0
		for _, a := range applied {
			for j < len(acks) && acks[j].rev < a.rev {
				j++
			}
			if j == len(acks) {
				r.tb.Fatalf("a client never ACKed revision %d", a.rev)
			}
			lat = append(lat, max(0, acks[j].at.Sub(a.at)))
		}
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
}

// drain reads the stuck stream until it ends, and returns its end.
func (sc *stuckStream) drain(isDelta bool) error {
	for {
		var err error
		if isDelta {
			err = sc.st.RecvMsg(new(discoveryv3.DeltaDiscoveryResponse))
		} else {
			err = sc.st.RecvMsg(new(discoveryv3.DiscoveryResponse))
		}
		if err != nil {
			return err
		}
	}
}

// heapInuse is the heap in use after two collections.
func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// openStuckStream opens an ADS stream on cc for node id subscribing to
// the CLAs names, and sends its first request.
func openStuckStream(tb testing.TB, ctx context.Context, cc *grpc.ClientConn, isDelta bool, id string, names ...string) grpc.ClientStream {
	tb.Helper()
	adsc := discoveryv3.NewAggregatedDiscoveryServiceClient(cc)
	var st grpc.ClientStream
	var req proto.Message
	var err error
	if isDelta {
		st, err = adsc.DeltaAggregatedResources(ctx)
		req = &discoveryv3.DeltaDiscoveryRequest{Node: Node(id, "stuck"), TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: names}
	} else {
		st, err = adsc.StreamAggregatedResources(ctx)
		req = &discoveryv3.DiscoveryRequest{Node: Node(id, "stuck"), TypeUrl: resource.Endpoint.URL, ResourceNames: names}
	}
	if err != nil {
		tb.Fatalf("%s: open: %v", id, err)
	}
	if err := st.SendMsg(req); err != nil {
		tb.Fatalf("%s: send: %v", id, err)
	}
	return st
}

// acked is the last revision c ACKed, 0 if none.
func (c *stuckClient) acked() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.acks) == 0 {
		return 0
	}
	return c.acks[len(c.acks)-1].rev
}

// run receives and ACKs every response until the stream ends.
func (c *stuckClient) run(ctx context.Context, isDelta bool) error {
	for {
		var ver, nonce string
		var req proto.Message
		if isDelta {
			m := new(discoveryv3.DeltaDiscoveryResponse)
			if err := c.st.RecvMsg(m); err != nil {
				return err
			}
			ver, nonce = m.GetSystemVersionInfo(), m.GetNonce()
			req = &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResponseNonce: nonce}
		} else {
			m := new(discoveryv3.DiscoveryResponse)
			if err := c.st.RecvMsg(m); err != nil {
				return err
			}
			ver, nonce = m.GetVersionInfo(), m.GetNonce()
			req = &discoveryv3.DiscoveryRequest{TypeUrl: resource.Endpoint.URL, VersionInfo: ver, ResponseNonce: nonce, ResourceNames: []string{"e"}}
		}
		rev, err := strconv.ParseInt(ver, 10, 64)
		if err != nil {
			return fmt.Errorf("version %q: %w", ver, err)
		}
		if err := c.st.SendMsg(req); err != nil {
			return err
		}
		at := time.Now()
		c.mu.Lock()
		c.acks = append(c.acks, stuckAck{rev, at})
		c.mu.Unlock()
		if ctx.Err() != nil {
			return nil
		}
	}
}

// CheckStuck runs s without, then with, the stuck client and checks issue
// 13's acceptance: the stuck stream cut within the send timeout (plus
// slack) of its send blocking, the heap's growth over the updates under
// 20 MiB above its growth in the run without it, and the normal clients' commit-to-ACK
// p99 within 20% of the run without it, plus an absolute slack of 20 ms:
// on two shared cores a p99 of a few ms moves by more than 20% between
// two identical runs (a GC, the other engineer's build), so the relative
// bound alone would fail on noise, not on the stuck client.
func CheckStuck(t *testing.T, s StuckServer, size StuckSize) (without, with StuckResult) {
	t.Helper()
	// cutEarly: the send blocks when the view publishes the first
	// update, measured from a little later, when Apply returns.
	const cutSlack, cutEarly, latSlack, heapBound = 2 * time.Second, 200 * time.Millisecond, 20 * time.Millisecond, 20 << 20
	without = RunStuck(t, s, size, false)
	with = RunStuck(t, s, size, true)
	t.Logf("%d normal clients, %d updates; without the stuck client: %s", size.Normal, size.Updates, without)
	t.Logf("with it: %s; the stuck stream cut %s after the first update (send timeout %s; its window filled within %s), ended with %v",
		with, with.Cut.Round(time.Millisecond), s.SendTimeout, with.FillTime.Round(time.Millisecond), with.Err)
	if with.Cut > s.SendTimeout+with.FillTime+cutSlack {
		t.Errorf("the stuck stream was cut %s after the first update, want within the send timeout %s (+%s to fill its window, +%s)", with.Cut, s.SendTimeout, with.FillTime, cutSlack)
	}
	if with.Cut < s.SendTimeout-cutEarly {
		t.Errorf("the stuck stream was cut %s after its send blocked, before the send timeout %s", with.Cut, s.SendTimeout)
	}
	growth := func(r StuckResult) int64 { return int64(r.HeapInuse) - int64(r.HeapBefore) }
	if more := growth(with) - growth(without); more > heapBound {
		t.Errorf("heap in use grew %d KiB more over the run with the stuck client (%+d KiB) than without (%+d KiB), want under %d KiB",
			more>>10, growth(with)>>10, growth(without)>>10, heapBound>>10)
	}
	if limit := without.P99*12/10 + latSlack; with.P99 > limit {
		t.Errorf("commit-to-ACK p99 %s with the stuck client, want within %s (1.2 x %s + %s)", with.P99, limit, without.P99, latSlack)
	}
	return without, with
}
