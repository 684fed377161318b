package loadgen

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/legation-io/legation/internal/replica/quietgc"
	"github.com/legation-io/legation/internal/tools/procstat"
)

// clientSet is the simulated Envoys of a run, as the scenario drives
// them: in this process (localSet), or spread over processes of their own
// (processSet), so that a fleet larger than one process's open files can
// be simulated.
type clientSet interface {
	// open dials the connections and makes the clients.
	open(ctx context.Context) error
	// start starts the streams, at OpenRate; they run until ctx ends.
	start(ctx context.Context) error
	// reach has every client reach g and waits up to timeout for it.
	reach(ctx context.Context, g goalSpec, timeout time.Duration) error
	// sums is the bytes and resources the clients have received.
	sums(ctx context.Context) (bytes, resources int64, err error)
	// receipts is, for each client that holds version, how long after
	// sent it first did (seconds), and how many do not hold it.
	receipts(ctx context.Context, version int64, sent time.Time) (lat []float64, missing int, err error)
	// tally is the clients' counts and the CPU of the processes they run
	// in.
	tally(ctx context.Context) (tally, error)
	// close ends the streams and closes the connections.
	close()
}

// goalSpec is a goal as the scenario sets it.
type goalSpec struct {
	Idx, Version         int64
	NeedHeld, NeedRoutes int32
}

// tally is what the clients counted, and the CPU and collections of the
// processes they run in.
type tally struct {
	Reached, Total                             int64
	StreamErrors, Reconnects, Nacks, Responses int64
	ErrorKinds                                 map[string]int
	CPU                                        time.Duration
	// CollectionsBetween is the collections run between two updates by
	// processes of their own (processSet); Collections those the Go
	// runtime started on its own there.
	CollectionsBetween, Collections int
}

// localSet is the clients of a fleet in this process.
type localSet struct {
	f *fleet
	// first numbers the clients from first (their node ids), and is the
	// index of the first connection in the spread over XDSAddr.
	first int
	conns []*grpc.ClientConn
	wg    sync.WaitGroup
	// between collects garbage between updates, once every client has
	// the last, in a worker process (nil in the scenario's: it collects
	// between updates itself); collected counts those collections.
	between   *quietgc.Collector
	collected atomic.Int64
}

func (l *localSet) open(context.Context) error {
	cfg := l.f.cfg
	conns, err := dial(cfg, l.first)
	if err != nil {
		return err
	}
	l.conns = conns
	for i := range cfg.Streams {
		l.f.clients = append(l.f.clients, newClient(l.f, l.first+i, conns[i%len(conns)]))
	}
	return nil
}

func (l *localSet) start(ctx context.Context) error {
	cfg := l.f.cfg
	start := time.Now()
	for i, c := range l.f.clients {
		if cfg.OpenRate > 0 {
			at := start.Add(time.Duration(float64(i) / cfg.OpenRate * float64(time.Second)))
			if err := sleep(ctx, time.Until(at)); err != nil {
				return err
			}
		}
		l.wg.Go(func() { c.run(ctx) })
	}
	return nil
}

func (l *localSet) reach(ctx context.Context, g goalSpec, timeout time.Duration) error {
	l.f.setGoal(&goal{idx: g.Idx, version: g.Version, needHeld: g.NeedHeld, needRoutes: g.NeedRoutes})
	if err := l.f.wait(ctx, timeout); err != nil {
		return err
	}
	if l.between != nil && g.Idx > 0 && l.between.CollectIfDue() {
		l.collected.Add(1)
	}
	return nil
}

func (l *localSet) sums(context.Context) (bytes, resources int64, err error) {
	bytes, resources = l.f.sums()
	return bytes, resources, nil
}

func (l *localSet) receipts(_ context.Context, version int64, sent time.Time) ([]float64, int, error) {
	lat := make([]float64, 0, len(l.f.clients))
	missing := 0
	for _, c := range l.f.clients {
		at, ok := c.firstAt(version)
		if !ok {
			missing++
			continue
		}
		lat = append(lat, max(0, at.Sub(sent).Seconds()))
	}
	return lat, missing, nil
}

func (l *localSet) tally(context.Context) (tally, error) {
	f := l.f
	t := tally{
		Reached: f.reached(), Total: int64(len(f.clients)),
		StreamErrors: f.streamErrors.Load(), Reconnects: f.reconnects.Load(), Nacks: f.nacks.Load(), Responses: f.responses.Load(),
		ErrorKinds: f.errorKinds(), CPU: procstat.CPU(),
	}
	if l.between != nil {
		t.CollectionsBetween, t.Collections = int(l.collected.Load()), int(automaticGCs())
	}
	return t, nil
}

// close ends the clients (their context is the caller's, ended first)
// and closes the connections.
func (l *localSet) close() {
	l.wg.Wait()
	closeConns(l.conns)
}

// progress writes a progress line every ProgressEvery, from set's tally,
// until the returned func is called.
func progress(cfg Config, set clientSet, phase func() string) func() {
	if cfg.Progress == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() {
		t := time.NewTicker(cfg.ProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			n, err := set.tally(ctx)
			if err != nil {
				continue
			}
			fmt.Fprintf(cfg.Progress, "xds-loadgen: %5.0fs %-14s %d/%d clients there, %d responses, %d NACKs, %d stream errors\n",
				time.Since(start).Seconds(), phase(), n.Reached, n.Total, n.Responses, n.Nacks, n.StreamErrors)
		}
	})
	return func() { cancel(); wg.Wait() }
}
