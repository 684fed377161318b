//go:build unix

package sotw_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/sotw"
)

// everySnapshot is the view without interests: every stream advances on
// every snapshot, as all did before streams kept an interest.
type everySnapshot struct{ *view.View }

func (everySnapshot) Interest(string, any) *view.Interest { return nil }

// BenchmarkIdleCPU measures what idle streams cost (docs/concepts/design.md:
// "10,000 connected streams, no change: at most 5 ms of server CPU per
// second"): N SotW ADS streams subscribed to the fan-out's 200
// assignments and ACKed, then, for 2 s a run, no resource changes while
// etcd's revision moves 20 times a second (the cluster's own writes:
// status, membership) and the view follows it (progress notifications,
// about one a second when its watch is quiet). wake=interest is the
// server as built (a stream wakes only for a change it can see);
// wake=every-snapshot is the same with streams advancing on every
// snapshot, as before. streams=0 is the floor: the embedded etcd taking
// the writes and the view following it, which a replica does not pay
// for its etcd.
//
// cpu-ms/s is the process's CPU per second of the window (server, the
// idle clients and the embedded etcd taking the writes); stream-wakes/s
// the times a stream was woken, per second; snapshots/s the view's
// snapshots (revision-only advances).
func BenchmarkIdleCPU(b *testing.B) {
	for _, n := range []int{0, 1000, 10000} {
		for _, every := range []bool{false, true} {
			if n == 0 && every {
				continue // no stream to wake: the same as wake=interest
			}
			mode := "interest"
			if every {
				mode = "every-snapshot"
			}
			b.Run(fmt.Sprintf("streams=%d/wake=%s", n, mode), func(b *testing.B) {
				var opts []envOption
				if every {
					opts = append(opts, func(c *sotw.Config) { c.Source = everySnapshot{c.Source.(*view.View)} })
				}
				e := newEnv(b, opts...)
				f := &fanout{e: e, n: n, names: fanoutSeed(b, e)}
				if n > 0 {
					f.open(b)
					defer f.close(b)
				}
				client := e.Etcd.Client(b)
				const window = 2 * time.Second
				var cpu time.Duration
				var wakes, snaps float64
				b.ResetTimer()
				for range b.N {
					w0 := xdstest.CounterSum(b, e.reg, "legation_view_stream_wakes_total") + xdstest.CounterSum(b, e.reg, "legation_view_stream_catchups_total")
					s0 := xdstest.CounterSum(b, e.reg, "legation_view_snapshots_total")
					m0 := xdstest.MarkNow()
					ctx, cancel := context.WithTimeout(context.Background(), window)
					for k := 0; ctx.Err() == nil; k++ {
						if _, err := client.Put(ctx, "/legation/status/bench", fmt.Sprint(k)); err != nil && ctx.Err() == nil {
							b.Fatal(err)
						}
						select {
						case <-ctx.Done():
						case <-time.After(50 * time.Millisecond):
						}
					}
					cancel()
					m1 := xdstest.MarkNow()
					cpu += m1.CPU - m0.CPU
					s := xdstest.CounterSum(b, e.reg, "legation_view_snapshots_total") - s0
					snaps += s
					if every {
						wakes += s * float64(n)
					} else {
						wakes += xdstest.CounterSum(b, e.reg, "legation_view_stream_wakes_total") + xdstest.CounterSum(b, e.reg, "legation_view_stream_catchups_total") - w0
					}
				}
				secs := float64(b.N) * window.Seconds()
				b.ReportMetric(float64(cpu.Microseconds())/1000/secs, "cpu-ms/s")
				b.ReportMetric(wakes/secs, "stream-wakes/s")
				b.ReportMetric(snaps/secs, "snapshots/s")
			})
		}
	}
}
