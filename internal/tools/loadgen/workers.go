package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/rpc"
	"sync"
	"time"

	"github.com/legation-io/legation/internal/replica/quietgc"
	"github.com/legation-io/legation/internal/testkit/fixture"
	"github.com/legation-io/legation/internal/tools/procstat"
)

// A run with Processes above 1 spreads its clients over worker processes
// of the load tool (Config.StartWorker): a process opens as many
// connections as its open files allow (20,000 is a common limit), and a
// fleet of one connection per Envoy needs one per Envoy. The scenario's
// process writes the fixture and the updates, reads the server's metrics
// and drives the workers over net/rpc on each worker's stdin and stdout;
// each worker runs its share of the clients as a run in one process does
// (localSet), and answers for them: every figure of the result covers
// every worker.

// WorkerOpen is what a worker is told to run: the scenario's Config (less
// what does not cross processes: the target, the recorder, the progress
// writer), its share of the streams and connections in Streams and
// Conns, and the number of its first client.
type WorkerOpen struct {
	Config Config
	First  int
}

// WorkerGoal is a goal for a worker's clients and how long to wait for
// it.
type WorkerGoal struct {
	Goal    goalSpec
	Timeout time.Duration
}

// WorkerReceipts asks for the receipts of Version, and answers them: the
// latency from Sent of each client that holds it, and how many do not.
type WorkerReceipts struct {
	Version int64
	Sent    time.Time
	Lat     []float64
	Missing int
}

// WorkerTally is a worker's tally, and its clients' sums.
type WorkerTally struct {
	Tally            tally
	Bytes, Resources int64
}

// worker is the service a worker process serves: its clients.
type worker struct {
	ctx context.Context
	mu  sync.Mutex
	set *localSet // nil before Open
}

// ServeWorker serves the scenario's process on conn (the worker's stdin
// and stdout) until conn ends or ctx does, then ends the worker's clients.
func ServeWorker(ctx context.Context, conn io.ReadWriteCloser) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &worker{ctx: ctx}
	srv := rpc.NewServer()
	if err := srv.RegisterName("Worker", w); err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		conn.Close()
	}()
	srv.ServeConn(conn)
	cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.set != nil {
		w.set.close()
	}
	return nil
}

// Open starts the worker's clients.
func (w *worker) Open(a *WorkerOpen, _ *struct{}) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.set != nil {
		return errors.New("loadgen worker: opened twice")
	}
	cfg := a.Config
	fx := fixture.NewSet(cfg.Clusters, cfg.Endpoints, cfg.Listeners, seedPort)
	set := &localSet{f: newFleet(cfg, fx), first: a.First, between: quietgc.New(quietgc.Config{})}
	if err := set.open(w.ctx); err != nil {
		return err
	}
	w.set = set
	return nil
}

// Start starts the worker's streams.
func (w *worker) Start(_ *struct{}, _ *struct{}) error {
	set, err := w.opened()
	if err != nil {
		return err
	}
	return set.start(w.ctx)
}

// opened is the worker's clients, or an error before Open.
func (w *worker) opened() (*localSet, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.set == nil {
		return nil, errors.New("loadgen worker: not opened")
	}
	return w.set, nil
}

// Reach has the worker's clients reach a goal, and waits for them.
func (w *worker) Reach(a *WorkerGoal, _ *struct{}) error {
	set, err := w.opened()
	if err != nil {
		return err
	}
	return set.reach(w.ctx, a.Goal, a.Timeout)
}

// Receipts answers a.Lat and a.Missing.
func (w *worker) Receipts(a *WorkerReceipts, out *WorkerReceipts) error {
	set, err := w.opened()
	if err != nil {
		return err
	}
	*out = *a
	out.Lat, out.Missing, err = set.receipts(w.ctx, a.Version, a.Sent)
	return err
}

// Tally answers the worker's tally and sums.
func (w *worker) Tally(_ *struct{}, out *WorkerTally) (err error) {
	set, err := w.opened()
	if err != nil {
		return err
	}
	if out.Tally, err = set.tally(w.ctx); err != nil {
		return err
	}
	out.Bytes, out.Resources, err = set.sums(w.ctx)
	return err
}

// processSet is the clients of a run spread over worker processes.
type processSet struct {
	cfg     Config
	workers []*rpc.Client
}

// newProcessSet starts cfg.Processes workers.
func newProcessSet(ctx context.Context, cfg Config) (*processSet, error) {
	p := &processSet{cfg: cfg}
	for i := range cfg.Processes {
		conn, err := cfg.StartWorker(ctx)
		if err != nil {
			p.close()
			return nil, fmt.Errorf("loadgen: start worker %d: %w", i+1, err)
		}
		p.workers = append(p.workers, rpc.NewClient(conn))
	}
	return p, nil
}

// each calls f for every worker at once, and joins their errors, each
// naming its worker.
func (p *processSet) each(f func(i int, w *rpc.Client) error) error {
	errs := make([]error, len(p.workers))
	var wg sync.WaitGroup
	for i, w := range p.workers {
		wg.Go(func() {
			if err := f(i, w); err != nil {
				errs[i] = fmt.Errorf("worker %d: %w", i+1, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// share is worker i's Config: its streams (the first workers one more
// when they do not divide), its connections in proportion, and its part
// of the open rate; first is the number of its first client.
func (p *processSet) share(i int) (cfg Config, first int) {
	cfg, n := p.cfg, len(p.workers)
	cfg.Target, cfg.Recorder, cfg.Progress, cfg.During, cfg.StartWorker = nil, nil, nil, nil, nil
	cfg.Processes = 1
	base, extra := p.cfg.Streams/n, p.cfg.Streams%n
	first = i*base + min(i, extra)
	cfg.Streams = base
	if i < extra {
		cfg.Streams++
	}
	if p.cfg.Conns > 0 {
		cfg.Conns = max(1, min(cfg.Streams, p.cfg.Conns*cfg.Streams/p.cfg.Streams))
	}
	cfg.OpenRate = p.cfg.OpenRate / float64(n)
	return cfg, first
}

func (p *processSet) open(ctx context.Context) error {
	return p.each(func(i int, w *rpc.Client) error {
		cfg, first := p.share(i)
		return call(ctx, w, "Worker.Open", &WorkerOpen{Config: cfg, First: first}, &struct{}{})
	})
}

func (p *processSet) start(ctx context.Context) error {
	return p.each(func(_ int, w *rpc.Client) error {
		return call(ctx, w, "Worker.Start", &struct{}{}, &struct{}{})
	})
}

func (p *processSet) reach(ctx context.Context, g goalSpec, timeout time.Duration) error {
	return p.each(func(_ int, w *rpc.Client) error {
		return call(ctx, w, "Worker.Reach", &WorkerGoal{Goal: g, Timeout: timeout}, &struct{}{})
	})
}

func (p *processSet) sums(ctx context.Context) (bytes, resources int64, err error) {
	t, err := p.tallies(ctx)
	for _, w := range t {
		bytes += w.Bytes
		resources += w.Resources
	}
	return bytes, resources, err
}

func (p *processSet) receipts(ctx context.Context, version int64, sent time.Time) (lat []float64, missing int, err error) {
	out := make([]WorkerReceipts, len(p.workers))
	err = p.each(func(i int, w *rpc.Client) error {
		return call(ctx, w, "Worker.Receipts", &WorkerReceipts{Version: version, Sent: sent}, &out[i])
	})
	for _, r := range out {
		lat = append(lat, r.Lat...)
		missing += r.Missing
	}
	return lat, missing, err
}

func (p *processSet) tallies(ctx context.Context) ([]WorkerTally, error) {
	out := make([]WorkerTally, len(p.workers))
	err := p.each(func(i int, w *rpc.Client) error {
		return call(ctx, w, "Worker.Tally", &struct{}{}, &out[i])
	})
	return out, err
}

// tally adds the workers' tallies, and this process's CPU to theirs.
func (p *processSet) tally(ctx context.Context) (tally, error) {
	ts, err := p.tallies(ctx)
	sum := tally{CPU: procstat.CPU()}
	for _, w := range ts {
		t := w.Tally
		sum.Reached += t.Reached
		sum.Total += t.Total
		sum.StreamErrors += t.StreamErrors
		sum.Reconnects += t.Reconnects
		sum.Nacks += t.Nacks
		sum.Responses += t.Responses
		sum.CPU += t.CPU
		sum.CollectionsBetween += t.CollectionsBetween
		sum.Collections += t.Collections
		for k, v := range t.ErrorKinds {
			if sum.ErrorKinds == nil {
				sum.ErrorKinds = map[string]int{}
			}
			if _, ok := sum.ErrorKinds[k]; ok || len(sum.ErrorKinds) < maxErrorKinds {
				sum.ErrorKinds[k] += v
			}
		}
	}
	return sum, err
}

// close ends the workers: each ends its clients when its stdin closes.
func (p *processSet) close() {
	for _, w := range p.workers {
		w.Close()
	}
}

// call calls method on w, returning early when ctx ends (the call then
// completes unheeded).
func call(ctx context.Context, w *rpc.Client, method string, args, reply any) error {
	c := w.Go(method, args, reply, make(chan *rpc.Call, 1))
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-c.Done:
		return c.Error
	}
}
