package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/tools/chaos/runner"
)

// TestSeedList: --seeds counts from --first-seed; --seed-list wins and
// names a bad seed.
func TestSeedList(t *testing.T) {
	got, err := (&options{seeds: 3, firstSeed: 7}).seedList()
	if err != nil || !slices.Equal(got, []uint64{7, 8, 9}) {
		t.Errorf("seeds 3 from 7: %v, %v", got, err)
	}
	got, err = (&options{seeds: 3, only: "348, 2"}).seedList()
	if err != nil || !slices.Equal(got, []uint64{348, 2}) {
		t.Errorf("--seed-list 348,2: %v, %v", got, err)
	}
	if _, err := (&options{only: "348,x"}).seedList(); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("--seed-list 348,x: %v", err)
	}
	if _, err := (&options{seeds: 1 << 30}).seedList(); err == nil || !strings.Contains(err.Error(), "--seeds 1073741824: want 1 to 100000") {
		t.Errorf("--seeds 1073741824: %v", err)
	}
	if _, err := parseKinds("kill-replica,nope"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("--kinds with nope: %v", err)
	}
}

// TestEffectsTable: counts add up over seeds, lags are the worst seed's,
// one row a class in order.
func TestEffectsTable(t *testing.T) {
	total := map[string]runner.Effect{}
	addEffects(total, map[string]runner.Effect{"kill-replica": {Faults: 1, Seconds: 2, StreamEnds: 10, Applies: 3, LagP99: time.Second, LagMax: 2 * time.Second}})
	addEffects(total, map[string]runner.Effect{"kill-replica": {Faults: 2, Seconds: 3, StreamEnds: 5, Applies: 4, LagP99: 3 * time.Second, LagMax: time.Second},
		runner.NoFault: {Applies: 9, LagP99: 10 * time.Millisecond, LagMax: 20 * time.Millisecond}})
	if k := total["kill-replica"]; k.Faults != 3 || k.Seconds != 5 || k.StreamEnds != 15 || k.Applies != 7 || k.LagP99 != 3*time.Second || k.LagMax != 2*time.Second {
		t.Errorf("kill-replica total %+v", k)
	}
	var b bytes.Buffer
	writeEffects(&b, total)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "kill-replica") || !strings.Contains(lines[2], "none") || !strings.Contains(lines[1], "3s") {
		t.Errorf("table:\n%s", b.String())
	}
}
