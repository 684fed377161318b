package runner

import (
	"context"
	"log/slog"
	"maps"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/tools/chaos"
	"github.com/legation-io/legation/internal/tools/chaos/faults"
	"github.com/legation-io/legation/internal/tools/chaos/record"
	"github.com/legation-io/legation/internal/tools/localcluster"
)

// TestShortSeed is make test's chaos run: the first regression seed, 30 s
// of faults every 2.5 s on average on 3 etcd members and 3 replicas, 60
// clients, an apply every 300 ms (some of them canary rollouts, promoted
// or aborted a few applies later); it must end with responses checked, no
// violation, every client converged within 30 s of the heal, and no
// crash.
func TestShortSeed(t *testing.T) {
	bins := localcluster.BuildForTest(t)
	cfg := Regressions[0].Config(DefaultConfig())
	if cfg.Duration > 30*time.Second || cfg.Clients > 60 {
		t.Fatalf("the first regression seed, %+v, is too long for make test", Regressions[0])
	}
	cfg.Dir = shortTempDir(t)
	cfg.Binaries = bins
	cfg.Logger = slog.New(slog.NewTextHandler(testbase.LogWriter(t), nil))
	cfg.Keep = true // for Recheck below; shortTempDir removes them
	sum := runSeed(t, cfg)
	// About 100 applies are due; a loaded machine, with etcd frozen or
	// killed for a third of the run, completes fewer (44 seen).
	if sum.FaultsApplied < sum.Faults/2 || sum.Applies < 25 || sum.Responses < cfg.Clients*20 || sum.Streams <= cfg.Clients ||
		len(sum.Rollouts) == 0 || sum.Promoted+sum.Aborted == 0 {
		t.Errorf("too little happened: %+v", sum)
	}
	// Recheck finds the same from the files kept.
	again, err := Recheck(sum.Kept, cfg.ConvergeWithin)
	if err != nil {
		t.Fatal(err)
	}
	if again.Responses != sum.Responses || again.Streams != sum.Streams || len(again.Violations) != len(sum.Violations) || again.Converge != sum.Converge {
		t.Errorf("Recheck: %s; the run: %s", again.Line(), sum.Line())
	}
}

// runSeed runs cfg and fails the test unless the seed passed: no
// violation, no crash, healed.
func runSeed(t *testing.T, cfg Config) Summary {
	t.Helper()
	sum, err := Run(context.Background(), cfg)
	t.Log(sum.Line())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range sum.Violations {
		t.Error(v)
	}
	for _, c := range sum.Crashes {
		t.Error(c)
	}
	if sum.HealError != "" {
		t.Error(sum.HealError)
	}
	return sum
}

// shortTempDir is a directory of os.TempDir() short enough for the
// cluster's Unix sockets (t.TempDir's path holds the test's name),
// removed at the end unless the test failed.
func shortTempDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "legation-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(dir)
		}
	})
	return dir
}

// TestFrontFailsOver: a front dials its targets in order and takes the
// first that answers; one closing ends the client's connection too.
func TestFrontFailsOver(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	live, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	f, err := newFront("127.0.0.1:0", func() []string { return []string{deadAddr, live.Addr().String()} })
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := net.Dial("tcp", f.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := live.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := s.Read(buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q, %v", buf, err)
	}
	s.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(buf); err == nil {
		t.Fatalf("read %d bytes after the target closed; want the connection closed", n)
	}
}

// TestSummaryLine: the line names the seed and says FAIL with a violation.
func TestSummaryLine(t *testing.T) {
	s := Summary{Seed: 7, Faults: 3, FaultsApplied: 3, Responses: 10, Rollouts: []string{"a", "b"}, Promoted: 1}
	if l := s.Line(); !strings.HasPrefix(l, "seed 7: ") || !strings.HasSuffix(l, ": ok") || !strings.Contains(l, "2 rollouts (1 promoted, 0 aborted)") {
		t.Errorf("line %q", l)
	}
	s.Violations = []chaos.Violation{{Kind: chaos.Duplicate}}
	if l := s.Line(); !strings.HasSuffix(l, ": FAIL") || !strings.Contains(l, "1 violations") {
		t.Errorf("line %q", l)
	}
	cfg := Config{}
	err := cfg.Validate()
	for _, want := range []string{"--duration", "--clients", "--apply-every", "--clusters", "--endpoints", "--converge-within", "--quiet", "Dir", "Binaries"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate of the zero Config: %v; want it to name %s", err, want)
		}
	}
}

// TestEffects: stream ends and the delivery of applies are counted to the
// fault classes whose windows (applied, healed plus Aftermath) hold them,
// and to NoFault outside; the run's own shutdown is not a stream end.
func TestEffects(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	log := []faults.Applied{{Fault: faults.Fault{Kind: faults.KillReplica, Target: "replica-1"}, AppliedAt: at(1000), HealedAt: at(3000)}}
	commits := []commit{{rev: 10, at: at(500)}, {rev: 20, at: at(2000)}}
	eds, cds := resource.Endpoint.URL, resource.Cluster.URL
	events := []record.Event{
		{Kind: record.KindResponse, Time: at(600), Client: "a", Stream: 1, Type: eds, Version: "10"},
		{Kind: record.KindResponse, Time: at(650), Client: "b", Stream: 1, Type: eds, Version: "10"},
		{Kind: record.KindResponse, Time: at(2100), Client: "a", Stream: 1, Type: cds, Version: "20"}, // not endpoints
		{Kind: record.KindEnd, Time: at(2200), Client: "a", Stream: 1, Error: "EOF"},
		{Kind: record.KindResponse, Time: at(2500), Client: "a", Stream: 2, Type: eds, Version: "21"},
		{Kind: record.KindResponse, Time: at(3500), Client: "b", Stream: 1, Type: eds, Version: "20"},
		{Kind: record.KindEnd, Time: at(9000), Client: "b", Stream: 1, Error: "rpc error: code = Canceled desc = context canceled"},
	}
	got := effects(log, commits, events, at(8000))
	want := map[string]Effect{
		NoFault:                    {Applies: 1, LagP50: 150 * time.Millisecond, LagP99: 150 * time.Millisecond, LagMax: 150 * time.Millisecond},
		string(faults.KillReplica): {Faults: 1, Seconds: 2, StreamEnds: 1, Applies: 1, LagP50: 1500 * time.Millisecond, LagP99: 1500 * time.Millisecond, LagMax: 1500 * time.Millisecond},
	}
	if !maps.Equal(got, want) {
		t.Errorf("effects:\n got %+v\nwant %+v", got, want)
	}
}
