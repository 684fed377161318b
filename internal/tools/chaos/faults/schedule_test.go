package faults

import (
	"slices"
	"strings"
	"testing"
	"time"
)

var shape = Shape{EtcdMembers: 3, Replicas: 3}

func TestScheduleDeterministic(t *testing.T) {
	a, err := Schedule(42, 5*time.Minute, 3*time.Second, shape)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Schedule(42, 5*time.Minute, 3*time.Second, shape)
	if !slices.Equal(a, b) {
		t.Fatal("seed 42 gave two schedules")
	}
	c, _ := Schedule(43, 5*time.Minute, 3*time.Second, shape)
	if slices.Equal(a, c) {
		t.Fatal("seeds 42 and 43 gave the same schedule")
	}
	if len(a) < 50 {
		t.Errorf("5 minutes at one fault every 3s: %d faults", len(a))
	}
}

func TestScheduleConstraintsHold(t *testing.T) {
	shapes := []Shape{shape, {EtcdMembers: 1, Replicas: 2}, {EtcdMembers: 5, Replicas: 5, NamePrefix: "a-"}}
	seen := map[Kind]int{}
	for _, s := range shapes {
		for seed := uint64(0); seed < 300; seed++ {
			sched, err := Schedule(seed, 2*time.Minute, 2*time.Second, s)
			if err != nil {
				t.Fatal(err)
			}
			if err := Check(sched, 2*time.Minute, s); err != nil {
				t.Fatalf("shape %+v seed %d: %v\n%s", s, seed, err, dump(sched))
			}
			for i, f := range sched {
				seen[f.Kind]++
				if i > 0 && f.At < sched[i-1].At {
					t.Fatalf("seed %d: not in order of At: %s after %s", seed, f, sched[i-1])
				}
			}
		}
	}
	for _, k := range Kinds {
		if seen[k] == 0 {
			t.Errorf("no %s in 900 schedules", k)
		}
	}
}

func TestScheduleKinds(t *testing.T) {
	s := shape
	s.Kinds = []Kind{CompactEtcd, DelayEtcd}
	sched, err := Schedule(1, time.Minute, time.Second, s)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range sched {
		if f.Kind != CompactEtcd && f.Kind != DelayEtcd {
			t.Fatalf("a %s with Kinds %v", f, s.Kinds)
		}
		if f.Kind == DelayEtcd && (f.Delay < 50*time.Millisecond || f.Delay > 500*time.Millisecond) {
			t.Errorf("%s: delay out of 50ms..500ms", f)
		}
	}
	// One etcd member: etcd is never taken down.
	sched, _ = Schedule(7, time.Minute, time.Second, Shape{EtcdMembers: 1, Replicas: 3, Kinds: []Kind{KillEtcd, FreezeEtcd}})
	if len(sched) != 0 {
		t.Errorf("etcd faults with one member: %s", dump(sched))
	}
}

func TestScheduleBadInput(t *testing.T) {
	for name, tc := range map[string]struct {
		every, dur time.Duration
		s          Shape
		want       string
	}{
		"every 0":        {0, time.Minute, shape, "every 0s"},
		"short":          {time.Minute, time.Second, shape, "every 1m0s, duration 1s"},
		"no etcd":        {time.Second, time.Minute, Shape{Replicas: 1}, "EtcdMembers 0"},
		"no replicas":    {time.Second, time.Minute, Shape{EtcdMembers: 1}, "Replicas 0"},
		"an unknown one": {time.Second, time.Minute, Shape{EtcdMembers: 1, Replicas: 1, Kinds: []Kind{"nap"}}, `no kind "nap"`},
	} {
		if _, err := Schedule(1, tc.dur, tc.every, tc.s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

// TestCheckCatches gives Check schedules that break each promise.
func TestCheckCatches(t *testing.T) {
	s := time.Second
	for name, tc := range map[string]struct {
		sched []Fault
		want  string
	}{
		"two etcd down": {[]Fault{{At: 0, Kind: KillEtcd, Target: "etcd-1", For: 5 * s}, {At: s, Kind: FreezeEtcd, Target: "etcd-2", For: s}}, "2 etcd members down"},
		"all replicas":  {[]Fault{{At: 0, Kind: KillReplica, Target: "replica-1", For: 5 * s}, {At: 0, Kind: DropEtcd, Target: "replica-2", For: 5 * s}, {At: s, Kind: FreezeReplica, Target: "replica-3", For: s}}, "no replica left untouched"},
		"twice":         {[]Fault{{At: 0, Kind: KillReplica, Target: "replica-1", For: 5 * s}, {At: s, Kind: DelayEtcd, Target: "replica-1", For: s}}, "already has a fault"},
		"removed":       {[]Fault{{At: 0, Kind: RemoveReplica, Target: "replica-1", NewName: "replica-4", For: s}, {At: 2 * s, Kind: KillReplica, Target: "replica-1", For: s}}, "no replica replica-1"},
		"past the end":  {[]Fault{{At: 50 * s, Kind: KillReplica, Target: "replica-1", For: 20 * s}}, "healed after the end"},
	} {
		if err := Check(tc.sched, time.Minute, shape); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

func dump(sched []Fault) string {
	var b strings.Builder
	for _, f := range sched {
		b.WriteString(f.String() + "\n")
	}
	return b.String()
}
