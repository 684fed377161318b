package localcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
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
		c.log = slog.New(slog.DiscardHandler)
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
