package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrClosed is returned by the operations of a closed Cluster.
var ErrClosed = errors.New("localcluster: closed")

// Cluster is a local cluster whose processes are this process's children.
// New makes one without starting anything; Up starts it; Close stops
// everything for good.
//
// Its methods may be called concurrently. Those that start or stop
// processes (Up, Down, Start, Stop, Kill, AddReplica, Close) run one at a
// time, each waiting for the one before; the others (Status, Freeze,
// Thaw, the waits) do not wait for them. A method given a ctx returns
// early with ctx's error when it ends; a process it was stopping then
// gets SIGKILL at once, one it was starting keeps running.
type Cluster struct {
	cfg Config
	log *slog.Logger

	// opMu makes the operations that start or stop processes run one at
	// a time; held across their waits. Taken before mu.
	opMu sync.Mutex

	// mu guards the fields below and every proc's cur and run's fields
	// marked so. Never held while waiting, spawning or sending a request.
	mu       sync.Mutex
	etcd     []*proc
	replicas []*proc // grows with AddReplica
	lb       *proc   // nil without HAProxy
	oldLB    []*run  // HAProxy processes a reload left serving their open connections
	exits    []Exit
	spawner  *spawner // started by the first operation, ended by Close
	closed   bool
	// lastReplica is the highest I of a replica-I made so far: a replica
	// added after a removal gets a new name and address.
	lastReplica int
	// sec is the PKI of a secure cluster, made by the first operation;
	// nil until then, and without Config.Secure.
	sec *Security
	// http reaches the replicas' and HAProxy's HTTP ports: over HTTPS
	// with the admin's certificate once sec is made.
	http *http.Client

	reapers sync.WaitGroup // one per run, returning once cmd.Wait has
	// closeOnce and done make Close idempotent and observable.
	closeOnce sync.Once
	done      chan struct{}
	closeErr  error
}

// New checks cfg and returns a Cluster ready to Up. It starts nothing.
func New(cfg Config) (*Cluster, error) {
	if errUnsupported != nil {
		return nil, errUnsupported
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("localcluster: Dir: %w", err)
	}
	cfg.Dir = dir
	cfg.EtcdFlags = slices.Clone(cfg.EtcdFlags)
	cfg.XDSNodeFlags = slices.Clone(cfg.XDSNodeFlags)
	cfg.EtcdEndpoints = slices.Clone(cfg.EtcdEndpoints)
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	c := &Cluster{cfg: cfg, log: cfg.Logger, done: make(chan struct{}), http: plainHTTP}
	if c.log == nil {
		c.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	for i := 1; i <= cfg.EtcdMembers; i++ {
		c.etcd = append(c.etcd, c.newProc(kindEtcd, i))
	}
	for i := 1; i <= cfg.Replicas; i++ {
		c.replicas = append(c.replicas, c.newProc(kindReplica, i))
	}
	c.lastReplica = cfg.Replicas
	if cfg.HAProxy {
		c.lb = c.newProc(kindHAProxy, 0)
	}
	return c, nil
}

func (c *Cluster) newProc(k kind, i int) *proc {
	var name string
	switch k {
	case kindEtcd:
		name = fmt.Sprintf("%setcd-%d", c.cfg.NamePrefix, i)
	case kindReplica:
		name = fmt.Sprintf("%sreplica-%d", c.cfg.NamePrefix, i)
	case kindHAProxy:
		name = c.cfg.NamePrefix + "haproxy"
	}
	return &proc{name: name, kind: k, index: i, log: filepath.Join(c.cfg.Dir, name+".log")}
}

// Config returns the cluster's config, with Dir made absolute.
func (c *Cluster) Config() Config { return c.cfg }

// etcdEndpoints are what the replicas are given: the members' client
// addresses, or Config.EtcdEndpoints.
func (c *Cluster) etcdEndpoints() []string {
	if c.cfg.EtcdMembers == 0 {
		return slices.Clone(c.cfg.EtcdEndpoints)
	}
	var eps []string
	for i := 1; i <= c.cfg.EtcdMembers; i++ {
		ep := hostPort(etcdIP(c.cfg.Net, i), etcdClientPort)
		if etcdTLS(&c.cfg) != nil {
			ep = "https://" + ep
		}
		eps = append(eps, ep)
	}
	return eps
}

// begin is the start of every operation that starts or stops processes:
// the caller holds opMu. It fails once the Cluster is closed, and makes
// Dir and the spawner the first time.
func (c *Cluster) begin() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	if c.spawner == nil {
		if err := os.MkdirAll(c.cfg.Dir, 0o755); err != nil {
			return fmt.Errorf("localcluster: %w", err)
		}
		c.spawner = newSpawner()
	}
	if c.cfg.Secure && c.sec == nil {
		sec, err := newSecurity(pkiDir(c.cfg.Dir), c.cfg.Net, c.cfg.EtcdMembers)
		if err != nil {
			return err
		}
		c.sec = sec
		c.http = &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: sec.AdminTLS()}}
	}
	return nil
}

// Security is the PKI of a secure cluster (Config.Secure): nil before
// the first operation (Up, Start, AddReplica) and without Secure.
func (c *Cluster) Security() *Security {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sec
}

// Up starts what is not running, in order etcd members, replicas,
// HAProxy, and returns once each member's /health and each replica's
// /readyz are 200, and a replica answers through HAProxy. With HAProxy
// running and its config changed (AddReplica), it reloads it. On an
// existing Dir it fails if Dir's env says the cluster there has another
// Net or another number of etcd members (the members' data is bound to
// their addresses); etcd members rejoin with the data they have.
//
// What it started keeps running when it fails: Down or Close stops it.
func (c *Cluster) Up(ctx context.Context) error {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	if err := c.begin(); err != nil {
		return err
	}
	if err := c.checkSaved(); err != nil {
		return err
	}
	if err := c.writeEnv(); err != nil {
		return err
	}
	start := time.Now()
	etcd, replicas := c.procs()
	// Every member first, then the waits: a member is healthy only once
	// a quorum of them runs.
	for _, p := range etcd {
		if err := c.startProc(p); err != nil {
			return err
		}
	}
	for _, p := range etcd {
		if err := c.waitHealthy(ctx, p); err != nil {
			return err
		}
	}
	if sec := c.Security(); sec != nil {
		if err := sec.setUpEtcd(ctx, c.etcdEndpoints()); err != nil {
			return err
		}
	}
	for _, p := range replicas {
		if err := c.startProc(p); err != nil {
			return err
		}
	}
	for _, p := range replicas {
		if err := c.waitHealthy(ctx, p); err != nil {
			return err
		}
	}
	if c.lb != nil {
		if err := c.upLB(ctx); err != nil {
			return err
		}
	}
	c.log.Info("cluster up", "etcd_members", len(etcd), "replicas", len(replicas), "haproxy", c.lb != nil,
		"took", time.Since(start).Round(time.Millisecond), "dir", c.cfg.Dir)
	return nil
}

// procs returns the etcd members and the replicas.
func (c *Cluster) procs() (etcd, replicas []*proc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.etcd), slices.Clone(c.replicas)
}

// Down stops everything: HAProxy (with the processes old reloads left),
// then the replicas together, then the etcd members one at a time: each
// gets SIGTERM (and SIGCONT, should it be frozen), and SIGKILL if it has
// not exited after Config.Grace. Dir stays, with the logs and etcd's
// data; Up starts the cluster again.
func (c *Cluster) Down(ctx context.Context) error {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	return c.down(ctx)
}

func (c *Cluster) down(ctx context.Context) error {
	var errs []error
	c.mu.Lock()
	var lb []target
	if c.lb != nil {
		lb = c.lbTargetsLocked()
	}
	replicas := targetsLocked(c.replicas)
	etcd := targetsLocked(c.etcd)
	c.mu.Unlock()
	// Front to back: no client is left to drain on a replica, and no
	// replica is left waiting on etcd. The replicas together.
	errs = append(errs, c.stopRuns(ctx, lb...))
	errs = append(errs, c.stopRuns(ctx, replicas...))
	// One member at a time: a leader stopped while its peers are going
	// too spends etcd's request timeout (7s) on a leadership transfer
	// that cannot succeed; with steady peers it takes a moment.
	for _, m := range etcd {
		errs = append(errs, c.stopRuns(ctx, m))
	}
	return errors.Join(errs...)
}

// Close stops everything as Down does, without a deadline on the graceful
// part beyond Config.Grace, and ends the Cluster: later operations return
// ErrClosed. It is idempotent, and returns the first call's result.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		c.opMu.Lock()
		defer c.opMu.Unlock()
		c.closeErr = c.down(context.Background())
		c.mu.Lock()
		c.closed = true
		s := c.spawner
		c.mu.Unlock()
		c.reapers.Wait()
		for _, p := range c.replicas {
			c.closeProxies(p)
		}
		if s != nil {
			s.close()
		}
		close(c.done)
	})
	return c.closeErr
}

// Done is closed once Close has stopped everything.
func (c *Cluster) Done() <-chan struct{} { return c.done }

// find returns the process called name.
func (c *Cluster) find(name string) (*proc, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ps := range [][]*proc{c.etcd, c.replicas, {c.lb}} {
		for _, p := range ps {
			if p != nil && p.name == name {
				return p, nil
			}
		}
	}
	return nil, fmt.Errorf("localcluster: no process %q (%s)", name, c.namesLocked())
}

func (c *Cluster) namesLocked() string {
	var names []string
	if n := len(c.etcd); n > 0 {
		names = append(names, fmt.Sprintf("%s to %s", c.etcd[0].name, c.etcd[n-1].name))
	}
	if n := len(c.replicas); n > 0 {
		names = append(names, fmt.Sprintf("%s to %s", c.replicas[0].name, c.replicas[n-1].name))
	}
	if c.lb != nil {
		names = append(names, c.lb.name)
	}
	return "there are " + strings.Join(names, ", ")
}

// Start starts the process called name if it is not running, and returns
// once it is healthy: an etcd member (on the data it has: it rejoins)
// once its /health is 200, which needs a quorum; a replica once its
// /readyz is 200; HAProxy once a replica answers through it.
func (c *Cluster) Start(ctx context.Context, name string) error {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	if err := c.begin(); err != nil {
		return err
	}
	p, err := c.find(name)
	if err != nil {
		return err
	}
	if p.kind == kindHAProxy {
		return c.upLB(ctx)
	}
	if err := c.startProc(p); err != nil {
		return err
	}
	return c.waitHealthy(ctx, p)
}

// Stop sends the process called name SIGTERM (and SIGCONT, should it be
// frozen) and returns once it has exited; after Config.Grace it sends
// SIGKILL. A replica closes its streams over its --drain-period and
// stops within its --shutdown-timeout first; etcd lets
// its clients' open streams go for up to its request timeout (7s).
// Stopping HAProxy stops the processes old reloads left too.
func (c *Cluster) Stop(ctx context.Context, name string) error {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	p, err := c.find(name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	ts := targetsLocked([]*proc{p})
	if p.kind == kindHAProxy {
		ts = c.lbTargetsLocked()
	}
	c.mu.Unlock()
	return c.stopRuns(ctx, ts...)
}

// Kill sends the process called name SIGKILL and returns once it has
// exited. Killing one that is not running does nothing.
func (c *Cluster) Kill(ctx context.Context, name string) error {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	p, err := c.find(name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	r := p.cur
	alive := r.alive()
	if alive {
		r.cause = causeKill
		r.frozen = false
		r.cmd.Process.Signal(sigKill) //nolint:errcheck // it may have just exited: done says
	}
	c.mu.Unlock()
	if !alive {
		return nil
	}
	c.log.Info("killed", "name", p.name, "pid", r.pid)
	return c.waitDone(ctx, p.name, r, "SIGKILL")
}

// Freeze sends the process called name SIGSTOP: it hangs, neither
// answering nor exiting, as a hung or partitioned process. It fails if
// the process is not running.
func (c *Cluster) Freeze(name string) error { return c.signalFrozen(name, true) }

// Thaw sends the process called name SIGCONT after Freeze.
func (c *Cluster) Thaw(name string) error { return c.signalFrozen(name, false) }

func (c *Cluster) signalFrozen(name string, freeze bool) error {
	p, err := c.find(name)
	if err != nil {
		return err
	}
	sig, verb := sigCont, "thawed"
	if freeze {
		sig, verb = sigStop, "froze"
	}
	c.mu.Lock()
	r := p.cur
	if !r.alive() {
		c.mu.Unlock()
		return fmt.Errorf("localcluster: %s is not running", name)
	}
	err = r.cmd.Process.Signal(sig)
	if err == nil {
		r.frozen = freeze
	}
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("localcluster: %s: %w", name, err)
	}
	c.log.Info(verb, "name", name, "pid", r.pid)
	return nil
}

// AddReplica starts one more replica, waits until it is ready, then adds
// it to HAProxy with a graceful reload (the new HAProxy process takes the
// listeners, the old one keeps its open connections until they end or
// Down), and returns it. It does not wait for HAProxy's health checks to
// mark it up (WaitLB).
func (c *Cluster) AddReplica(ctx context.Context) (Replica, error) {
	return c.AddReplicaWith(ctx, ReplicaOptions{})
}

// ReplicaOptions make a replica unlike the others (AddReplicaWith).
type ReplicaOptions struct {
	// Args, if set, rewrites the replica's command line (the flags this
	// package sets, then Config.XDSNodeFlags) at each start: a replica
	// misconfigured on purpose, say.
	Args func(args []string) []string
	// Apart keeps the replica out of HAProxy, now and at later reloads:
	// no client lands on it.
	Apart bool
}

// AddReplicaWith is AddReplica for a replica made with o.
func (c *Cluster) AddReplicaWith(ctx context.Context, o ReplicaOptions) (Replica, error) {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	if err := c.begin(); err != nil {
		return Replica{}, err
	}
	c.mu.Lock()
	n := len(c.replicas)
	if c.lastReplica >= maxReplicas {
		c.mu.Unlock()
		return Replica{}, fmt.Errorf("localcluster: %d replicas is the most (removed ones count)", maxReplicas)
	}
	c.lastReplica++
	p := c.newProc(kindReplica, c.lastReplica)
	p.args, p.apart = o.Args, o.Apart
	c.replicas = append(c.replicas, p)
	c.mu.Unlock()
	// The env file first, so that it lists the replica even if it fails
	// to come up.
	if err := c.writeEnv(); err != nil {
		return Replica{}, err
	}
	if err := c.startProc(p); err != nil {
		return Replica{}, err
	}
	if err := c.waitHealthy(ctx, p); err != nil {
		return Replica{}, err
	}
	if c.lb != nil && !o.Apart {
		if err := c.upLB(ctx); err != nil {
			return Replica{}, err
		}
	}
	return c.Status().Replicas[n], nil
}

// startProc starts p unless it runs.
func (c *Cluster) startProc(p *proc) error {
	c.mu.Lock()
	running := p.cur.alive()
	c.mu.Unlock()
	if running {
		return nil
	}
	var bin string
	var args, env []string
	var err error
	switch p.kind {
	case kindEtcd:
		bin, args = c.cfg.EtcdBin, c.etcdArgs(p)
		// etcd takes ETCD_<FLAG> variables as flags.
		env = slices.DeleteFunc(slices.Clone(c.cfg.Env), func(kv string) bool { return strings.HasPrefix(kv, "ETCD_") })
	case kindReplica:
		bin, env = c.cfg.XDSNodeBin, c.cfg.Env
		if err := c.startProxies(p); err != nil {
			return err
		}
		if args, err = c.replicaArgs(p); err != nil {
			return err
		}
	default:
		return fmt.Errorf("localcluster: startProc %s", p.name) // upLB starts HAProxy
	}
	_, err = c.spawn(p, bin, args, env)
	return err
}

// spawn starts bin as a new run of p, its output appended to p's log under
// a line with the time and command, and a goroutine waiting for its end.
func (c *Cluster) spawn(p *proc, bin string, args, env []string) (*run, error) {
	logf, err := os.OpenFile(p.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("localcluster: %s: %w", p.name, err)
	}
	defer logf.Close() // the child has its own copy
	fmt.Fprintf(logf, "=== %s %s: %s %s\n", time.Now().Format("2006-01-02 15:04:05"), p.name, bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Dir = c.cfg.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	c.mu.Lock()
	s := c.spawner
	c.mu.Unlock()
	if err := s.start(cmd); err != nil {
		return nil, fmt.Errorf("localcluster: start %s: %w", p.name, err)
	}
	r := &run{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	c.mu.Lock()
	if p.kind == kindHAProxy && p.cur.alive() {
		// A reload: the old process keeps its open connections.
		p.cur.cause = causeReload
		c.oldLB = append(c.oldLB, p.cur)
	}
	p.cur = r
	c.reapers.Add(1)
	c.mu.Unlock()
	go c.reap(p, r)
	c.log.Info("started", "name", p.name, "pid", r.pid, "log", p.log)
	return r, nil
}

// reap waits for r's process to end and records how.
func (c *Cluster) reap(p *proc, r *run) {
	defer c.reapers.Done()
	err := r.cmd.Wait()
	c.mu.Lock()
	e := exitOf(p, r, err)
	r.exit = e
	r.frozen = false
	c.exits = append(c.exits, *e)
	if i := slices.Index(c.oldLB, r); i >= 0 {
		c.oldLB = slices.Delete(c.oldLB, i, i+1)
	}
	close(r.done)
	c.mu.Unlock()
	if e.Cause == "" {
		c.log.Warn("exited on its own", "name", p.name, "pid", r.pid, "status", e.Status, "log", p.log)
	} else {
		c.log.Info("exited", "name", p.name, "pid", r.pid, "status", e.Status, "cause", e.Cause)
	}
}

// target is a run to stop, and the name of its process.
type target struct {
	name string
	r    *run
}

// targetsLocked returns the current runs of ps. The caller holds mu.
func targetsLocked(ps []*proc) []target {
	ts := make([]target, len(ps))
	for i, p := range ps {
		ts[i] = target{p.name, p.cur}
	}
	return ts
}

// lbTargetsLocked returns HAProxy's current run and those old reloads
// left. The caller holds mu.
func (c *Cluster) lbTargetsLocked() []target {
	ts := targetsLocked([]*proc{c.lb})
	for _, r := range c.oldLB {
		ts = append(ts, target{c.lb.name, r})
	}
	return ts
}

// stopRuns sends each live run of ts SIGTERM and SIGCONT, waits
// Config.Grace (less once ctx ends) for them all, sends SIGKILL to those
// left, and waits for those up to Config.Timeout. Nil runs are skipped.
func (c *Cluster) stopRuns(ctx context.Context, ts ...target) error {
	var live []target
	c.mu.Lock()
	for _, t := range ts {
		if !t.r.alive() {
			continue
		}
		t.r.cause = causeStop
		t.r.frozen = false
		// A frozen process takes SIGTERM only once it runs again.
		t.r.cmd.Process.Signal(sigTerm) //nolint:errcheck // it may have just exited: done says
		t.r.cmd.Process.Signal(sigCont) //nolint:errcheck // as above
		live = append(live, t)
	}
	c.mu.Unlock()
	for _, t := range live {
		c.log.Info("stopping", "name", t.name, "pid", t.r.pid)
	}
	grace, cancel := context.WithTimeout(ctx, c.cfg.Grace)
	defer cancel()
	var errs []error
	for _, t := range live {
		select {
		case <-t.r.done:
			continue
		case <-grace.Done():
		}
		c.mu.Lock()
		if t.r.alive() {
			t.r.cause = causeStopKill
			t.r.cmd.Process.Signal(sigKill) //nolint:errcheck // it may have just exited: done says
		}
		c.mu.Unlock()
		c.log.Warn("still running after SIGTERM: SIGKILL", "name", t.name, "pid", t.r.pid, "grace", c.cfg.Grace)
		// ctx may have ended already: the SIGKILL wait has its own bound.
		errs = append(errs, c.waitDone(context.WithoutCancel(ctx), t.name, t.r, "SIGKILL"))
	}
	return errors.Join(errs...)
}

// waitDone waits up to Config.Timeout for r's process to end after sig.
func (c *Cluster) waitDone(ctx context.Context, name string, r *run, sig string) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("localcluster: %s (pid %d) still runs %s after %s", name, r.pid, c.cfg.Timeout, sig)
	}
}

func (c *Cluster) etcdArgs(p *proc) []string {
	ip := etcdIP(c.cfg.Net, p.index)
	client := "http://" + hostPort(ip, etcdClientPort)
	if etcdTLS(&c.cfg) != nil {
		client = "https://" + hostPort(ip, etcdClientPort)
	}
	peer := "http://" + hostPort(ip, etcdPeerPort)
	var initial []string
	for i := 1; i <= c.cfg.EtcdMembers; i++ {
		initial = append(initial, fmt.Sprintf("%setcd-%d=http://%s", c.cfg.NamePrefix, i, hostPort(etcdIP(c.cfg.Net, i), etcdPeerPort)))
	}
	// Once its data dir exists etcd ignores the --initial-* flags and
	// rejoins with what the data dir holds.
	args := []string{
		"--name", p.name,
		"--data-dir", filepath.Join(c.cfg.Dir, p.name+".data"),
		"--listen-client-urls", client,
		"--advertise-client-urls", client,
		"--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer,
		"--initial-cluster", strings.Join(initial, ","),
		"--initial-cluster-state", "new",
		"--initial-cluster-token", "legation-" + c.cfg.NamePrefix + c.cfg.Net,
		// History and space as the README's cluster example keeps them
		// (EtcdFlags, after these, may change them).
		"--auto-compaction-mode", "revision",
		"--auto-compaction-retention", "100000",
		"--quota-backend-bytes", "4294967296",
	}
	if t := etcdTLS(&c.cfg); t != nil {
		cert, key := t.CertFile, t.KeyFile
		if c.cfg.Secure {
			f := etcdServerFiles(pkiDir(c.cfg.Dir), p.index)
			cert, key = f.CertFile, f.KeyFile
		}
		args = append(args, "--cert-file", cert, "--key-file", key,
			// /health in plain HTTP, for waitHealthy.
			"--listen-metrics-urls", "http://"+hostPort(ip, etcdMetricsPort))
		if t.TrustedCAFile != "" {
			args = append(args, "--trusted-ca-file", t.TrustedCAFile)
		}
		if t.ClientCertAuth {
			args = append(args, "--client-cert-auth")
		}
	}
	return append(args, c.cfg.EtcdFlags...)
}

func (c *Cluster) replicaArgs(p *proc) ([]string, error) {
	ip := replicaIP(c.cfg.Net, p.index)
	// Peers are found through the etcd registry (no --join).
	args := []string{
		"--etcd-endpoints", strings.Join(c.replicaEtcdEndpoints(p), ","),
		"--xds-addr", hostPort(ip, xdsPort),
		"--http-addr", hostPort(ip, httpPort),
		"--name", p.name,
		"--gossip-addr", hostPort(ip, gossipPort),
		"--advertise-addr", ip,
	}
	if c.cfg.GossipProxies {
		// Bind behind the proxy, advertise the proxy.
		args[9], args[11] = hostPort(ip, gossipBindPort), hostPort(ip, gossipPort)
	}
	if sec := c.Security(); sec != nil {
		f, err := sec.replica(p.name, ip, lbIP(c.cfg.Net))
		if err != nil {
			return nil, err
		}
		args = append(args, sec.replicaArgs(f)...)
	} else {
		// Without mTLS /debug/ is off unless asked for; the cluster's own
		// probes (WaitRevision, WaitRing) read it from this host.
		args = append(args, "--insecure-loopback-debug")
	}
	args = append(args, c.cfg.XDSNodeFlags...)
	if p.args != nil {
		args = p.args(args)
	}
	return args, nil
}

// Exits lists how every run of every process ended so far, oldest first.
func (c *Cluster) Exits() []Exit {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.exits)
}

// BadExits describes each run that ended other than as this package
// ended it: on its own (a crash), unclean after SIGTERM, or killed after
// its Grace; each with the end of its log.
func (c *Cluster) BadExits() []string {
	var out []string
	for _, e := range c.Exits() {
		var why string
		switch {
		case e.Cause == "":
			why = "exited on its own"
		case e.Cause == causeStop && !e.Clean:
			why = "did not exit cleanly after SIGTERM"
		case e.Cause == causeStopKill:
			why = fmt.Sprintf("still ran %s after SIGTERM: killed", c.cfg.Grace)
		default:
			continue
		}
		out = append(out, fmt.Sprintf("%s (pid %d) %s: %s\n%s", e.Name, e.PID, why, e.Status, tailOf(e.Log, 30)))
	}
	return out
}

// LogProblems describes each replica whose log shows a data race (when
// built with -race) or a Go panic or fatal error, with the log from there.
func (c *Cluster) LogProblems() []string {
	var out []string
	for _, r := range c.Replicas() {
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
			out = append(out, fmt.Sprintf("%s's log (%s) shows %q:\n%s", r.Name, r.Log, strings.TrimSpace(sign),
				indent(strings.Join(lines[:min(len(lines), 80)], "\n"))))
			break
		}
	}
	return out
}

// Status describes the cluster now: addresses, and each process's state
// and pid. It does no I/O (Probe adds health).
type Status struct {
	Dir string `json:"dir"`
	Net string `json:"net"`
	// EtcdEndpoints are what the replicas use, host:port.
	EtcdEndpoints []string  `json:"etcd_endpoints"`
	Etcd          []Member  `json:"etcd,omitempty"`
	Replicas      []Replica `json:"replicas"`
	// HAProxy is nil without HAProxy.
	HAProxy *LB `json:"haproxy,omitempty"`
}

// Member is one etcd member.
type Member struct {
	Name       string `json:"name"`        // etcd-I, also its --name
	ClientAddr string `json:"client_addr"` // host:port
	PeerAddr   string `json:"peer_addr"`   // host:port
	DataDir    string `json:"data_dir"`
	Log        string `json:"log"` // its output, appended across runs
	PID        int    `json:"pid"` // of its current or last run; 0 if never started
	State      State  `json:"state"`
	Health     string `json:"health,omitempty"` // Probe's: "/health 200"
}

// Running reports whether its process exists (frozen counts).
func (m Member) Running() bool { return m.State != Gone }

// Replica is one xds-node replica.
type Replica struct {
	Name       string `json:"name"`        // replica-I, also its --name
	XDSAddr    string `json:"xds_addr"`    // gRPC, host:port
	HTTPAddr   string `json:"http_addr"`   // /readyz, /debug/..., host:port
	GossipAddr string `json:"gossip_addr"` // host:port
	Log        string `json:"log"`
	PID        int    `json:"pid"`
	State      State  `json:"state"`
	Health     string `json:"health,omitempty"` // Probe's: "/readyz 200"
}

// Running reports whether its process exists (frozen counts).
func (r Replica) Running() bool { return r.State != Gone }

// LB is HAProxy.
type LB struct {
	Name string `json:"name"`
	// XDSAddr is HAProxy's xDS address (TCP mode, round robin over the
	// replicas whose /readyz is 200).
	XDSAddr string `json:"xds_addr"`
	// HTTPAddr is HAProxy's address for the replicas' HTTP port.
	HTTPAddr string `json:"http_addr"`
	// StatsSocket is HAProxy's admin socket (LBServers).
	StatsSocket string `json:"stats_socket"`
	Config      string `json:"config"` // the generated haproxy.cfg
	Log         string `json:"log"`
	PID         int    `json:"pid"`
	// OldPIDs are HAProxy processes old reloads left serving their open
	// connections.
	OldPIDs []int  `json:"old_pids,omitempty"`
	State   State  `json:"state"`
	Health  string `json:"health,omitempty"` // Probe's: "/readyz via HAProxy 200"
	// Servers is HAProxy's view of each replica (Probe's): "xds/replica-1"
	// -> "UP".
	Servers map[string]string `json:"servers,omitempty"`
}

// Running reports whether its process exists (frozen counts).
func (l LB) Running() bool { return l.State != Gone }

// Status returns the cluster as it is now.
func (c *Cluster) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Status{Dir: c.cfg.Dir, Net: c.cfg.Net, EtcdEndpoints: c.etcdEndpoints()}
	runInfo := func(p *proc) (int, State) {
		if p.cur == nil {
			return 0, Gone
		}
		return p.cur.pid, p.cur.state()
	}
	for _, p := range c.etcd {
		ip := etcdIP(c.cfg.Net, p.index)
		m := Member{
			Name:       p.name,
			ClientAddr: hostPort(ip, etcdClientPort),
			PeerAddr:   hostPort(ip, etcdPeerPort),
			DataDir:    filepath.Join(c.cfg.Dir, p.name+".data"),
			Log:        p.log,
		}
		m.PID, m.State = runInfo(p)
		st.Etcd = append(st.Etcd, m)
	}
	for _, p := range c.replicas {
		ip := replicaIP(c.cfg.Net, p.index)
		r := Replica{
			Name:       p.name,
			XDSAddr:    hostPort(ip, xdsPort),
			HTTPAddr:   hostPort(ip, httpPort),
			GossipAddr: hostPort(ip, gossipPort),
			Log:        p.log,
		}
		r.PID, r.State = runInfo(p)
		st.Replicas = append(st.Replicas, r)
	}
	if c.lb != nil {
		ip := lbIP(c.cfg.Net)
		lb := &LB{
			Name:        c.lb.name,
			XDSAddr:     hostPort(ip, xdsPort),
			HTTPAddr:    hostPort(ip, httpPort),
			StatsSocket: lbSocket(c.cfg.Dir),
			Config:      c.lbConfigPath(),
			Log:         c.lb.log,
		}
		lb.PID, lb.State = runInfo(c.lb)
		for _, r := range c.oldLB {
			if r.alive() {
				lb.OldPIDs = append(lb.OldPIDs, r.pid)
			}
		}
		st.HAProxy = lb
	}
	return st
}

// Replicas returns Status().Replicas.
func (c *Cluster) Replicas() []Replica { return c.Status().Replicas }

// Etcd returns Status().Etcd.
func (c *Cluster) Etcd() []Member { return c.Status().Etcd }

// Names lists every process's name, etcd members first, then replicas,
// then HAProxy.
func (c *Cluster) Names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	for _, p := range slices.Concat(c.etcd, c.replicas) {
		names = append(names, p.name)
	}
	if c.lb != nil {
		names = append(names, c.lb.name)
	}
	return names
}

// checkSaved fails if Dir's env file describes a cluster that this one's
// etcd data cannot be: another Net or another number of members.
func (c *Cluster) checkSaved() error {
	saved, err := ReadEnv(filepath.Join(c.cfg.Dir, "env"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	var errs []error
	if v := saved["NET"]; v != c.cfg.Net {
		errs = append(errs, fmt.Errorf("the prefix %s, not %s", v, c.cfg.Net))
	}
	if v := saved["ETCD_MEMBERS"]; v != strconv.Itoa(c.cfg.EtcdMembers) {
		errs = append(errs, fmt.Errorf("%s etcd members, not %d", v, c.cfg.EtcdMembers))
	}
	// A secure cluster's etcd has auth enabled: plain replicas cannot
	// use it. (An env file older than SECURE is a plain cluster's.)
	if v := saved["SECURE"]; (v == "true") != c.cfg.Secure && c.cfg.EtcdMembers > 0 {
		secure := map[bool]string{true: "secure", false: "plain"}
		errs = append(errs, fmt.Errorf("a %s cluster's etcd data, not a %s one", secure[v == "true"], secure[c.cfg.Secure]))
	}
	if len(errs) > 0 {
		return fmt.Errorf("localcluster: %s holds a cluster with %w: use another Dir, or remove it", c.cfg.Dir, errors.Join(errs...))
	}
	return nil
}
