package awake_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/legation-io/legation/internal/state/awake"
	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// run runs c until the test ends.
func run(t *testing.T, c *awake.Clock) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { c.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// TestFreeze stops the test process itself for a second: the Clock
// counts it as starvation, Since leaves it out, and a Timer started
// before it waits for its whole duration of awake time.
func TestFreeze(t *testing.T) {
	reg := prometheus.NewRegistry()
	c, err := awake.New(awake.Config{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	time.Sleep(300 * time.Millisecond) // the clock's first looks

	start := time.Now()
	fired := make(chan time.Time, 1)
	tm := c.AfterFunc(1500*time.Millisecond, func() { fired <- time.Now() })
	defer tm.Stop()
	testbase.Freeze(t, time.Second)
	wall := time.Since(start)
	if got := c.Since(start); got > wall-700*time.Millisecond {
		t.Errorf("Since(before a 1s freeze) = %s of %s wall time, want the freeze left out", got, wall)
	}
	if !c.Starved(5 * time.Second) {
		t.Error("Starved(5s) = false just after a freeze")
	}
	if n := xdstest.CounterSum(t, reg, "legation_awake_starvations_total"); n < 1 {
		t.Errorf("legation_awake_starvations_total = %v after a freeze, want >= 1", n)
	}
	at := <-fired
	if took := at.Sub(start); took < 2*time.Second {
		t.Errorf("a 1.5s awake timer fired %s after its start, across a 1s freeze: it counted the freeze", took)
	}
}

// TestTimerStop: a stopped Timer never calls its func.
func TestTimerStop(t *testing.T) {
	c, err := awake.New(awake.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tm := c.AfterFunc(20*time.Millisecond, func() { t.Error("a stopped timer fired") })
	if !tm.Stop() {
		t.Error("Stop of a pending timer = false")
	}
	if tm.Stop() {
		t.Error("a second Stop = true")
	}
	time.Sleep(50 * time.Millisecond)
}

// TestSaturated: a process whose CPUs are taken by many busy goroutines
// runs its timers on time, but a goroutine woken by the network waits
// its turn: the Clock counts that wait as starvation.
func TestSaturated(t *testing.T) {
	c, err := awake.New(awake.Config{Tick: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	time.Sleep(200 * time.Millisecond)
	if c.Starved(time.Minute) {
		t.Fatal("Starved before any load")
	}

	// Each CPU shared by 30 goroutines that never block: a runnable
	// goroutine waits about 29 of the scheduler's 10ms slices.
	start := time.Now()
	stop := start.Add(1500 * time.Millisecond)
	var busy sync.WaitGroup
	for range 30 * runtime.GOMAXPROCS(0) {
		busy.Go(func() {
			for x := 0; time.Now().Before(stop); x++ {
				_ = x * x
			}
		})
	}
	busy.Wait()
	wall := time.Since(start)
	if !c.Starved(time.Minute) {
		t.Error("Starved = false after 1.5s of saturated CPUs")
	}
	if got := c.Since(start); got > wall-200*time.Millisecond {
		t.Errorf("Since(the load's start) = %s of %s wall time: the queueing was not left out", got, wall)
	}
}
