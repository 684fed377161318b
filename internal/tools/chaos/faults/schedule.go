package faults

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Kind is a kind of fault.
type Kind string

// The kinds of fault. Each is healed after its Fault.For, as said.
const (
	// KillReplica sends a replica SIGKILL; healed: started again.
	KillReplica Kind = "kill-replica"
	// FreezeReplica sends a replica SIGSTOP; healed: SIGCONT.
	FreezeReplica Kind = "freeze-replica"
	// RestartReplica stops a replica gracefully (SIGTERM: it drains and
	// leaves the ring); healed: started again. One step of a rolling
	// restart.
	RestartReplica Kind = "restart-replica"
	// KillEtcd sends an etcd member SIGKILL; healed: started again.
	KillEtcd Kind = "kill-etcd"
	// FreezeEtcd sends an etcd member SIGSTOP; healed: SIGCONT.
	FreezeEtcd Kind = "freeze-etcd"
	// DelayEtcd delays a replica's etcd connections by Fault.Delay plus
	// up to Fault.Jitter per chunk; healed: pass.
	DelayEtcd Kind = "delay-etcd"
	// DropEtcd closes a replica's etcd connections and refuses new
	// ones; healed: pass.
	DropEtcd Kind = "drop-etcd"
	// BlackholeEtcd stalls a replica's etcd connections, both ways;
	// healed: pass.
	BlackholeEtcd Kind = "blackhole-etcd"
	// PartitionGossip drops gossip between replicas Target and Peer;
	// healed: let through.
	PartitionGossip Kind = "partition-gossip"
	// CompactEtcd compacts etcd to its current revision. Nothing to
	// heal (For is 0).
	CompactEtcd Kind = "compact-etcd"
	// AddReplica adds a replica, called NewName; healed: removed.
	AddReplica Kind = "add-replica"
	// RemoveReplica removes replica Target; healed: a replica called
	// NewName is added in its place.
	RemoveReplica Kind = "remove-replica"
)

// Kinds lists every kind, in the order Schedule draws from.
var Kinds = []Kind{KillReplica, FreezeReplica, RestartReplica, KillEtcd, FreezeEtcd,
	DelayEtcd, DropEtcd, BlackholeEtcd, PartitionGossip, CompactEtcd, AddReplica, RemoveReplica}

// Fault is one fault of a schedule.
type Fault struct {
	// At is when it is applied, from the start of the run.
	At   time.Duration
	Kind Kind
	// Target is the process it is applied to (replica-I, etcd-I); empty
	// for CompactEtcd and AddReplica.
	Target string
	// Peer is PartitionGossip's other replica.
	Peer string
	// NewName is the replica AddReplica adds, or that takes a removed
	// one's place when RemoveReplica heals.
	NewName string
	// For is how long until it is healed; 0 for CompactEtcd.
	For time.Duration
	// Delay and Jitter are DelayEtcd's.
	Delay, Jitter time.Duration
}

func (f Fault) String() string {
	s := fmt.Sprintf("+%s %s", f.At.Round(time.Millisecond), f.Kind)
	if f.Target != "" {
		s += " " + f.Target
	}
	if f.Peer != "" {
		s += " <-/-> " + f.Peer
	}
	if f.NewName != "" {
		s += " new " + f.NewName
	}
	if f.Kind == DelayEtcd {
		s += fmt.Sprintf(" delay %s±%s", f.Delay, f.Jitter)
	}
	if f.For > 0 {
		s += " for " + f.For.Round(time.Millisecond).String()
	}
	return s
}

// End is when the fault is healed.
func (f Fault) End() time.Duration { return f.At + f.For }

// Shape is the cluster a schedule is for, as localcluster names it.
type Shape struct {
	// EtcdMembers is how many etcd members (etcd-1 up).
	EtcdMembers int
	// Replicas is how many replicas the cluster starts with (replica-1
	// up); added ones get the next numbers.
	Replicas int
	// NamePrefix is localcluster's Config.NamePrefix.
	NamePrefix string
	// Kinds, if set, are the only kinds drawn. Empty: all of Kinds.
	Kinds []Kind
}

// Validate checks the shape.
func (s Shape) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if s.EtcdMembers < 1 {
		add("EtcdMembers %d: want 1 or more", s.EtcdMembers)
	}
	if s.Replicas < 1 {
		add("Replicas %d: want 1 or more", s.Replicas)
	}
	for _, k := range s.Kinds {
		if !slices.Contains(Kinds, k) {
			add("Kinds: no kind %q", k)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("faults: shape: %w", errors.Join(errs...))
	}
	return nil
}

func (s Shape) etcd(i int) string    { return fmt.Sprintf("%setcd-%d", s.NamePrefix, i) }
func (s Shape) replica(i int) string { return fmt.Sprintf("%sreplica-%d", s.NamePrefix, i) }

// Schedule returns the faults of a run of the given duration on a
// cluster of shape s: one drawn every `every` (at a random moment within
// each period), each healed after one to three periods, all healed by
// the end. It keeps, at every moment:
//
//   - at most one etcd member down (killed or frozen), and none with a
//     single member: quorum holds;
//   - at least one replica no fault touches (so never all replicas down),
//     and at most one fault on any process at once;
//   - no fault on a replica that is not there (removed, or not yet
//     added).
//
// A kind that would break these is not drawn (a slot may stay empty). It
// is a pure function: the same arguments give the same schedule.
func Schedule(seed uint64, duration, every time.Duration, s Shape) ([]Fault, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if every <= 0 || duration < every {
		return nil, fmt.Errorf("faults: every %s, duration %s: want 0 < every <= duration", every, duration)
	}
	kinds := s.Kinds
	if len(kinds) == 0 {
		kinds = Kinds
	}
	rng := rand.New(rand.NewPCG(seed, 0x6c65676174696f6e)) // "legation"
	st := newPlan(s)
	var out []Fault
	for slot := time.Duration(0); slot+every <= duration; slot += every {
		at := slot + time.Duration(rng.Int64N(int64(every)/2+1))
		st.advance(at)
		maxFor := min(3*every, duration-at)
		if maxFor < every/2 {
			continue
		}
		dur := every/2 + time.Duration(rng.Int64N(int64(maxFor-every/2)+1))
		// Draw kinds in a random order until one fits.
		for _, i := range rng.Perm(len(kinds)) {
			f, ok := st.fault(rng, kinds[i], at, dur)
			if ok {
				st.apply(f)
				out = append(out, f)
				break
			}
		}
	}
	return out, nil
}

// plan is the cluster as a schedule leaves it at a moment.
type plan struct {
	s     Shape
	now   time.Duration
	etcd  []string
	reps  []string // replicas there now, in order of their numbers
	next  int      // the number of the next replica added
	busy  map[string]time.Duration
	downE int // etcd members down now
	// pending are changes to reps at a heal: (when, name, add?).
	pending []change
	active  []Fault
}

type change struct {
	at   time.Duration
	name string
	add  bool
}

func newPlan(s Shape) *plan {
	p := &plan{s: s, next: s.Replicas + 1, busy: map[string]time.Duration{}}
	for i := 1; i <= s.EtcdMembers; i++ {
		p.etcd = append(p.etcd, s.etcd(i))
	}
	for i := 1; i <= s.Replicas; i++ {
		p.reps = append(p.reps, s.replica(i))
	}
	return p
}

// advance moves to t: faults healed by then free their targets.
func (p *plan) advance(t time.Duration) {
	p.now = t
	p.active = slices.DeleteFunc(p.active, func(f Fault) bool {
		if f.End() > t {
			return false
		}
		if f.Kind == KillEtcd || f.Kind == FreezeEtcd {
			p.downE--
		}
		return true
	})
	p.pending = slices.DeleteFunc(p.pending, func(c change) bool {
		if c.at > t {
			return false
		}
		if c.add {
			p.reps = append(p.reps, c.name)
		} else {
			p.reps = slices.DeleteFunc(p.reps, func(n string) bool { return n == c.name })
		}
		return true
	})
	for n, end := range p.busy {
		if end <= t {
			delete(p.busy, n)
		}
	}
}

// free are the replicas there now that no fault touches.
func (p *plan) free() []string {
	var out []string
	for _, n := range p.reps {
		if _, ok := p.busy[n]; !ok {
			out = append(out, n)
		}
	}
	return out
}

// fault draws a fault of kind k at `at` lasting dur, if one fits.
func (p *plan) fault(rng *rand.Rand, k Kind, at, dur time.Duration) (Fault, bool) {
	f := Fault{At: at, Kind: k, For: dur}
	free := p.free()
	pick := func(ns []string) string { return ns[rng.IntN(len(ns))] }
	switch k {
	case KillReplica, FreezeReplica, RestartReplica, DropEtcd, BlackholeEtcd, DelayEtcd:
		// One replica stays untouched.
		if len(free) < 2 {
			return f, false
		}
		f.Target = pick(free)
		if k == DelayEtcd {
			f.Delay = time.Duration(50+rng.IntN(451)) * time.Millisecond
			f.Jitter = time.Duration(rng.IntN(101)) * time.Millisecond
		}
	case PartitionGossip:
		if len(free) < 3 {
			return f, false
		}
		i := rng.IntN(len(free))
		j := (i + 1 + rng.IntN(len(free)-1)) % len(free)
		f.Target, f.Peer = free[i], free[j]
	case RemoveReplica:
		if len(free) < 2 {
			return f, false
		}
		f.Target = pick(free)
		f.NewName = p.s.replica(p.next)
	case AddReplica:
		f.NewName = p.s.replica(p.next)
	case KillEtcd, FreezeEtcd:
		// A quorum of a cluster of n stays up with one down if n >= 3.
		if p.downE > 0 || len(p.etcd) < 3 {
			return f, false
		}
		var up []string
		for _, n := range p.etcd {
			if _, ok := p.busy[n]; !ok {
				up = append(up, n)
			}
		}
		f.Target = pick(up)
	case CompactEtcd:
		f.For = 0
	default:
		return f, false
	}
	return f, true
}

// apply records f as active.
func (p *plan) apply(f Fault) {
	end := f.End()
	for _, n := range []string{f.Target, f.Peer} {
		if n != "" {
			p.busy[n] = end
		}
	}
	switch f.Kind {
	case KillEtcd, FreezeEtcd:
		p.downE++
	case AddReplica:
		p.next++
		// There from now, busy (not a target) until removed at the end.
		p.reps = append(p.reps, f.NewName)
		p.busy[f.NewName] = end
		p.pending = append(p.pending, change{at: end, name: f.NewName})
	case RemoveReplica:
		p.next++
		p.pending = append(p.pending, change{at: end, name: f.Target}, change{at: end, name: f.NewName, add: true})
	}
	if f.For > 0 {
		p.active = append(p.active, f)
	}
}

// step is a moment of a schedule: sched[i] applied, or healed, at at.
type step struct {
	at   time.Duration
	i    int
	heal bool
}

// steps are sched's applications and heals in time order; at one moment
// heals come first (a target healed is free for the next fault).
func steps(sched []Fault) []step {
	var out []step
	for i, f := range sched {
		out = append(out, step{f.At, i, false})
		if f.For > 0 {
			out = append(out, step{f.End(), i, true})
		}
	}
	slices.SortStableFunc(out, func(a, b step) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		if a.heal != b.heal {
			if a.heal {
				return -1
			}
			return 1
		}
		return 0
	})
	return out
}

// Check replays sched on shape s and reports each moment it breaks
// Schedule's promises: more than one etcd member down, no replica left
// untouched, two faults on one process at once, a fault on a replica not
// there, a fault not healed by the end.
func Check(sched []Fault, duration time.Duration, s Shape) error {
	r := &replay{shape: s, there: map[string]bool{}, touched: map[string]int{}}
	for i := 1; i <= s.Replicas; i++ {
		r.there[s.replica(i)] = true
	}
	for _, f := range sched {
		if f.End() > duration {
			r.errs = append(r.errs, fmt.Errorf("%s: healed after the end (%s)", f, duration))
		}
	}
	for _, e := range steps(sched) {
		if e.heal {
			r.heal(sched[e.i])
		} else {
			r.apply(sched[e.i])
		}
	}
	return errors.Join(r.errs...)
}

// replay is Check's model of the cluster at a moment of the schedule.
type replay struct {
	shape    Shape
	there    map[string]bool // the replicas there
	touched  map[string]int  // by process: the faults on it
	etcdDown int             // etcd members killed or frozen
	errs     []error
}

// heal replays the heal of f.
func (r *replay) heal(f Fault) {
	for _, n := range []string{f.Target, f.Peer} {
		if n != "" {
			r.touched[n]--
		}
	}
	switch f.Kind {
	case KillEtcd, FreezeEtcd:
		r.etcdDown--
	case AddReplica:
		delete(r.there, f.NewName)
		r.touched[f.NewName]--
	case RemoveReplica:
		delete(r.there, f.Target)
		r.there[f.NewName] = true
	}
}

// apply replays the application of f and checks the promises it may
// break.
func (r *replay) apply(f Fault) {
	for _, n := range []string{f.Target, f.Peer} {
		if n == "" {
			continue
		}
		if r.touched[n] > 0 {
			r.errs = append(r.errs, fmt.Errorf("%s: %s already has a fault", f, n))
		}
		if f.Kind != KillEtcd && f.Kind != FreezeEtcd && !r.there[n] {
			r.errs = append(r.errs, fmt.Errorf("%s: no replica %s then", f, n))
		}
		if f.For > 0 {
			r.touched[n]++
		}
	}
	switch f.Kind {
	case KillEtcd, FreezeEtcd:
		r.etcdDown++
		if r.etcdDown > 1 || r.shape.EtcdMembers < 3 {
			r.errs = append(r.errs, fmt.Errorf("%s: %d etcd members down of %d", f, r.etcdDown, r.shape.EtcdMembers))
		}
	case AddReplica:
		r.there[f.NewName] = true
		r.touched[f.NewName]++
	}
	free := 0
	for n := range r.there {
		if r.touched[n] == 0 {
			free++
		}
	}
	if free == 0 {
		r.errs = append(r.errs, fmt.Errorf("%s: no replica left untouched", f))
	}
}
