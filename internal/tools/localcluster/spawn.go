package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

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
		// History and space as docs/operations/etcd.md's cluster example keeps them
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
