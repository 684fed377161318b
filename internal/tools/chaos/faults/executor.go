package faults

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/legation-io/legation/internal/tools/faultnet"
	"github.com/legation-io/legation/internal/tools/localcluster"
)

// Executor applies schedules to a cluster started with
// localcluster.Config.EtcdProxies and GossipProxies (the etcd and
// partition faults need them). Its methods may be called concurrently;
// Run and Heal take turns.
type Executor struct {
	c   *localcluster.Cluster
	log *slog.Logger

	mu sync.Mutex // held by Run's steps and Heal; guards the fields below
	// active are the faults applied and not healed, by their index in the
	// schedule.
	active map[int]Fault
	// names maps a schedule's NewName to the name the cluster gave the
	// replica it added: the cluster numbers replicas in the order they
	// are added, which a schedule cannot know once adds overlap.
	names   map[string]string
	applied int
	healed  int
	// logs is every fault applied, when, and when healed (zero: not yet).
	logs []Applied
	// logIndex maps a schedule index to its entry in logs.
	logIndex map[int]int
}

// Applied is a fault applied, and when it was applied and healed (zero
// if it is not healed yet; a CompactEtcd is healed as applied).
type Applied struct {
	Fault
	AppliedAt, HealedAt time.Time
}

// Log returns every fault applied so far, in the order applied.
func (e *Executor) Log() []Applied {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.logs)
}

// NewExecutor returns an Executor of c, logging a line per fault applied
// and healed to logger (nil: discard).
func NewExecutor(c *localcluster.Cluster, logger *slog.Logger) *Executor {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Executor{c: c, log: logger, active: map[int]Fault{}, names: map[string]string{}, logIndex: map[int]int{}}
}

// Stats are what an Executor did so far.
type Stats struct {
	Applied int // faults applied
	Healed  int // faults healed (by their schedule or Heal)
	Active  int // applied and not healed
}

// Stats returns what the Executor did so far. It waits for a step in
// progress (a process starting, say) to end.
func (e *Executor) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return Stats{Applied: e.applied, Healed: e.healed, Active: len(e.active)}
}

// Run applies sched from now: each fault at its At, healed at its End.
// A step waits for the one before (killing or starting a process takes a
// while), so a step may be late; it is never skipped. A fault that fails
// to apply is logged and left out; Run goes on and returns every such
// error joined. When ctx ends it returns ctx's error at once, leaving
// what is applied for Heal.
func (e *Executor) Run(ctx context.Context, sched []Fault) error {
	start := time.Now()
	var errs []error
	for _, s := range steps(sched) {
		if d := time.Until(start.Add(s.at)); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		e.mu.Lock()
		if s.heal {
			if f, ok := e.active[s.i]; ok {
				if err := e.healLocked(ctx, s.i, f); err != nil {
					errs = append(errs, err)
				}
			}
		} else if err := e.applyLocked(ctx, s.i, sched[s.i]); err != nil {
			errs = append(errs, err)
		}
		e.mu.Unlock()
	}
	return errors.Join(errs...)
}

// name is the cluster's name of a schedule's replica.
func (e *Executor) name(n string) string {
	if real, ok := e.names[n]; ok {
		return real
	}
	return n
}

func (e *Executor) applyLocked(ctx context.Context, i int, f Fault) error {
	target, peer := e.name(f.Target), e.name(f.Peer)
	var err error
	switch f.Kind {
	case KillReplica, KillEtcd:
		err = e.c.Kill(ctx, target)
	case FreezeReplica, FreezeEtcd:
		err = e.c.Freeze(target)
	case RestartReplica:
		err = e.c.Stop(ctx, target)
	case DelayEtcd, DropEtcd, BlackholeEtcd:
		err = e.setEtcd(target, etcdFault(f))
	case PartitionGossip:
		err = e.c.Partition(target, peer)
	case CompactEtcd:
		var rev int64
		if rev, err = e.c.CompactEtcd(ctx); err == nil {
			e.log.Info("fault", "fault", f.String(), "revision", rev)
			e.applied++
			now := time.Now()
			e.logs = append(e.logs, Applied{Fault: f, AppliedAt: now, HealedAt: now})
			return nil
		}
	case AddReplica:
		var r localcluster.Replica
		if r, err = e.c.AddReplica(ctx); err == nil {
			e.names[f.NewName] = r.Name
		}
	case RemoveReplica:
		err = e.c.RemoveReplica(ctx, target)
	default:
		err = fmt.Errorf("no such kind")
	}
	if err != nil {
		err = fmt.Errorf("faults: apply %s: %w", f, err)
		e.log.Warn("fault not applied", "fault", f.String(), "err", err)
		return err
	}
	e.applied++
	if f.For > 0 {
		e.active[i] = f
	}
	e.logIndex[i] = len(e.logs)
	e.logs = append(e.logs, Applied{Fault: f, AppliedAt: time.Now()})
	e.log.Info("fault", "fault", f.String(), "target", target)
	return nil
}

func etcdFault(f Fault) faultnet.Fault {
	switch f.Kind {
	case DelayEtcd:
		return faultnet.Fault{Mode: faultnet.Delay, Delay: f.Delay, Jitter: f.Jitter}
	case DropEtcd:
		return faultnet.Fault{Mode: faultnet.Drop}
	case BlackholeEtcd:
		return faultnet.Fault{Mode: faultnet.Blackhole}
	}
	return faultnet.Fault{Mode: faultnet.Pass}
}

func (e *Executor) setEtcd(name string, f faultnet.Fault) error {
	g, err := e.c.EtcdProxies(name)
	if err != nil {
		return err
	}
	g.Set(f)
	return nil
}

// healLocked undoes f, applied as sched[i].
func (e *Executor) healLocked(ctx context.Context, i int, f Fault) error {
	target, peer := e.name(f.Target), e.name(f.Peer)
	var err error
	switch f.Kind {
	case KillReplica, KillEtcd, RestartReplica:
		err = e.c.Start(ctx, target)
	case FreezeReplica, FreezeEtcd:
		err = e.c.Thaw(target)
	case DelayEtcd, DropEtcd, BlackholeEtcd:
		err = e.setEtcd(target, faultnet.Fault{Mode: faultnet.Pass})
	case PartitionGossip:
		err = e.c.Unpartition(target, peer)
	case AddReplica:
		err = e.c.RemoveReplica(ctx, e.name(f.NewName))
	case RemoveReplica:
		var r localcluster.Replica
		if r, err = e.c.AddReplica(ctx); err == nil {
			e.names[f.NewName] = r.Name
		}
	}
	if err != nil {
		err = fmt.Errorf("faults: heal %s: %w", f, err)
		e.log.Warn("fault not healed", "fault", f.String(), "err", err)
		return err
	}
	delete(e.active, i)
	if j, ok := e.logIndex[i]; ok {
		e.logs[j].HealedAt = time.Now()
	}
	e.healed++
	e.log.Info("healed", "fault", f.String(), "target", target)
	return nil
}

// Heal undoes every fault still applied, latest first, then makes sure of
// the rest whatever the schedule did: every proxy passes, no gossip is
// blocked, no process is frozen, and every process runs (localcluster's
// Up, which waits until each is healthy). It returns every error met,
// joined; the cluster is healthy when it returns nil.
func (e *Executor) Heal(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	idx := slices.Sorted(maps.Keys(e.active))
	for _, i := range slices.Backward(idx) {
		if err := e.healLocked(ctx, i, e.active[i]); err != nil {
			errs = append(errs, err)
		}
	}
	st := e.c.Status()
	for _, r := range st.Replicas {
		if g, err := e.c.EtcdProxies(r.Name); err == nil {
			g.Set(faultnet.Fault{Mode: faultnet.Pass})
		}
		if gp, err := e.c.GossipProxy(r.Name); err == nil {
			gp.Heal()
		}
	}
	for _, m := range st.Etcd {
		if m.State == localcluster.Frozen {
			errs = append(errs, e.c.Thaw(m.Name))
		}
	}
	for _, r := range st.Replicas {
		if r.State == localcluster.Frozen {
			errs = append(errs, e.c.Thaw(r.Name))
		}
	}
	if err := e.c.Up(ctx); err != nil {
		errs = append(errs, fmt.Errorf("faults: heal: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	e.log.Info("healed everything", "applied", e.applied, "healed", e.healed)
	return nil
}
