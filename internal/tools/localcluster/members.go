package localcluster

import (
	"context"
	"fmt"
)

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
