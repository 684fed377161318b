package localcluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// What tests get from this file: StartForTest, a running cluster for one
// test, stopped when it ends; ConfigForTest, the Config it starts, for a
// test that runs the cluster in another process (deploy/local's).

// The 127.0.N. prefixes tests pick from; DefaultConfig's, 127.0.10., is
// outside, for people running a cluster by hand.
const (
	netFirst = 100
	netLast  = 250
)

// Names in os.TempDir() of what tests leave: binary directories, one per
// test process, and state directories, one per cluster. Each holds a file
// "lock" that its test process holds locked (flock) until it is done
// with it, so that a later test process can tell one whose process died
// (a test timeout's panic, a kill) and clean up after it.
const (
	binDirPrefix  = "legation-localcluster-bin-"
	testDirPrefix = "legation-cluster-"
)

// built holds the binaries of this test process, built at the first
// BuildForTest.
var built struct {
	sync.Mutex
	done bool     // guarded; set once the build ran, even if it failed
	bins Binaries // guarded
	err  error    // guarded
	lock *os.File // guarded; held open (and locked) for the life of the process
}

// BuildForTest returns etcd and xds-node built once per test process, the
// latter with the race detector under `go test -race` (the packages are
// those the test build already compiled, and a data race in a replica
// then fails the test: see StartForTest). They live in a directory of
// os.TempDir() that a later test process removes once this one has ended.
func BuildForTest(t testing.TB) Binaries {
	t.Helper()
	built.Lock()
	defer built.Unlock()
	if !built.done {
		built.done = true
		start := time.Now()
		built.bins, built.lock, built.err = buildForTest()
		if built.err == nil {
			t.Logf("localcluster: built etcd and xds-node (race detector: %t) in %s", raceEnabled(), time.Since(start).Round(time.Millisecond))
		}
	}
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bins
}

func buildForTest() (Binaries, *os.File, error) {
	sweep(binDirPrefix, func(dir string) { os.RemoveAll(dir) })
	root, err := ModuleRoot()
	if err != nil {
		return Binaries{}, nil, err
	}
	dir, err := os.MkdirTemp("", binDirPrefix)
	if err != nil {
		return Binaries{}, nil, fmt.Errorf("localcluster: %w", err)
	}
	lock, err := lockFile(filepath.Join(dir, "lock"))
	if err != nil {
		os.RemoveAll(dir)
		return Binaries{}, nil, err
	}
	bins, err := Build(context.Background(), root, dir, raceEnabled())
	if err != nil {
		lock.Close()
		os.RemoveAll(dir)
		return Binaries{}, nil, err
	}
	return bins, lock, nil
}

// sweep calls clean on each directory of os.TempDir() named prefix* whose
// lock no process holds.
func sweep(prefix string, clean func(dir string)) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*"))
	for _, d := range dirs {
		if lockFree(filepath.Join(d, "lock")) {
			clean(d)
		}
	}
}

// raceEnabled reports whether this binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// ConfigForTest returns cfg made ready for a test: Dir a new directory of
// os.TempDir() (short, for its sockets), Net a 127.0.N. prefix no other
// test process uses and where nothing listens on the cluster's addresses,
// the binaries BuildForTest's, and, when cfg.Env is nil, this process's
// environment without LEGATION_* variables (only flags configure the
// replicas) and, under -race, with GORACE=atexit_sleep_ms=0 (a race-built
// process otherwise sleeps 1s on exit). It fails the test if cfg asks for
// HAProxy and there is none.
//
// When the test ends Dir is removed; if it failed, etcd's data is
// removed, the logs kept, and the end of each logged. A process started
// on cfg must be stopped by then.
func ConfigForTest(t testing.TB, cfg Config) Config {
	t.Helper()
	if errUnsupported != nil {
		t.Fatal(errUnsupported)
	}
	if cfg.HAProxy && cfg.HAProxyBin == "" {
		if _, err := HAProxyPath(); err != nil {
			t.Fatal(err)
		}
	}
	bins := BuildForTest(t)
	cfg.EtcdBin, cfg.XDSNodeBin = bins.Etcd, bins.XDSNode
	if cfg.Env == nil {
		cfg.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "LEGATION_") })
		if gorace := os.Getenv("GORACE"); raceEnabled() && !strings.Contains(gorace, "atexit_sleep_ms") {
			cfg.Env = append(cfg.Env, strings.TrimSpace("GORACE="+gorace+" atexit_sleep_ms=0"))
		}
	}
	// What test processes that died left: etcd's data (its WAL files are
	// preallocated, 64 MB each); the logs stay for a post-mortem.
	sweep(testDirPrefix, removeData)
	// Not t.TempDir: HAProxy's admin socket lives in Dir, and a socket's
	// path must fit in 108 bytes, which a long test name would overflow.
	dir, err := os.MkdirTemp("", testDirPrefix)
	if err != nil {
		t.Fatalf("localcluster: %v", err)
	}
	lock, err := lockFile(filepath.Join(dir, "lock"))
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	cfg.Dir = dir
	prefix, claim := pickNet(t, cfg)
	cfg.Net = prefix
	t.Cleanup(func() {
		claim.Close()
		if t.Failed() {
			removeData(dir)
			logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
			for _, l := range logs {
				t.Logf("localcluster: %s", tailOf(l, 15))
			}
			t.Logf("localcluster: the test failed: logs and config kept in %s", dir)
		} else {
			os.RemoveAll(dir)
		}
		lock.Close()
	})
	return cfg
}

func removeData(dir string) {
	data, _ := filepath.Glob(filepath.Join(dir, "*.data"))
	for _, d := range data {
		os.RemoveAll(d)
	}
}

// pickNet is PickNet for a test: it fails the test when no prefix is free.
func pickNet(t testing.TB, cfg Config) (string, net.Listener) {
	t.Helper()
	prefix, claim, err := PickNet(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return prefix, claim
}

// PickNet returns a 127.0.N. prefix (N in 100-250, picked at random)
// whose addresses for cfg's processes are free, and a listener on the
// prefix's .2 (an address no process of a cluster uses) that claims it:
// other test processes and chaos runs skip a prefix whose .2 is taken.
// The caller closes the listener once the cluster is down; if the
// process dies, the kernel releases it.
func PickNet(cfg Config) (string, net.Listener, error) {
	n := netLast - netFirst + 1
	first := rand.IntN(n)
	var last error
	for k := range n {
		prefix := fmt.Sprintf("127.0.%d.", netFirst+(first+k)%n)
		claim, err := net.Listen("tcp", prefix+"2:18000")
		if err != nil {
			last = err
			continue
		}
		if err := probe(prefix, cfg); err != nil {
			claim.Close()
			last = err
			continue
		}
		return prefix, claim, nil
	}
	return "", nil, fmt.Errorf("localcluster: no free 127.0.N. prefix for N in %d-%d; last: %v "+
		"(a process listening on a wildcard address, such as an xds-node in dev mode on :18000, takes that port on them all)",
		netFirst, netLast, last)
}

// probe checks that nothing listens on the addresses cfg's processes will
// use under prefix (a cluster left running by a test process that died,
// for one), by binding each and closing it.
func probe(prefix string, cfg Config) error {
	var tcp, udp []string
	if cfg.HAProxy {
		tcp = append(tcp, hostPort(lbIP(prefix), xdsPort), hostPort(lbIP(prefix), httpPort))
	}
	for i := 1; i <= cfg.EtcdMembers; i++ {
		tcp = append(tcp, hostPort(etcdIP(prefix, i), etcdClientPort), hostPort(etcdIP(prefix, i), etcdPeerPort))
		if etcdTLS(&cfg) != nil {
			tcp = append(tcp, hostPort(etcdIP(prefix, i), etcdMetricsPort))
		}
	}
	for i := 1; i <= cfg.Replicas; i++ {
		ip := replicaIP(prefix, i)
		tcp = append(tcp, hostPort(ip, xdsPort), hostPort(ip, httpPort), hostPort(ip, gossipPort))
		udp = append(udp, hostPort(ip, gossipPort)) // memberlist gossips over UDP too
		if cfg.GossipProxies {
			tcp = append(tcp, hostPort(ip, gossipBindPort))
			udp = append(udp, hostPort(ip, gossipBindPort))
		}
	}
	var errs []error
	for _, a := range tcp {
		l, err := net.Listen("tcp", a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		l.Close()
	}
	for _, a := range udp {
		l, err := net.ListenPacket("udp", a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		l.Close()
	}
	return errors.Join(errs...)
}

// TestCluster is a running cluster for one test. Its methods fail the
// test (t.Fatal) when something does not happen in time, with the end of
// the log that says why; like t.Fatal they must be called from the
// test's goroutine, one at a time. Cluster gives the rest.
type TestCluster struct {
	// Dir is the state directory: logs (NAME.log), etcd data, haproxy.cfg
	// and env. It is removed when the test ends, except for its logs and
	// config if it failed.
	Dir string
	// Net is the 127.0.N. prefix of every address.
	Net string
	// LBAddr is HAProxy's xDS address (gRPC, TCP mode, round robin over
	// the ready replicas); empty without HAProxy.
	LBAddr string
	// LBHTTPAddr is HAProxy's address for the replicas' HTTP port.
	LBHTTPAddr string
	// EtcdEndpoints are the etcd client addresses the replicas use,
	// host:port.
	EtcdEndpoints []string

	c *Cluster
	t testing.TB
}

// StartForTest starts a cluster of cfg (ConfigForTest sets its Dir, Net,
// binaries and, if nil, Env) and returns once every etcd member is
// healthy, every replica ready and HAProxy, if any, has marked every
// replica up. When the test ends the cluster is stopped (Close); the test
// then fails if a process exited on its own, did not exit cleanly after
// SIGTERM (a replica: status 0) or needed SIGKILL, or if a replica's log
// shows a data race or a panic.
func StartForTest(t testing.TB, cfg Config) *TestCluster {
	t.Helper()
	cfg = ConfigForTest(t, cfg)
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tc := &TestCluster{Dir: c.cfg.Dir, Net: cfg.Net, c: c, t: t}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("localcluster: %v", err)
		}
		tc.checkExits()
		tc.checkLogs()
	})
	start := time.Now()
	if err := c.Up(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := c.Status()
	tc.EtcdEndpoints = st.EtcdEndpoints
	if st.HAProxy != nil {
		tc.LBAddr, tc.LBHTTPAddr = st.HAProxy.XDSAddr, st.HAProxy.HTTPAddr
		for _, r := range st.Replicas {
			tc.waitLB(r.Name, true)
		}
	}
	lb := "no HAProxy"
	if tc.LBAddr != "" {
		lb = "HAProxy on " + tc.LBAddr
	}
	t.Logf("localcluster: %d etcd members, %d replicas, %s; etcd at %s; up in %s (state in %s)",
		len(st.Etcd), len(st.Replicas), lb, strings.Join(tc.EtcdEndpoints, ","), time.Since(start).Round(time.Millisecond), tc.Dir)
	return tc
}

// Cluster is the cluster itself.
func (tc *TestCluster) Cluster() *Cluster { return tc.c }

// Replicas are the replicas now, replica-1 first.
func (tc *TestCluster) Replicas() []Replica { return tc.c.Replicas() }

// Etcd are the etcd members now, etcd-1 first.
func (tc *TestCluster) Etcd() []Member { return tc.c.Etcd() }

// KillReplica kills Replicas()[i] with SIGKILL and returns once it has
// exited and HAProxy, if any, has marked it down.
func (tc *TestCluster) KillReplica(i int) {
	tc.t.Helper()
	name := tc.replica(i)
	tc.check(tc.c.Kill(context.Background(), name))
	tc.waitLB(name, false)
}

// StopReplica sends Replicas()[i] SIGTERM, waits until it has exited (it
// closes its streams over its --drain-period and stops within its
// --shutdown-timeout first), and returns once HAProxy, if
// any, has marked it down.
func (tc *TestCluster) StopReplica(i int) {
	tc.t.Helper()
	name := tc.replica(i)
	tc.check(tc.c.Stop(context.Background(), name))
	tc.waitLB(name, false)
}

// StartReplica starts Replicas()[i] (stopped or killed before) and
// returns once it is ready and HAProxy, if any, has marked it up.
func (tc *TestCluster) StartReplica(i int) {
	tc.t.Helper()
	name := tc.replica(i)
	tc.check(tc.c.Start(context.Background(), name))
	tc.waitLB(name, true)
}

// AddReplica starts one more replica, adds it to HAProxy (a graceful
// reload: open streams stay on the old HAProxy process), and returns its
// index in Replicas() once HAProxy has marked it up.
func (tc *TestCluster) AddReplica() int {
	tc.t.Helper()
	r, err := tc.c.AddReplica(context.Background())
	tc.check(err)
	tc.waitLB(r.Name, true)
	return len(tc.c.Replicas()) - 1
}

// AddReplicaWith is AddReplica for a replica made with o: with o.Apart
// it returns once the replica is ready, HAProxy not knowing it.
func (tc *TestCluster) AddReplicaWith(o ReplicaOptions) int {
	tc.t.Helper()
	r, err := tc.c.AddReplicaWith(context.Background(), o)
	tc.check(err)
	if !o.Apart {
		tc.waitLB(r.Name, true)
	}
	return len(tc.c.Replicas()) - 1
}

// Security is the PKI of a secure cluster (Config.Secure), nil
// otherwise.
func (tc *TestCluster) Security() *Security { return tc.c.Security() }

// FreezeReplica stops Replicas()[i] with SIGSTOP.
func (tc *TestCluster) FreezeReplica(i int) { tc.t.Helper(); tc.check(tc.c.Freeze(tc.replica(i))) }

// ThawReplica resumes Replicas()[i] (SIGCONT) after FreezeReplica.
func (tc *TestCluster) ThawReplica(i int) { tc.t.Helper(); tc.check(tc.c.Thaw(tc.replica(i))) }

// KillEtcd kills Etcd()[i] with SIGKILL and returns once it has exited.
func (tc *TestCluster) KillEtcd(i int) {
	tc.t.Helper()
	tc.check(tc.c.Kill(context.Background(), tc.member(i)))
}

// StopEtcd sends Etcd()[i] SIGTERM and returns once it has exited. etcd
// lets its clients' open streams (the replicas' watches) go for up to its
// request timeout, 7s, first.
func (tc *TestCluster) StopEtcd(i int) {
	tc.t.Helper()
	tc.check(tc.c.Stop(context.Background(), tc.member(i)))
}

// StartEtcd starts Etcd()[i] again on its data dir (it rejoins the
// cluster) and returns once it is healthy, which needs a quorum.
func (tc *TestCluster) StartEtcd(i int) {
	tc.t.Helper()
	tc.check(tc.c.Start(context.Background(), tc.member(i)))
}

// FreezeEtcd stops Etcd()[i] with SIGSTOP: it neither answers nor exits,
// as a hung or partitioned member.
func (tc *TestCluster) FreezeEtcd(i int) { tc.t.Helper(); tc.check(tc.c.Freeze(tc.member(i))) }

// ThawEtcd resumes Etcd()[i] (SIGCONT) after FreezeEtcd.
func (tc *TestCluster) ThawEtcd(i int) { tc.t.Helper(); tc.check(tc.c.Thaw(tc.member(i))) }

// WaitRevision waits until the view of every running replica is at etcd
// revision rev or later (Cluster.WaitRevision).
func (tc *TestCluster) WaitRevision(rev int64) {
	tc.t.Helper()
	tc.check(tc.c.WaitRevision(context.Background(), rev))
}

// WaitRing waits until every running replica's ring is exactly the
// running replicas (Cluster.WaitRing).
func (tc *TestCluster) WaitRing() {
	tc.t.Helper()
	tc.check(tc.c.WaitRing(context.Background()))
}

func (tc *TestCluster) waitLB(name string, up bool) {
	tc.t.Helper()
	if tc.c.lb == nil {
		return
	}
	if p, err := tc.c.find(name); err == nil && p.apart {
		return // HAProxy does not know it (ReplicaOptions.Apart)
	}
	tc.check(tc.c.WaitLB(context.Background(), name, up))
}

func (tc *TestCluster) check(err error) {
	tc.t.Helper()
	if err != nil {
		tc.t.Fatal(err)
	}
}

// replica is the name of Replicas()[i], failing the test if there is none.
func (tc *TestCluster) replica(i int) string {
	tc.t.Helper()
	rs := tc.c.Replicas()
	if i < 0 || i >= len(rs) {
		tc.t.Fatalf("localcluster: no replica at index %d (there are %d)", i, len(rs))
	}
	return rs[i].Name
}

// member is the name of Etcd()[i], failing the test if there is none.
func (tc *TestCluster) member(i int) string {
	tc.t.Helper()
	ms := tc.c.Etcd()
	if i < 0 || i >= len(ms) {
		tc.t.Fatalf("localcluster: no etcd member at index %d (there are %d)", i, len(ms))
	}
	return ms[i].Name
}

// checkExits fails the test for each run that ended unlike a process told
// to stop: on its own, uncleanly after SIGTERM, or only after SIGKILL.
func (tc *TestCluster) checkExits() {
	for _, p := range tc.c.BadExits() {
		tc.t.Errorf("localcluster: %s", p)
	}
}

// checkLogs fails the test if a replica's log shows a data race (when
// built with -race) or a Go panic or fatal error.
func (tc *TestCluster) checkLogs() {
	for _, p := range tc.c.LogProblems() {
		tc.t.Errorf("localcluster: %s", p)
	}
}
