package replica_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/legation-io/legation/internal/cluster/relay"
	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/netnstest"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// metricValue is the value of the counter or gauge name with labels
// (name=value pairs) on reg; 0 when absent.
func metricValue(t testing.TB, reg prometheus.Registerer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.(prometheus.Gatherer).Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metric
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// limitsEnv starts a replica with one cluster, "a", its config changed by
// edit.
func limitsEnv(t *testing.T, edit func(*replica.Config)) (*xdsEnv, *running, prometheus.Registerer) {
	t.Helper()
	e := newXDSEnv(t)
	rev := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 100))})
	cfg := e.config(t)
	edit(&cfg)
	return e, startXDS(t, cfg, rev), cfg.Registerer
}

// cdsRequest is a wildcard CDS request of node id.
func cdsRequest(id string) *discoveryv3.DiscoveryRequest {
	return &discoveryv3.DiscoveryRequest{Node: xdstest.Node(id, "c1"), TypeUrl: resource.Cluster.URL}
}

// rawH2 is a hand-made HTTP/2 client: it can ping at any rate, which
// grpc-go's client refuses (it pings every 10s at most).
type rawH2 struct {
	conn   net.Conn
	fr     *http2.Framer
	wmu    sync.Mutex // guards fr's writes
	goaway chan *http2.GoAwayFrame
	pings  chan [8]byte  // the server's own pings (not its acks of ours)
	mute   atomic.Bool   // set: the server's pings are not answered
	closed chan struct{} // closed when reading fails: the connection ended
}

func dialH2(t *testing.T, addr string) *rawH2 {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return newH2(t, conn)
}

// newH2 starts HTTP/2 on conn and reads its frames until it fails.
func newH2(t *testing.T, conn net.Conn) *rawH2 {
	t.Helper()
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	h := &rawH2{conn: conn, fr: http2.NewFramer(conn, conn), goaway: make(chan *http2.GoAwayFrame, 1), pings: make(chan [8]byte, 16), closed: make(chan struct{})}
	if err := h.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); <-h.closed })
	go func() {
		defer close(h.closed)
		for {
			f, err := h.fr.ReadFrame()
			if err != nil {
				return
			}
			h.wmu.Lock()
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					h.fr.WriteSettingsAck() //nolint:errcheck // the test sees a failure as a GOAWAY or none
				}
			case *http2.GoAwayFrame:
				select {
				case h.goaway <- f:
				default:
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					if !h.mute.Load() {
						h.fr.WritePing(true, f.Data) //nolint:errcheck // as above
					}
					select {
					case h.pings <- f.Data:
					default:
					}
				}
			case *http2.DataFrame:
				// Keep the server's flow-control window open.
				if n := len(f.Data()); n > 0 {
					h.fr.WriteWindowUpdate(0, uint32(n))          //nolint:errcheck // as above
					h.fr.WriteWindowUpdate(f.StreamID, uint32(n)) //nolint:errcheck // as above
				}
			}
			h.wmu.Unlock()
		}
	}()
	return h
}

// openADS opens stream 1, an ADS stream, and sends req on it.
func (h *rawH2) openADS(t *testing.T, req proto.Message) {
	t.Helper()
	var hdr strings.Builder
	enc := hpack.NewEncoder(&hdr)
	for _, kv := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":authority", "legation"},
		{":path", "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"},
		{"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]}) //nolint:errcheck // a strings.Builder
	}
	body, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	msg := append([]byte{0, byte(len(body) >> 24), byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}, body...)
	h.wmu.Lock()
	defer h.wmu.Unlock()
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte(hdr.String()), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := h.fr.WriteData(1, false, msg); err != nil {
		t.Fatal(err)
	}
}

// pingFor pings every interval for d, and returns the server's GOAWAY
// if one comes meanwhile, else nil.
func (h *rawH2) pingFor(interval, d time.Duration) (goaway *http2.GoAwayFrame) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	end := time.After(d)
	for i := uint64(0); ; i++ {
		select {
		case g := <-h.goaway:
			return g
		case <-end:
			return nil
		case <-tick.C:
			h.wmu.Lock()
			var data [8]byte
			data[0] = byte(i)
			h.fr.WritePing(false, data) //nolint:errcheck // a dead connection shows as a GOAWAY or an EOF
			h.wmu.Unlock()
		}
	}
}

// TestKeepalivePings: a client pinging at the enforcement policy's pace
// keeps its connection and its stream, idle; one pinging faster is sent
// GOAWAY too_many_pings, which shows the first half can fail. The policy
// is scaled down (--keepalive-min-time 500ms, pings every 600ms) to fit
// in make test; production's default is 5s, and grpc-go's client cannot
// ping faster than every 10s, hence the hand-made HTTP/2 client.
func TestKeepalivePings(t *testing.T) {
	_, r, reg := limitsEnv(t, func(c *replica.Config) { c.KeepaliveMinTime = 500 * time.Millisecond })

	t.Run("at the policy's pace", func(t *testing.T) {
		h := dialH2(t, r.XDSAddr())
		h.openADS(t, cdsRequest("pinger"))
		xdstest.WaitFor(t, "the stream open", func() (bool, string) {
			v := metricValue(t, reg, "legation_sotw_streams")
			return v == 1, fmt.Sprint(v)
		})
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if g := h.pingFor(600*time.Millisecond, time.Second); g != nil {
				t.Fatalf("GOAWAY %v %q at pings every 600ms with --keepalive-min-time 500ms", g.ErrCode, g.DebugData())
			}
			if v := metricValue(t, reg, "legation_sotw_streams"); v != 1 {
				t.Fatalf("legation_sotw_streams = %v during the pings, want 1", v)
			}
		}
	})
	t.Run("faster than the policy", func(t *testing.T) {
		h := dialH2(t, r.XDSAddr())
		g := h.pingFor(50*time.Millisecond, 5*time.Second)
		if g == nil || g.ErrCode != http2.ErrCodeEnhanceYourCalm || !strings.Contains(string(g.DebugData()), "too_many_pings") {
			t.Fatalf("pinging every 50ms: GOAWAY %v, want ENHANCE_YOUR_CALM too_many_pings", g)
		}
	})
}

// TestDeadPeerFound: a client whose host vanishes (its network namespace
// unplugged: nothing comes back, nothing says so) is dropped by the
// kernel's keepalive about --keepalive-time plus --keepalive-timeout
// after it was last heard, HTTP/2 pings out of play (--ping-time 1h). Go's
// own keepalive (15s, then 9 probes 15s apart) would hold it for minutes.
// Its stream is gone, and with it what it held.
func TestDeadPeerFound(t *testing.T) {
	ns := netnstest.New(t)
	_, r, reg := limitsEnv(t, func(c *replica.Config) {
		c.XDSAddr = netip.AddrPortFrom(ns.HostIP(), 0).String()
		c.KeepaliveTime, c.KeepaliveTimeout, c.PingTime = time.Second, time.Second, time.Hour
	})
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	conn, err := ns.DialContext(ctx, "tcp", r.XDSAddr())
	if err != nil {
		t.Fatal(err)
	}
	h := newH2(t, conn)
	h.openADS(t, cdsRequest("vanishing"))
	xdstest.WaitFor(t, "the stream open", func() (bool, string) {
		v := metricValue(t, reg, "legation_sotw_streams")
		return v == 1, fmt.Sprint(v)
	})
	ns.Unplug(t)
	unplugged := time.Now()
	xdstest.WaitFor(t, "the stream of the vanished client closed", func() (bool, string) {
		v := metricValue(t, reg, "legation_sotw_streams")
		return v == 0, fmt.Sprint(v)
	})
	if took := time.Since(unplugged); took > 10*time.Second {
		t.Errorf("the vanished client was dropped %s after it went, want about 2s (--keepalive-time 1s + --keepalive-timeout 1s)", took.Round(time.Millisecond))
	}
}

// TestUnansweredPings: a client whose host answers while its HTTP/2 does
// not (a hand-made client on loopback that stops answering pings: its
// kernel still answers every TCP probe) is dropped after --ping-time plus
// --keepalive-timeout, while one that answers keeps its connection and
// stream through the same pings.
func TestUnansweredPings(t *testing.T) {
	_, r, reg := limitsEnv(t, func(c *replica.Config) { c.PingTime, c.KeepaliveTimeout = time.Second, time.Second })
	streams := func(want float64) func() (bool, string) {
		return func() (bool, string) {
			v := metricValue(t, reg, "legation_sotw_streams")
			return v == want, fmt.Sprint(v)
		}
	}
	answering := dialH2(t, r.XDSAddr())
	answering.openADS(t, cdsRequest("answering"))
	xdstest.WaitFor(t, "the answering client's stream open", streams(1))
	mute := dialH2(t, r.XDSAddr())
	mute.mute.Store(true)
	mute.openADS(t, cdsRequest("mute"))
	xdstest.WaitFor(t, "the mute client's stream open", streams(2))
	select {
	case <-mute.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("a client not answering pings every 1s (--ping-time 1s, --keepalive-timeout 1s) kept its connection 10s")
	}
	xdstest.WaitFor(t, "the mute client's stream closed", streams(1))
	select {
	case <-answering.closed:
		t.Fatal("the replica closed the connection of a client answering its pings")
	default:
	}
	if len(answering.pings) == 0 {
		t.Error("the answering client was never pinged")
	}
}

// TestNoBandwidthProbes: the replica's HTTP/2 windows are static, so a
// client's requests draw no ping from it. grpc-go's default, a window
// sized by probing the bandwidth, pings the client on each burst of data
// it receives: a write, a read and two wakeups per connection for every
// round of ACKs, for requests that are a few hundred bytes.
func TestNoBandwidthProbes(t *testing.T) {
	_, r, reg := limitsEnv(t, func(*replica.Config) {})
	h := dialH2(t, r.XDSAddr())
	h.openADS(t, cdsRequest("prober"))
	xdstest.WaitFor(t, "the stream open", func() (bool, string) {
		v := metricValue(t, reg, "legation_sotw_streams")
		return v == 1, fmt.Sprint(v)
	})
	select {
	case p := <-h.pings:
		t.Fatalf("the replica pinged (%x) on a request's data", p)
	case <-time.After(time.Second):
	}
}

// TestPanicRecovered: a panic in one stream's handler ends that stream
// with INTERNAL, counted once; 100 other streams are served before and
// after it.
func TestPanicRecovered(t *testing.T) {
	e, r, reg := limitsEnv(t, func(c *replica.Config) { replica.SetPanicOnNodeForTest(c, "boom") })
	cc := dial(t, r)
	var others []*xdstest.SotWStream
	for i := range 100 {
		s := xdstest.OpenSotW(t, cc)
		s.Send(cdsRequest(fmt.Sprint("n", i)))
		s.Ack(s.Expect())
		others = append(others, s)
	}
	boom := xdstest.OpenSotW(t, dial(t, r))
	boom.Send(cdsRequest("boom"))
	if err := boom.ExpectErr(); grpcstatus.Code(err) != codes.Internal {
		t.Fatalf("the panicking stream ended with %v, want INTERNAL", err)
	}
	if got := metricValue(t, reg, "legation_panics_total"); got != 1 {
		t.Errorf("legation_panics_total = %v, want 1", got)
	}
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("b", 100))})
	for _, s := range others {
		if got := len(s.Expect().GetResources()); got != 2 {
			t.Fatalf("after the panic a stream got %d clusters, want 2", got)
		}
	}
}

// TestStreamsPerConn: a connection holds --max-streams-per-conn streams;
// the next one gets RESOURCE_EXHAUSTED naming the flag, while another
// connection is served and streams relayed by a replica are not counted.
func TestStreamsPerConn(t *testing.T) {
	_, r, reg := limitsEnv(t, func(c *replica.Config) { c.MaxStreamsPerConn = 3 })
	cc := dial(t, r)
	for i := range 3 {
		s := xdstest.OpenSotW(t, cc)
		s.Send(cdsRequest(fmt.Sprint("n", i)))
		s.Expect()
	}
	s := xdstest.OpenSotW(t, cc)
	s.Send(cdsRequest("n3"))
	err := s.ExpectErr()
	if grpcstatus.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-streams-per-conn") {
		t.Fatalf("the 4th stream on one connection: %v, want RESOURCE_EXHAUSTED naming --max-streams-per-conn", err)
	}
	if got := metricValue(t, reg, "legation_limits_hits_total", "limit", "streams_per_conn"); got != 1 {
		t.Errorf(`legation_limits_hits_total{limit="streams_per_conn"} = %v, want 1`, got)
	}
	other := xdstest.OpenSotW(t, dial(t, r))
	other.Send(cdsRequest("other"))
	other.Expect()

	// Plain text: a stream carrying the relay marker from a registered
	// replica's address (this replica's own, 127.0.0.1) is a replica's
	// (the relay's own trust rule), and a relay connection is exempt.
	xdstest.WaitFor(t, "the replica has not read the registry", func() (bool, string) {
		got := metricValue(t, reg, "legation_shard_members_registered")
		return got == 1, fmt.Sprintf("legation_shard_members_registered = %v", got)
	})
	rc := dial(t, r)
	for i := range 5 {
		ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(t.Context(), relay.MarkerKey, "peer"))
		st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(rc).StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s := xdstest.NewSotW(t, st, cancel)
		s.Send(cdsRequest(fmt.Sprint("relayed", i)))
		s.Expect()
	}
}

// TestRapidReset: one connection opening and cancelling 5,000 streams
// (make bench's BenchmarkRapidReset goes to 100,000) leaves the replica
// up, its heap about where it was, and another client served.
func TestRapidReset(t *testing.T) {
	e, r, _ := limitsEnv(t, func(*replica.Config) {})
	watcher := xdstest.OpenSotW(t, dial(t, r))
	watcher.Send(cdsRequest("watcher"))
	watcher.Ack(watcher.Expect())

	before := xdstest.SettledMemStats()
	rapidReset(t, dial(t, r), 5000)
	after := xdstest.SettledMemStats()
	growth := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("5,000 streams opened and reset on one connection: heap in use %+.1f MiB, goroutines %d", float64(growth)/(1<<20), runtime.NumGoroutine())
	if growth > 50<<20 {
		t.Errorf("heap in use grew %d MiB, want under 50", growth>>20)
	}
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("b", 100))})
	if got := len(watcher.Expect().GetResources()); got != 2 {
		t.Fatalf("the other client got %d clusters, want 2", got)
	}
	if code, _ := get(t, r, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d", code)
	}
}

// rapidReset opens n ADS streams on cc, each sending a request and
// cancelled at once, as HTTP/2 rapid-reset attacks do (RST_STREAM right
// after HEADERS and DATA).
func rapidReset(tb testing.TB, cc *grpc.ClientConn, n int) {
	tb.Helper()
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(cc)
	req := cdsRequest("resetter")
	for range n {
		ctx, cancel := context.WithCancel(context.Background())
		if st, err := ads.StreamAggregatedResources(ctx); err == nil {
			st.Send(req) //nolint:errcheck // cancelled anyway
		}
		cancel()
	}
}

// BenchmarkRapidReset: b.N streams opened and reset on one connection
// (make bench runs 100,000: -benchtime=100000x); reports the heap growth
// and checks the replica still serves another client.
func BenchmarkRapidReset(b *testing.B) {
	e := newXDSEnv(b)
	rev := e.Apply(b, []store.Put{xdstest.Put(b, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 100))})
	r := startXDS(b, e.config(b), rev)
	watcher := xdstest.OpenSotW(b, xdstest.Dial(b, r.XDSAddr()))
	watcher.Send(cdsRequest("watcher"))
	watcher.Expect()
	cc := xdstest.Dial(b, r.XDSAddr())
	before := xdstest.SettledMemStats()
	b.ResetTimer()
	rapidReset(b, cc, b.N)
	b.StopTimer()
	after := xdstest.SettledMemStats()
	b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/(1<<20), "heap-growth-MiB")
	b.ReportMetric(float64(after.Sys)/(1<<20), "sys-MiB")
	if code, _ := get(b, r, "/healthz"); code != http.StatusOK {
		b.Fatalf("/healthz: %d", code)
	}
}

// TestAdmission: --max-streams refuses the stream beyond it; --stream-rate
// makes a stream over the rate wait up to a second, then refuses it, both
// with RESOURCE_EXHAUSTED naming the flag.
func TestAdmission(t *testing.T) {
	t.Run("max streams", func(t *testing.T) {
		_, r, reg := limitsEnv(t, func(c *replica.Config) { c.MaxStreams = 2 })
		for i := range 2 {
			s := xdstest.OpenSotW(t, dial(t, r))
			s.Send(cdsRequest(fmt.Sprint("n", i)))
			s.Expect()
		}
		s := xdstest.OpenSotW(t, dial(t, r))
		s.Send(cdsRequest("n2"))
		if err := s.ExpectErr(); grpcstatus.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-streams") {
			t.Fatalf("the 3rd stream: %v, want RESOURCE_EXHAUSTED naming --max-streams", err)
		}
		if got := metricValue(t, reg, "legation_limits_hits_total", "limit", "max_streams"); got != 1 {
			t.Errorf(`legation_limits_hits_total{limit="max_streams"} = %v, want 1`, got)
		}
	})
	t.Run("stream rate", func(t *testing.T) {
		_, r, reg := limitsEnv(t, func(c *replica.Config) { c.StreamRate, c.StreamBurst = 1, 1 })
		// The health stream of waitReady is exempt; the first stream
		// takes the burst.
		open := func(id string) (*xdstest.SotWStream, time.Duration) {
			start := time.Now()
			s := xdstest.OpenSotW(t, dial(t, r))
			s.Send(cdsRequest(id))
			return s, time.Since(start)
		}
		s1, _ := open("n1")
		s1.Expect()
		// Two more at once: whichever the replica takes first waits about
		// a second and is served; the other would wait two: refused.
		start := time.Now()
		s2, _ := open("n2")
		s3, _ := open("n3")
		var served, refused int
		for _, s := range []*xdstest.SotWStream{s2, s3} {
			select {
			case res := <-s.Recv():
				switch {
				case res.Err == nil:
					served++
					if waited := time.Since(start); waited < 500*time.Millisecond {
						t.Errorf("a stream over the rate was served after %s, want about 1s (the rate)", waited)
					}
				case grpcstatus.Code(res.Err) == codes.ResourceExhausted && strings.Contains(res.Err.Error(), "--stream-rate"):
					refused++
				default:
					t.Errorf("a stream over the rate: %v, want served or RESOURCE_EXHAUSTED naming --stream-rate", res.Err)
				}
			case <-time.After(xdstest.Timeout):
				t.Fatal("a stream over the rate got nothing")
			}
		}
		if served != 1 || refused != 1 {
			t.Errorf("of two streams over the rate, %d served and %d refused, want one each", served, refused)
		}
		if got := metricValue(t, reg, "legation_limits_hits_total", "limit", "stream_rate"); got != 1 {
			t.Errorf(`legation_limits_hits_total{limit="stream_rate"} = %v, want 1`, got)
		}
		if got := metricValue(t, reg, "legation_admission_waits_total"); got != 2 {
			t.Errorf("legation_admission_waits_total = %v, want 2", got)
		}
	})
}

// TestHTTPLimits: a client sending its request slowly is cut after
// --http-read-timeout; beyond --http-max-conns a new connection waits
// until one closes, then is served.
func TestHTTPLimits(t *testing.T) {
	_, r, _ := limitsEnv(t, func(c *replica.Config) {
		c.HTTPReadTimeout = 500 * time.Millisecond
		c.HTTPMaxConns = 2
	})
	// Two slowloris clients take every connection.
	var cut [2]chan time.Duration
	for i := range cut {
		cut[i] = make(chan time.Duration, 1)
		conn, err := net.Dial("tcp", r.HTTPAddr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		start := time.Now()
		go func() {
			io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n") //nolint:errcheck // the read below sees the end
			for range 100 {
				if _, err := io.WriteString(conn, "X-Slow: 1\r\n"); err != nil {
					break
				}
				time.Sleep(100 * time.Millisecond) // a slowloris, not a wait
			}
		}()
		go func() {
			bufio.NewReader(conn).ReadString(0) //nolint:errcheck // any end: cut
			cut[i] <- time.Since(start)
		}()
	}
	time.Sleep(100 * time.Millisecond) // let both be accepted first
	served := make(chan error, 1)
	start := time.Now()
	go func() {
		resp, err := http.Get("http://" + r.HTTPAddr() + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = errors.New(resp.Status)
			}
		}
		served <- err
	}()
	select {
	case err := <-served:
		t.Fatalf("a 3rd connection was served (%v) while 2 held --http-max-conns 2", err)
	case <-time.After(200 * time.Millisecond):
	}
	for i := range cut {
		select {
		case d := <-cut[i]:
			t.Logf("slowloris %d cut after %s", i, d.Round(time.Millisecond))
			if d > 3*time.Second {
				t.Errorf("slowloris %d cut after %s, want about --http-read-timeout (500ms)", i, d)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("slowloris %d not cut", i)
		}
	}
	if err := <-served; err != nil {
		t.Fatalf("the waiting connection: %v", err)
	}
	t.Logf("the 3rd connection was served after %s", time.Since(start).Round(time.Millisecond))
}

// TestMaxConnectionAge: a connection older than --max-connection-age is
// sent GOAWAY and, after the grace, its streams end UNAVAILABLE, so their
// clients reconnect.
func TestMaxConnectionAge(t *testing.T) {
	_, r, _ := limitsEnv(t, func(c *replica.Config) {
		c.MaxConnectionAge, c.MaxConnectionAgeGrace = 500*time.Millisecond, 500*time.Millisecond
	})
	s := xdstest.OpenSotW(t, dial(t, r))
	start := time.Now()
	s.Send(cdsRequest("aged"))
	s.Ack(s.Expect())
	if err := s.ExpectErr(); grpcstatus.Code(err) != codes.Unavailable {
		t.Fatalf("the aged connection's stream ended with %v, want UNAVAILABLE", err)
	}
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Errorf("the stream ended after %s, before the age and the grace", d)
	}
}

// TestSendTimeoutWired: --send-timeout reaches the replica's xDS streams:
// a SotW client that asks for large endpoint sets and never reads is
// closed with UNAVAILABLE naming the flag once the HTTP/2 windows are
// full and a send made no progress for that long, while updates go on.
func TestSendTimeoutWired(t *testing.T) {
	const ports = 400 // ~10 KB a response: the windows fill within some updates
	e, r, _ := limitsEnv(t, func(c *replica.Config) { c.SendTimeout = 500 * time.Millisecond })
	portsAt := func(i int) []uint32 {
		p := make([]uint32, ports)
		for j := range p {
			p[j] = uint32(10000 + i + j)
		}
		return p
	}
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("e", portsAt(0)...))})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stuck, err := discoveryv3.NewAggregatedDiscoveryServiceClient(dial(t, r)).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stuck.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("stuck", "c1"), TypeUrl: resource.Endpoint.URL, ResourceNames: []string{"e"}}); err != nil {
		t.Fatal(err)
	}
	// The client never calls Recv: updates pile up in the windows until
	// a send blocks; then the replica closes the stream.
	for i := 1; ; i++ {
		e.Apply(t, []store.Put{xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("e", portsAt(i)...))})
		if st := getStreams(t, r); len(st.Streams) == 0 {
			t.Logf("the stuck stream was closed after %d updates", i)
			break
		}
		if i == 1000 {
			t.Fatal("the stuck stream still open after 1,000 updates")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Its status, read now, after the messages queued before it.
	for {
		_, err := stuck.Recv()
		if err == nil {
			continue
		}
		if grpcstatus.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "--send-timeout") {
			t.Fatalf("the stuck stream ended with %v, want UNAVAILABLE naming --send-timeout", err)
		}
		break
	}
}
