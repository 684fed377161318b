package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	// defaultTimeout bounds each wait of the script (a process coming up
	// or going) and of this package (HAProxy's view of a replica, a
	// replica's view reaching a revision).
	defaultTimeout = 30 * time.Second
	// pollInterval paces polls; it is not a wait for anything.
	pollInterval = 20 * time.Millisecond
)

// Options shape a cluster. The zero value is 3 etcd members and 3
// replicas.
type Options struct {
	// EtcdMembers is the number of etcd members, 1 to 10. Zero: 3.
	EtcdMembers int
	// Replicas is the number of xds-node replicas at the start. Zero: 3.
	Replicas int
	// XDSNodeFlags are extra flags for every replica, e.g.
	// {"--shutdown-timeout", "2s"}. The script splits them on spaces, so
	// none may hold one.
	XDSNodeFlags []string
	// EtcdFlags are extra flags for every etcd member, as XDSNodeFlags.
	EtcdFlags []string
	// Timeout bounds each wait: a process coming up or going, HAProxy
	// marking a replica up or down, a replica's view reaching a revision.
	// Zero: 30s.
	Timeout time.Duration
}

// Cluster is a running local cluster, stopped when the test that started
// it ends. Its methods fail the test (t.Fatal) when something does not
// happen in time, with the end of the log that says why; like t.Fatal
// they must be called from the test's goroutine, one at a time.
//
// The exported fields describe the cluster as the last method left it:
// each method that changes it reads them anew.
type Cluster struct {
	// Dir is the script's state directory: logs (NAME.log), pid files,
	// etcd data, haproxy.cfg and env, the file that lists every address.
	// It is removed when the test ends, except for its logs if it failed.
	Dir string
	// Net is the 127.0.N. prefix of every address.
	Net string
	// LBAddr is HAProxy's xDS address (gRPC, TCP mode, round robin over
	// the ready replicas).
	LBAddr string
	// LBHTTPAddr is HAProxy's address for the replicas' HTTP port.
	LBHTTPAddr string
	// LBStatsSocket is HAProxy's admin socket (see LBServers).
	LBStatsSocket string
	// EtcdEndpoints are the members' client addresses, host:port.
	EtcdEndpoints []string
	// Etcd are the members, etcd-1 first.
	Etcd []Member
	// Replicas are the xds-node replicas, replica-1 first.
	Replicas []Replica

	t       testing.TB
	script  string   // deploy/local/cluster.sh
	env     []string // the script's environment
	timeout time.Duration
}

// Member is one etcd member.
type Member struct {
	Name       string // etcd-I
	ClientAddr string // host:port
	PeerAddr   string // host:port
	Log        string // its output
	PID        int    // 0 if it has no pid file
	Running    bool   // its process exists (frozen counts as running)
}

// Replica is one xds-node replica.
type Replica struct {
	Name       string // replica-I, also its --name
	XDSAddr    string // gRPC, host:port
	HTTPAddr   string // /readyz, /debug/..., host:port
	GossipAddr string // host:port (--gossip-addr, if this xds-node has it)
	Log        string // its output
	PID        int    // 0 if it has no pid file
	Running    bool   // its process exists
}

// Start runs `deploy/local/cluster.sh up` for a new cluster and returns
// once every etcd member is healthy, every replica ready and HAProxy has
// marked every replica up. When the test ends the cluster is stopped
// (`down`); a check then fails the test if a replica's log shows a data
// race or a panic.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if !supported {
		t.Skip("clustertest runs bash, etcd and HAProxy processes: Unix only")
	}
	if opts.EtcdMembers == 0 {
		opts.EtcdMembers = 3
	}
	if opts.Replicas == 0 {
		opts.Replicas = 3
	}
	if opts.Timeout == 0 {
		opts.Timeout = defaultTimeout
	}
	for _, f := range slices.Concat(opts.XDSNodeFlags, opts.EtcdFlags) {
		if strings.ContainsAny(f, " \t\n") || f == "" {
			t.Fatalf("clustertest: flag %q: the script splits flags on spaces", f)
		}
	}
	if _, err := haproxyPath(); err != nil {
		t.Fatalf("clustertest: %v", err)
	}
	root := repoRoot(t)
	bin := binaries(t, root)
	prefix, lock := pickNet(t, opts.EtcdMembers, opts.Replicas)

	// Not t.TempDir: HAProxy's admin socket lives in Dir, and a socket's
	// path must fit in 108 bytes, which a long test name would overflow.
	dir, err := os.MkdirTemp("", "legation-cluster-")
	if err != nil {
		lock.Close()
		t.Fatalf("clustertest: %v", err)
	}
	c := &Cluster{
		Dir:     dir,
		Net:     prefix,
		t:       t,
		script:  filepath.Join(root, "deploy", "local", "cluster.sh"),
		timeout: opts.Timeout,
	}
	c.env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		// Only the script's flags configure the replicas.
		return strings.HasPrefix(kv, "LEGATION_")
	})
	// NET, ETCD_MEMBERS and REPLICAS only for up: the script saves them
	// in Dir/env, and later verbs read them there (add-replica changes
	// REPLICAS).
	c.env = append(c.env,
		"DIR="+dir,
		"BIN="+bin,
		"NET=",
		"ETCD_MEMBERS=",
		"REPLICAS=",
		fmt.Sprintf("TIMEOUT=%d", int((opts.Timeout+time.Second-1)/time.Second)),
		"XDS_NODE_FLAGS="+strings.Join(opts.XDSNodeFlags, " "),
		"ETCD_FLAGS="+strings.Join(opts.EtcdFlags, " "),
	)
	if raceEnabled() {
		if gorace := os.Getenv("GORACE"); !strings.Contains(gorace, "atexit_sleep_ms") {
			// A race-enabled binary otherwise sleeps 1s on exit.
			c.env = append(c.env, strings.TrimSpace("GORACE="+gorace+" atexit_sleep_ms=0"))
		}
	}

	reaped, err := startReaper(c.script, dir, c.env)
	if err != nil {
		lock.Close()
		os.RemoveAll(dir)
		t.Fatalf("clustertest: %v", err)
	}
	t.Cleanup(func() {
		if err := c.runErr(nil, "down"); err != nil {
			t.Errorf("clustertest: %v", err)
		}
		c.checkLogs()
		reaped()
		lock.Close()
		c.removeDir()
	})

	start := time.Now()
	c.runEnv([]string{"NET=" + prefix,
		fmt.Sprintf("ETCD_MEMBERS=%d", opts.EtcdMembers),
		fmt.Sprintf("REPLICAS=%d", opts.Replicas),
	}, "up")
	c.refresh()
	for _, r := range c.Replicas {
		c.waitLB(r, true)
	}
	t.Logf("clustertest: %d etcd members, %d replicas, HAProxy on %s, up in %s (state in %s)",
		len(c.Etcd), len(c.Replicas), c.LBAddr, time.Since(start).Round(time.Millisecond), dir)
	return c
}

// KillReplica kills c.Replicas[i] with SIGKILL and returns once HAProxy has
// marked it down.
func (c *Cluster) KillReplica(i int) {
	c.t.Helper()
	pid := c.Replicas[i].PID
	c.run("kill-replica", c.replicaNum(i))
	c.waitExited(c.Replicas[i].Name, pid, c.Replicas[i].Log)
	c.refresh()
	c.waitLB(c.Replicas[i], false)
}

// StopReplica sends c.Replicas[i] SIGTERM, waits until it has exited (it
// drains for its --shutdown-timeout first), and returns once HAProxy has
// marked it down.
func (c *Cluster) StopReplica(i int) {
	c.t.Helper()
	pid := c.Replicas[i].PID
	c.run("stop-replica", c.replicaNum(i))
	c.waitExited(c.Replicas[i].Name, pid, c.Replicas[i].Log)
	c.refresh()
	c.waitLB(c.Replicas[i], false)
}

// StartReplica starts c.Replicas[i] (stopped or killed before) and returns
// once it is ready and HAProxy has marked it up.
func (c *Cluster) StartReplica(i int) {
	c.t.Helper()
	c.run("start-replica", c.replicaNum(i))
	c.refresh()
	c.waitLB(c.Replicas[i], true)
}

// AddReplica starts one more replica, adds it to HAProxy (a graceful
// reload: open streams stay on the old HAProxy process), and returns its
// index in c.Replicas once HAProxy has marked it up.
func (c *Cluster) AddReplica() int {
	c.t.Helper()
	c.run("add-replica")
	c.refresh()
	i := len(c.Replicas) - 1
	c.waitLB(c.Replicas[i], true)
	return i
}

// KillEtcd kills c.Etcd[i] with SIGKILL.
func (c *Cluster) KillEtcd(i int) { c.t.Helper(); c.etcdVerb("kill-etcd", i) }

// StopEtcd sends c.Etcd[i] SIGTERM and waits until it has exited. etcd
// lets its clients' open streams (the replicas' watches) go for up to its
// request timeout, 7s, first.
func (c *Cluster) StopEtcd(i int) { c.t.Helper(); c.etcdVerb("stop-etcd", i) }

// StartEtcd starts c.Etcd[i] again on its data dir (it rejoins the
// cluster) and waits until it is healthy, which needs a quorum.
func (c *Cluster) StartEtcd(i int) { c.t.Helper(); c.etcdVerb("start-etcd", i) }

// FreezeEtcd stops c.Etcd[i] with SIGSTOP: it neither answers nor exits,
// as a hung or partitioned member.
func (c *Cluster) FreezeEtcd(i int) { c.t.Helper(); c.etcdVerb("freeze-etcd", i) }

// ThawEtcd resumes c.Etcd[i] (SIGCONT) after FreezeEtcd.
func (c *Cluster) ThawEtcd(i int) { c.t.Helper(); c.etcdVerb("thaw-etcd", i) }

func (c *Cluster) etcdVerb(verb string, i int) {
	c.t.Helper()
	if i < 0 || i >= len(c.Etcd) {
		c.t.Fatalf("clustertest: %s: no etcd member at index %d (there are %d)", verb, i, len(c.Etcd))
	}
	pid := c.Etcd[i].PID
	c.run(verb, strconv.Itoa(i+1))
	if verb == "kill-etcd" || verb == "stop-etcd" {
		c.waitExited(c.Etcd[i].Name, pid, c.Etcd[i].Log)
	}
	c.refresh()
}

// waitExited waits until process pid, which the script reported gone, is
// gone for processAlive too. The script goes by the command line, which a
// process loses as it starts to exit; its state turns Z only once it has
// released its memory, which takes a while for a big process (a
// race-enabled one maps terabytes of shadow memory). Until then refresh
// would still count it running.
func (c *Cluster) waitExited(name string, pid int, log string) {
	c.t.Helper()
	if pid == 0 {
		return
	}
	c.waitFor(fmt.Sprintf("%s (pid %d) exited", name, pid), log, func() (bool, string) {
		return !processAlive(pid), "still exiting"
	})
}

// replicaNum is the script's number of c.Replicas[i], failing the test if
// there is no such replica.
func (c *Cluster) replicaNum(i int) string {
	c.t.Helper()
	if i < 0 || i >= len(c.Replicas) {
		c.t.Fatalf("clustertest: no replica at index %d (there are %d)", i, len(c.Replicas))
	}
	return strconv.Itoa(i + 1)
}

// WaitRevision waits until the view of every running replica is at etcd
// revision rev or later (its /debug/view), so that a client connecting to
// any of them is served what was written at rev.
func (c *Cluster) WaitRevision(rev int64) {
	c.t.Helper()
	for _, r := range c.Replicas {
		if !r.Running {
			continue
		}
		c.waitFor(fmt.Sprintf("%s's view at revision %d", r.Name, rev), r.Log, func() (bool, string) {
			code, body, err := httpGet(r.HTTPAddr, "/debug/view")
			if err != nil || code != http.StatusOK {
				return false, fmt.Sprintf("GET /debug/view: %d %v %s", code, err, body)
			}
			var v struct {
				Revision int64 `json:"revision"`
			}
			if err := json.Unmarshal([]byte(body), &v); err != nil {
				return false, err.Error()
			}
			return v.Revision >= rev, fmt.Sprintf("at revision %d", v.Revision)
		})
	}
}

// WaitRing waits until every running replica's ring (its /debug/cluster)
// is exactly the running replicas: after a kill, a stop, a start or an
// add, the moment from which streams land on their settled homes.
func (c *Cluster) WaitRing() {
	c.t.Helper()
	var want []string
	for _, r := range c.Replicas {
		if r.Running {
			want = append(want, r.Name)
		}
	}
	sort.Strings(want)
	for _, r := range c.Replicas {
		if !r.Running {
			continue
		}
		c.waitFor(fmt.Sprintf("%s's ring of %v", r.Name, want), r.Log, func() (bool, string) {
			code, body, err := httpGet(r.HTTPAddr, "/debug/cluster")
			if err != nil || code != http.StatusOK {
				return false, fmt.Sprintf("GET /debug/cluster: %d %v %s", code, err, body)
			}
			var v struct {
				Ring []string `json:"ring"`
			}
			if err := json.Unmarshal([]byte(body), &v); err != nil {
				return false, err.Error()
			}
			sort.Strings(v.Ring)
			return slices.Equal(v.Ring, want), fmt.Sprintf("ring %v", v.Ring)
		})
	}
}

// waitLB waits until HAProxy has marked r up (or down) in both backends,
// xDS and HTTP.
func (c *Cluster) waitLB(r Replica, up bool) {
	c.t.Helper()
	want := "DOWN"
	if up {
		want = "UP"
	}
	c.waitFor(fmt.Sprintf("HAProxy marks %s %s", r.Name, want), r.Log, func() (bool, string) {
		states, err := c.LBServers()
		if err != nil {
			return false, err.Error()
		}
		var got []string
		ok := true
		for _, backend := range []string{"xds", "http"} {
			st := states[backend+"/"+r.Name]
			got = append(got, fmt.Sprintf("%s/%s %q", backend, r.Name, st))
			// "DOWN 1/2" is a server going up, "UP 1/2" one going down.
			if up && st != "UP" || !up && !strings.HasPrefix(st, "DOWN") {
				ok = false
			}
		}
		return ok, strings.Join(got, ", ")
	})
}

// waitFor polls cond until it holds, failing the test after c.timeout
// with cond's last word and the end of log.
func (c *Cluster) waitFor(what, log string, cond func() (bool, string)) {
	c.t.Helper()
	deadline := time.Now().Add(c.timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("clustertest: %s: not after %s; last: %s\n%s", what, c.timeout, why, tailOf(log, 30))
		}
		time.Sleep(pollInterval)
	}
}

// run runs the script with args, failing the test with its output (which
// names the process and ends with its log's last lines) if it fails.
func (c *Cluster) run(args ...string) {
	c.t.Helper()
	c.runEnv(nil, args...)
}

// runEnv is run with env added to the script's environment.
func (c *Cluster) runEnv(env []string, args ...string) {
	c.t.Helper()
	if err := c.runErr(env, args...); err != nil {
		c.t.Fatalf("clustertest: %v", err)
	}
}

func (c *Cluster) runErr(env []string, args ...string) error {
	// Each wait of the script is bounded by TIMEOUT, and a verb waits
	// for a handful of processes at most; down may wait GRACE (15s) per
	// process before SIGKILL.
	ctx, cancel := context.WithTimeout(context.Background(), 4*c.timeout+2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{c.script}, args...)...)
	cmd.Env = slices.Concat(c.env, env)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("cluster.sh %s: %v\n%s", strings.Join(args, " "), err, indent(string(out)))
	}
	return nil
}

// refresh reads the addresses from Dir/env and the pids from the pid
// files.
func (c *Cluster) refresh() {
	c.t.Helper()
	env, err := readEnv(filepath.Join(c.Dir, "env"))
	if err != nil {
		c.t.Fatalf("clustertest: %v", err)
	}
	var missing []string
	get := func(key string) string {
		v, ok := env[key]
		if !ok {
			missing = append(missing, key)
		}
		return v
	}
	num := func(key string) int {
		n, err := strconv.Atoi(get(key))
		if err != nil {
			missing = append(missing, key+" (a number)")
		}
		return n
	}
	c.LBAddr = get("LB_XDS_ADDR")
	c.LBHTTPAddr = get("LB_HTTP_ADDR")
	c.LBStatsSocket = get("LB_STATS_SOCKET")
	c.EtcdEndpoints = strings.Split(get("ETCD_ENDPOINTS"), ",")
	c.Etcd = nil
	for i := 1; i <= num("ETCD_MEMBERS"); i++ {
		k := fmt.Sprintf("ETCD_%d_", i)
		m := Member{
			Name:       get(k + "NAME"),
			ClientAddr: get(k + "CLIENT_ADDR"),
			PeerAddr:   get(k + "PEER_ADDR"),
			Log:        get(k + "LOG"),
			PID:        readPID(get(k + "PID_FILE")),
		}
		m.Running = m.PID > 0 && processAlive(m.PID)
		c.Etcd = append(c.Etcd, m)
	}
	c.Replicas = nil
	for i := 1; i <= num("REPLICAS"); i++ {
		k := fmt.Sprintf("REPLICA_%d_", i)
		r := Replica{
			Name:       get(k + "NAME"),
			XDSAddr:    get(k + "XDS_ADDR"),
			HTTPAddr:   get(k + "HTTP_ADDR"),
			GossipAddr: get(k + "GOSSIP_ADDR"),
			Log:        get(k + "LOG"),
			PID:        readPID(get(k + "PID_FILE")),
		}
		r.Running = r.PID > 0 && processAlive(r.PID)
		c.Replicas = append(c.Replicas, r)
	}
	if len(missing) > 0 {
		c.t.Fatalf("clustertest: %s/env lacks %s", c.Dir, strings.Join(missing, ", "))
	}
}

// readEnv parses the script's env file: KEY='VALUE' lines, where a single
// quote inside a value is written the shell's way: quote, backslash,
// quote, quote.
func readEnv(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	for n, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || len(v) < 2 || v[0] != '\'' || v[len(v)-1] != '\'' {
			return nil, fmt.Errorf("%s:%d: want KEY='VALUE', got %q", path, n+1, line)
		}
		env[k] = strings.ReplaceAll(v[1:len(v)-1], `'\''`, `'`)
	}
	return env, nil
}

// readPID reads a pid file; 0 if there is none.
func readPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return pid
}

// checkLogs fails the test if a replica's log shows a data race (when
// built with -race) or a Go panic or fatal error: the process was not
// the test's child, so its exit status is lost.
func (c *Cluster) checkLogs() {
	for _, r := range c.Replicas {
		b, err := os.ReadFile(r.Log)
		if err != nil {
			continue
		}
		log := string(b)
		for _, sign := range []string{"WARNING: DATA RACE", "\npanic: ", "\nfatal error: "} {
			at := strings.Index(log, sign)
			if at < 0 {
				continue
			}
			lines := strings.SplitN(log[at:], "\n", 81)
			c.t.Errorf("clustertest: %s's log (%s) shows %q:\n%s", r.Name, r.Log, strings.TrimSpace(sign),
				indent(strings.Join(lines[:min(len(lines), 80)], "\n")))
			break
		}
	}
}

// removeDir removes Dir. After a failure it keeps the logs and config,
// removes only etcd's data (WAL files are preallocated, 64 MB each), and
// logs the end of each log.
func (c *Cluster) removeDir() {
	if !c.t.Failed() {
		os.RemoveAll(c.Dir)
		return
	}
	data, _ := filepath.Glob(filepath.Join(c.Dir, "*.data"))
	for _, d := range data {
		os.RemoveAll(d)
	}
	logs, _ := filepath.Glob(filepath.Join(c.Dir, "*.log"))
	for _, l := range logs {
		c.t.Logf("clustertest: %s", tailOf(l, 15))
	}
	c.t.Logf("clustertest: the test failed: logs and config kept in %s", c.Dir)
}

// tailOf returns the last n lines of the file at path, with a heading.
func tailOf(path string, n int) string {
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("last lines of %s:\n%s", path, indent(strings.Join(lines, "\n")))
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// httpClient keeps no idle connections, so none outlive a test.
var httpClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}

// httpGet GETs path from the HTTP server on addr (host:port).
func httpGet(addr, path string) (int, string, error) {
	resp, err := httpClient.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}
