package replica_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// idleClientEnv, set to "ADDR N ACK", makes the test binary the clients
// of BenchmarkIdleStreams and BenchmarkPushFloor: N ADS streams to ADDR,
// each on a connection of its own, each answered and ACKed, then left
// open until stdin closes; with ACK true, each ACKs every response.
const idleClientEnv = "LEGATION_IDLE_STREAMS_CLIENT"

func TestMain(m *testing.M) {
	if v := os.Getenv(idleClientEnv); v != "" {
		os.Exit(idleClients(v))
	}
	if os.Getenv(fleetClientEnv) != "" {
		os.Exit(fleetClients())
	}
	os.Exit(m.Run())
}

// BenchmarkIdleStreams measures what an idle xDS stream costs a replica:
// each op is one ADS stream on a connection of its own, answered and
// ACKed, then left open. The clients run in a process of their own, so
// that the memory measured is the server's alone: the stacks its
// goroutines take (stack-B/stream), the part of them a collection scans
// (scanned-stack-B/stream), the heap, the goroutines, and how much longer
// a full collection takes per stream. Run it with -benchtime=Nx.
//
// server=replica is a replica; server=grpc-floor is the least an ADS
// server on grpc-go can be (floorADS, with the replica's codec and
// transport settings): what gRPC's connection and stream cost before any
// of Legation's, the floor under the replica's figures.
func BenchmarkIdleStreams(b *testing.B) {
	b.Run("server=replica", func(b *testing.B) {
		e := newXDSEnv(b)
		rev := e.Apply(b, []store.Put{xdstest.Put(b, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 100))})
		cfg := e.config(b)
		cfg.StreamRate = 0 // the clients open their streams as fast as they can
		r := startXDS(b, cfg, rev)
		measureIdle(b, r.XDSAddr())
	})
	b.Run("server=grpc-floor", func(b *testing.B) {
		measureIdle(b, startFloorADS(b, &floorADS{acked: make(chan struct{}, 1)}))
	})
}

// measureIdle opens b.N idle streams to the server at addr and reports
// what they cost the process.
func measureIdle(b *testing.B, addr string) {
	before := idleSample()
	b.ResetTimer()
	stop, _ := openClients(b, addr, b.N, false)
	defer stop()
	b.StopTimer()
	after := idleSample()
	n := float64(b.N)
	b.ReportMetric(float64(after.stack-before.stack)/n, "stack-B/stream")
	b.ReportMetric(float64(after.scanStack-before.scanStack)/n, "scanned-stack-B/stream")
	b.ReportMetric(float64(after.heap-before.heap)/n, "heap-B/stream")
	b.ReportMetric(float64(after.goroutines-before.goroutines)/n, "goroutines/stream")
	b.ReportMetric(float64((after.gc-before.gc).Nanoseconds())/n, "gc-ns/stream")
}

// TestIdleConnectionHoldsNoBuffers: an idle Envoy's connection holds
// neither a read nor a write buffer (32 KiB each in gRPC, unless read on
// readiness, see readyConn, and written through gRPC's shared pool, its
// default): the heap a replica keeps per idle stream, each on a
// connection of its own, stays well under one such buffer.
func TestIdleConnectionHoldsNoBuffers(t *testing.T) {
	e := newXDSEnv(t)
	rev := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 100))})
	cfg := e.config(t)
	cfg.StreamRate = 0
	r := startXDS(t, cfg, rev)
	const n = 300
	before := idleSample()
	stop, _ := openClients(t, r.XDSAddr(), n, false)
	defer stop()
	after := idleSample()
	perStream := (int64(after.heap) - int64(before.heap)) / n
	t.Logf("heap per idle stream: %d B", perStream)
	if perStream > 28<<10 {
		t.Errorf("the replica holds %d B of heap per idle stream: over 28 KiB, so a connection keeps a read or write buffer", perStream)
	}
}

// openClients starts the clients' process: n ADS streams to addr, each
// on a connection of its own, the first response ACKed, and with ack
// every response after it. It returns once all are open; stop closes
// them, and cpu is the clients' process CPU time so far.
func openClients(tb testing.TB, addr string, n int, ack bool) (stop func(), cpu func() time.Duration) {
	tb.Helper()
	p := startClientProcess(tb, fmt.Sprintf("%s=%s %d %t", idleClientEnv, addr, n, ack))
	p.expect(tb, "open")
	return p.stop, func() time.Duration { return processCPU(tb, p.cmd.Process.Pid) }
}

// clientProcess is a benchmark's clients: this test binary in a process
// of its own (see TestMain), so that the memory and CPU a benchmark reads
// of its own process are the servers' alone. It answers on stdout, a
// line at a time, and ends when its stdin closes.
type clientProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// startClientProcess starts the clients' process with env (KEY=VALUE),
// which says what clients it is. The caller stops it.
func startClientProcess(tb testing.TB, env string) *clientProcess {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	return &clientProcess{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
}

// expect reads the clients' next line and fails tb, stopping them,
// unless it is want.
func (p *clientProcess) expect(tb testing.TB, want string) {
	tb.Helper()
	if line, err := p.out.ReadString('\n'); err != nil || line != want+"\n" {
		p.stop()
		tb.Fatalf("the clients said %q (%v), want %s", line, err, want)
	}
}

// say writes line to the clients' stdin.
func (p *clientProcess) say(tb testing.TB, line string) {
	tb.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		tb.Fatalf("telling the clients %q: %v", line, err)
	}
}

// stop closes the clients' stdin, which ends them, and waits for them.
// It may be called again.
func (p *clientProcess) stop() {
	p.stdin.Close()
	p.cmd.Wait() //nolint:errcheck // its errors went to stderr; a second Wait says it waited
}

// processCPU is process pid's user and system CPU time so far, from
// /proc/PID/stat (utime and stime, in the kernel's USER_HZ of 100 a
// second).
func processCPU(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// fields 14 and 15 are the 12th and 13th after its closing one.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		tb.Fatalf("/proc/%d/stat: %d fields after the command", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		tb.Fatalf("/proc/%d/stat: %v", pid, err)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// sample is what idleSample reads of the process.
type sample struct {
	stack, scanStack, heap uint64
	goroutines             int
	gc                     time.Duration // the fastest of a few full collections
}

// idleSample collects a few times (which also shrinks the stacks to what
// their goroutines use) and reads the memory the process holds.
func idleSample() sample {
	s := sample{gc: time.Hour}
	for range 5 {
		t := time.Now()
		runtime.GC()
		s.gc = min(s.gc, time.Since(t))
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m := []metrics.Sample{{Name: "/gc/scan/stack:bytes"}}
	metrics.Read(m)
	s.stack, s.heap, s.scanStack = ms.StackInuse, ms.HeapInuse, m[0].Value.Uint64()
	s.goroutines = runtime.NumGoroutine()
	return s
}

// idleClients is the clients' process (see idleClientEnv); spec is
// "ADDR N ACK". It says "open" on stdout once every stream is ACKed, and
// returns when stdin closes.
func idleClients(spec string) int {
	var addr string
	var n int
	var ack bool
	if _, err := fmt.Sscan(spec, &addr, &n, &ack); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	for i := range n {
		if err := idleStream(ctx, addr, "idle-"+strconv.Itoa(i), ack); err != nil {
			fmt.Fprintf(os.Stderr, "stream %d: %v\n", i, err)
			return 1
		}
	}
	fmt.Println("open")
	io.Copy(io.Discard, os.Stdin) //nolint:errcheck // until stdin closes
	return 0
}

// idleStream opens an ADS stream of node id on a connection of its own,
// and ACKs its first response, and with ack every later one. The stream
// stays open.
func idleStream(ctx context.Context, addr, id string, ack bool) error {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	if err := st.Send(cdsRequest(id)); err != nil {
		return err
	}
	resp, err := st.Recv()
	if err != nil {
		return err
	}
	if err := st.Send(ackOf(resp)); err != nil || !ack {
		return err
	}
	go func() {
		for {
			resp, err := st.Recv()
			if err != nil || st.Send(ackOf(resp)) != nil {
				return
			}
		}
	}()
	return nil
}

// ackOf is the ACK of resp.
func ackOf(resp *discoveryv3.DiscoveryResponse) *discoveryv3.DiscoveryRequest {
	return &discoveryv3.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}
}
