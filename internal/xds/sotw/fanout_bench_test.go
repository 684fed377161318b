//go:build unix

package sotw_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/fixture"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// The fan-out scenario of the performance targets in docs/concepts/design.md: every stream
// subscribes (EDS, by name, over ADS) to the same 200 ClusterLoadAssignments
// of 20 endpoints each; one push changes one of them.
const (
	fanoutCLAs      = 200
	fanoutEndpoints = 20
	// fanoutPerConn streams share one ClientConn: HTTP/2 multiplexes them,
	// and an Envoy fleet's many connections would only add sockets here.
	fanoutPerConn = 100
	// fanoutTimeout bounds the set-up (10,000 streams each receiving the
	// 200 assignments, ~170 KB, on 2 cores) and each push. Generous: a
	// benchmark reports how long things take, it does not judge.
	fanoutTimeout = 5 * time.Minute
)

func fanoutCLAName(i int) string { return fmt.Sprintf("cla-%03d", i) }

// fanoutCLA is assignment i with its endpoints' ports starting at base.
func fanoutCLA(i int, base uint32) *endpointv3.ClusterLoadAssignment {
	return xdstest.Endpoints(fanoutCLAName(i), fixture.Ports(base, fanoutEndpoints)...)
}

// fanoutSeed writes the 200 assignments in one transaction and returns
// their names.
func fanoutSeed(tb testing.TB, e *env) []string {
	tb.Helper()
	puts := make([]store.Put, 0, fanoutCLAs)
	names := make([]string, 0, fanoutCLAs)
	for i := 0; i < fanoutCLAs; i++ {
		puts = append(puts, xdstest.Put(tb, resource.Endpoint, store.DefaultScope, fanoutCLA(i, 10000)))
		names = append(names, fanoutCLAName(i))
	}
	e.Apply(tb, puts)
	return names
}

// BenchmarkFanout measures one endpoint change fanned out to N SotW ADS
// streams over real gRPC on 127.0.0.1, all in this process: the server
// side of the target "one endpoint change, 10,000 SotW streams on one
// replica" of docs/concepts/design.md (the clients' ACKs are the load tool's to
// measure).
//
// Set-up, not measured: a real embedded etcd, view and server; N streams
// on N/100 connections, each subscribed to the 200 assignments and having
// ACKed them. Each iteration applies one changed assignment through etcd
// and waits until every stream has received its response; the clients
// then ACK it, outside the measurement, so each push starts from the
// steady state (every stream ACKed, idle).
//
// ns/op covers the apply through etcd (its fsyncs included) plus the
// fan-out. The custom metrics cover the fan-out alone, from the moment
// the view publishes the snapshot holding the change until the last
// stream has its response:
//
//   - ms-until-all-sent: mean over the pushes; max-ms-until-all-sent: the
//     worst push.
//   - alloc-B/stream/push and allocs/stream/push: runtime.MemStats
//     TotalAlloc and Mallocs across that window, divided by N: server and
//     clients, which share the process. client=raw clients do not decode
//     responses (their codec counts the bytes and picks out version_info
//     and nonce for the ACK, allocating nothing), client=proto ones decode
//     each into a DiscoveryResponse as a real client does: the difference
//     is the decoding. Even raw clients allocate in grpc-go's receive
//     path (it reads each DATA frame under 1 KB into a new slice).
//   - server-alloc-B/stream/push and server-allocs/stream/push: the
//     server's own share, the honest figure for the target, and
//     client-alloc-B/stream/push the clients'. They come from one more
//     push, made after the timed ones with every allocation profiled
//     (runtime.MemProfileRate=1) and each allocation's stack telling whose
//     it is (packages ads and xdsstream, the stream core, and grpc-go's
//     server side, or the clients and grpc-go's client side; see
//     ownerOf).
//   - wire-B/stream/push: gRPC message bytes received per stream (the
//     DiscoveryResponse; without the 5-byte gRPC and 9-byte HTTP/2 frame
//     headers).
//   - cpu-us/stream/push: process CPU time (getrusage: user+system, server
//     and clients) across the window, divided by N.
//   - gcs/push: garbage collections that ended in the window. With 10,000
//     streams a push that overlaps one (the ACK rounds between pushes
//     allocate a lot) takes two to three times as long: the spread of
//     ms-until-all-sent from run to run comes mostly from there.
//
// Each push must reach every stream exactly once, carrying exactly the
// changed assignment; the benchmark fails otherwise.
func BenchmarkFanout(b *testing.B) {
	e := newEnv(b)
	names := fanoutSeed(b, e)
	// The streams of one configuration outlive the runs of its
	// sub-benchmark (testing runs it with b.N=1 first, then again): one
	// fixture at a time, replaced when the configuration changes, closed
	// when BenchmarkFanout ends (before the env: cleanups run last first).
	var cur *fanout
	b.Cleanup(func() {
		if cur != nil {
			cur.close(b)
		}
	})
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) {
			for _, decode := range []bool{false, true} {
				mode := "raw"
				if decode {
					mode = "proto"
				}
				b.Run("client="+mode, func(b *testing.B) {
					if cur == nil || cur.n != n || cur.decode != decode {
						if cur != nil {
							cur.close(b)
						}
						cur = &fanout{e: e, n: n, decode: decode, names: names}
						cur.open(b)
					}
					cur.run(b)
				})
			}
		})
	}
}

// BenchmarkIdleStreamMemory reports the memory each idle SotW ADS stream
// costs holding 400 resources (docs/concepts/design.md: "memory per connected
// stream ... beyond shared state: at most 50 KB"): 200 clusters by
// wildcard CDS and their 200 endpoint sets by name, the scenario and
// metrics of xdstest.BenchmarkStreamMemory, which internal/xds/delta's
// BenchmarkIdleStreamMemory runs over delta.
func BenchmarkIdleStreamMemory(b *testing.B) {
	e := newEnvWith(b, xdstest.MemoryOptions())
	xdstest.BenchmarkStreamMemory(b, xdstest.MemoryServer{
		Env:  e.Env,
		Addr: e.addr,
		Settled: func() int {
			settled := 0
			for _, s := range e.srv.Streams() {
				c, ep := s.Types[resource.Cluster.Name], s.Types[resource.Endpoint.Name]
				if strings.HasPrefix(s.NodeID, "mem-") && c != nil && ep != nil &&
					c.VersionAcked != "" && c.VersionAcked == c.VersionSent && ep.VersionAcked != "" && ep.VersionAcked == ep.VersionSent &&
					c.Resources == 200 && ep.Resources == 200 {
					settled++
				}
			}
			return settled
		},
		Open: func() int { return len(e.srv.Streams()) },
	})
}

// fanout is N client streams subscribed to the fan-out scenario.
type fanout struct {
	e      *env
	n      int
	decode bool // clients decode responses (client=proto) or not (raw)
	names  []string

	ctx    context.Context // ends every stream
	cancel context.CancelFunc
	conns  []*grpc.ClientConn
	cls    []*fanoutClient
	wg     sync.WaitGroup // the receive goroutines

	// What the receive goroutines record: the responses of the round,
	// each of which must hold wantRes resources, and all those received.
	round    *xdstest.Round
	wantRes  atomic.Int64
	received atomic.Int64

	pushes  int // pushes made on these streams
	metrics xdstest.PushMetrics
}

// fanoutChanges counts the changes made in this process, so that each
// push, whichever fixture makes it, writes new content.
var fanoutChanges atomic.Int64

// fanoutClient is one stream. Its receive goroutine records the version
// and nonce to ACK; the benchmark goroutine is its only sender.
type fanoutClient struct {
	st         grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]
	mu         sync.Mutex // guards ver, nonce
	ver, nonce []byte
}

// open starts the streams and returns once each has received the 200
// assignments and the server has taken each one's ACK.
func (f *fanout) open(b *testing.B) {
	b.Helper()
	f.ctx, f.cancel = context.WithCancel(context.Background())
	f.round = xdstest.NewRound()
	f.wantRes.Store(fanoutCLAs)
	f.round.Start(f.n)
	for i := 0; i < f.n; i++ {
		if i%fanoutPerConn == 0 {
			cc, err := grpc.NewClient(f.e.addr,
				grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithDefaultCallOptions(grpc.ForceCodecV2(fanoutCodec{})))
			if err != nil {
				b.Fatal(err)
			}
			f.conns = append(f.conns, cc)
		}
		cc := f.conns[len(f.conns)-1]
		st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(f.ctx)
		if err != nil {
			b.Fatalf("stream %d: %v", i, err)
		}
		c := &fanoutClient{st: st}
		f.cls = append(f.cls, c)
		f.wg.Add(1)
		go f.receive(c)
		if err := st.Send(&discoveryv3.DiscoveryRequest{
			Node:          &corev3.Node{Id: fmt.Sprintf("fanout-%d", i), Cluster: "fanout"},
			TypeUrl:       resource.Endpoint.URL,
			ResourceNames: f.names,
		}); err != nil {
			b.Fatalf("stream %d: send: %v", i, err)
		}
	}
	f.wait(b, "the initial assignments")
	f.ackAll(b)
}

// close ends the streams and waits until the server has let go of them.
func (f *fanout) close(b *testing.B) {
	if f.cancel == nil {
		return // never opened, or closed already
	}
	f.cancel()
	f.cancel = nil
	for _, cc := range f.conns {
		cc.Close()
	}
	f.wg.Wait()
	xdstest.WaitNoStreams(b, fanoutTimeout, func() int { return len(f.e.srv.Streams()) })
}

// receive counts each response of c's stream until the stream ends.
func (f *fanout) receive(c *fanoutClient) {
	defer f.wg.Done()
	m := &fanoutMsg{decode: f.decode}
	for {
		if err := c.st.RecvMsg(m); err != nil {
			if f.ctx.Err() == nil {
				f.round.Fail(err)
			}
			return
		}
		c.mu.Lock()
		c.ver = append(c.ver[:0], m.version...)
		c.nonce = append(c.nonce[:0], m.nonce...)
		c.mu.Unlock()
		f.received.Add(1)
		f.round.Got(m.size, int64(m.resources) == f.wantRes.Load())
	}
}

// wait blocks until every stream has had its response of this round.
func (f *fanout) wait(b *testing.B, what string) {
	b.Helper()
	f.round.Wait(b, fanoutTimeout, what, fmt.Sprintf("%d resources", f.wantRes.Load()))
}

// ackAll has every client ACK its last response, and returns once the
// server has taken every ACK.
func (f *fanout) ackAll(b *testing.B) {
	b.Helper()
	var ver string
	for i, c := range f.cls {
		c.mu.Lock()
		req := &discoveryv3.DiscoveryRequest{TypeUrl: resource.Endpoint.URL, VersionInfo: string(c.ver), ResponseNonce: string(c.nonce), ResourceNames: f.names}
		c.mu.Unlock()
		if i == 0 {
			ver = req.VersionInfo
		} else if req.VersionInfo != ver {
			b.Fatalf("stream %d holds version %s, stream 0 holds %s", i, req.VersionInfo, ver)
		}
		if err := c.st.Send(req); err != nil {
			b.Fatalf("stream %d: ack: %v", i, err)
		}
	}
	xdstest.WaitAcked(b, fanoutTimeout, f.n, ver, func(ver string) int {
		acked := 0
		for _, s := range f.e.srv.Streams() {
			if ts := s.Types[resource.Endpoint.Name]; ts != nil && strings.HasPrefix(s.NodeID, "fanout-") && ts.VersionAcked == ver {
				acked++
			}
		}
		return acked
	})
	if got, want := f.received.Load(), int64(f.n)*int64(f.pushes+1); got != want {
		b.Fatalf("the streams received %d responses in all, want %d (one per stream per push)", got, want)
	}
}

// run makes b.N timed pushes, then one more with every allocation
// profiled, and reports the metrics of BenchmarkFanout.
func (f *fanout) run(b *testing.B) {
	f.metrics = xdstest.PushMetrics{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start, end := f.push(b)
		b.StopTimer()
		f.metrics.Add(start, end, f.round.Bytes())
		f.ackAll(b)
		b.StartTimer()
	}
	b.StopTimer()
	f.metrics.Report(b, f.n)

	split := xdstest.Attribute(ownerOf, func() { f.push(b) })
	f.ackAll(b)
	n := float64(f.n)
	b.ReportMetric(float64(split[xdstest.OwnedByServer].Bytes)/n, "server-alloc-B/stream/push")
	b.ReportMetric(float64(split[xdstest.OwnedByServer].Objects)/n, "server-allocs/stream/push")
	b.ReportMetric(float64(split[xdstest.OwnedByClient].Bytes)/n, "client-alloc-B/stream/push")
}

// push applies one changed assignment and waits until every stream has
// received it. start is when the view published the change, end when the
// last stream had it.
func (f *fanout) push(b *testing.B) (start, end xdstest.Mark) {
	b.Helper()
	f.pushes++
	f.wantRes.Store(1)
	f.round.Start(f.n)
	// The window starts when the view publishes the change, which wakes
	// every stream.
	published := xdstest.MarkNextChange(f.ctx, f.e.View.Snapshot())
	// One changed assignment: all its ports move.
	c := int(fanoutChanges.Add(1))
	prev := f.e.View.Snapshot().Revision
	if rev := f.e.Apply(b, []store.Put{xdstest.Put(b, resource.Endpoint, store.DefaultScope,
		fanoutCLA(c%fanoutCLAs, uint32(1024+(c*fanoutEndpoints)%60000)))}); rev <= prev {
		b.Fatalf("the apply changed nothing (revision %d)", rev)
	}
	f.wait(b, "the change")
	end = xdstest.MarkNow()
	return xdstest.WaitMark(b, published, fanoutTimeout), end
}

// ownerOf tells by its functions whose code an allocation's stack is.
// etcd's client and server and the store (the apply of the change) use
// grpc-go too: they are "other" whatever else the stack holds. A
// goroutine's stack ends with the function that started it (grpc-go's
// loopy writers: NewServerTransport's or the client transport's). Only the
// innermost 32 frames are recorded, which suffices for the server and the
// raw clients; a decoding client's deep protobuf stacks may lose the
// frames that name it.
func ownerOf(stack []uintptr) xdstest.Owner {
	owner := xdstest.OwnedByOther
	frames := runtime.CallersFrames(stack)
	for more := true; more; {
		var fr runtime.Frame
		fr, more = frames.Next()
		fn := fr.Function
		switch {
		case strings.HasPrefix(fn, "go.etcd.io/"),
			strings.HasPrefix(fn, "github.com/legation-io/legation/internal/state/store."),
			strings.HasPrefix(fn, "github.com/legation-io/legation/internal/testkit/xdstest.(*Env).Apply"):
			return xdstest.OwnedByOther
		case owner != xdstest.OwnedByOther:
		case strings.HasPrefix(fn, "github.com/legation-io/legation/internal/xds/sotw."),
			strings.Contains(fn, "grpc/internal/transport.(*http2Server)"),
			strings.Contains(fn, "grpc/internal/transport.NewServerTransport"),
			strings.HasPrefix(fn, "google.golang.org/grpc.(*Server)"),
			strings.HasPrefix(fn, "google.golang.org/grpc.(*serverStream)"):
			owner = xdstest.OwnedByServer
		case strings.HasPrefix(fn, "github.com/legation-io/legation/internal/ads_test.(*fanout)"),
			strings.HasPrefix(fn, "github.com/legation-io/legation/internal/ads_test.fanoutCodec"),
			strings.Contains(fn, "grpc/internal/transport.(*http2Client)"),
			strings.Contains(fn, "grpc/internal/transport.NewHTTP2Client"),
			strings.Contains(fn, "grpc/internal/transport.newHTTP2Client"),
			strings.HasPrefix(fn, "google.golang.org/grpc.(*clientStream)"),
			strings.HasPrefix(fn, "google.golang.org/grpc.newClientStream"),
			strings.HasPrefix(fn, "google.golang.org/grpc.(*csAttempt)"):
			owner = xdstest.OwnedByClient
		}
	}
	return owner
}

// fanoutMsg receives one DiscoveryResponse through fanoutCodec.
type fanoutMsg struct {
	decode bool // decode it into a DiscoveryResponse, as a real client does

	// Set by each Unmarshal.
	size      int // message bytes
	resources int
	version   []byte // reused: no allocation per message
	nonce     []byte
}

// fanoutCodec is the clients' codec: requests go through the standard
// proto codec; a fanoutMsg is counted and, unless it asks to be decoded,
// only scanned for version_info, nonce and the number of resources, which
// allocates nothing.
type fanoutCodec struct{}

var clientProtoCodec = encoding.GetCodecV2(grpcproto.Name)

func (fanoutCodec) Name() string { return grpcproto.Name }

func (fanoutCodec) Marshal(v any) (mem.BufferSlice, error) { return clientProtoCodec.Marshal(v) }

func (fanoutCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*fanoutMsg)
	if !ok {
		return clientProtoCodec.Unmarshal(data, v)
	}
	m.size = data.Len()
	if m.decode {
		r := new(discoveryv3.DiscoveryResponse)
		if err := clientProtoCodec.Unmarshal(data, r); err != nil {
			return err
		}
		m.version = append(m.version[:0], r.GetVersionInfo()...)
		m.nonce = append(m.nonce[:0], r.GetNonce()...)
		m.resources = len(r.GetResources())
		return nil
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return m.scan(buf.ReadOnlyData())
}

// scan reads the top-level fields of an encoded DiscoveryResponse.
func (m *fanoutMsg) scan(b []byte) error {
	m.resources, m.version, m.nonce = 0, m.version[:0], m.nonce[:0]
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			switch num {
			case 1: // version_info
				m.version = append(m.version, v...)
			case 2: // resources
				m.resources++
			case 5: // nonce
				m.nonce = append(m.nonce, v...)
			}
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
	}
	if len(m.nonce) == 0 {
		return errors.New("a response without a nonce")
	}
	return nil
}
