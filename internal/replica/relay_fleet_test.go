package replica_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/legation-io/legation/internal/state/resource"
)

// fleetClientEnv, set, makes the test binary the Envoys of
// BenchmarkRelayedEnvoys (fleetClients).
const fleetClientEnv = "LEGATION_RELAY_FLEET_CLIENT"

// fleetTimeout bounds the clients' opening of their streams and each
// push's ACKs: past it they give up, and the benchmark fails.
const fleetTimeout = 2 * time.Minute

// fleetSpec is what the Envoys are: the first line of the clients'
// stdin, in JSON.
type fleetSpec struct {
	Addr string   `json:"addr"` // where they connect
	IDs  []string `json:"ids"`  // their node ids, one Envoy each
	EDS  []string `json:"eds"`  // the endpoint sets each subscribes to, as many as the clusters
}

// fleetClients is the clients' process of BenchmarkRelayedEnvoys: it
// reads a fleetSpec and opens its Envoys, each an ADS stream on a
// connection of its own that receives every cluster and then the
// endpoint sets it names, and ACKs every response. It says "open" once
// every Envoy has ACKed both; then, for each line "wait REV", "acked"
// once every Envoy has ACKed endpoints at revision REV or later, or
// "failed: why". It returns when stdin closes.
func fleetClients() int {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(nil, 16<<20)
	var spec fleetSpec
	if !in.Scan() {
		fmt.Fprintln(os.Stderr, "fleet: no spec on stdin")
		return 2
	}
	if err := json.Unmarshal(in.Bytes(), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "fleet: spec:", err)
		return 2
	}
	f, err := openFleet(spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		return 1
	}
	fmt.Println("open")
	for in.Scan() {
		var rev int64
		if _, err := fmt.Sscanf(in.Text(), "wait %d", &rev); err != nil {
			fmt.Fprintf(os.Stderr, "fleet: %q: %v\n", in.Text(), err)
			return 2
		}
		fmt.Println(f.wait(rev))
	}
	return 0
}

// fleetEnvoys are the open Envoys of the clients' process.
type fleetEnvoys struct {
	all  []*fleetEnvoy
	mu   sync.Mutex
	err  error // the first stream that failed
	spec fleetSpec
}

// fleetEnvoy is one Envoy's stream. Its goroutine (follow) ACKs every
// response after the first two and is its only sender then.
type fleetEnvoy struct {
	st  grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]
	eds atomic.Int64 // the version of the endpoint sets last ACKed
}

// openFleet opens spec's Envoys, a few at a time, and returns once each
// has ACKed the clusters and the endpoint sets, or the first error.
func openFleet(spec fleetSpec) (*fleetEnvoys, error) {
	f := &fleetEnvoys{all: make([]*fleetEnvoy, len(spec.IDs)), spec: spec}
	ctx, cancel := context.WithTimeout(context.Background(), fleetTimeout)
	defer cancel()
	next := make(chan int)
	errs := make(chan error, len(spec.IDs))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range next {
				e, err := f.open(ctx, spec.IDs[i])
				if err != nil {
					errs <- fmt.Errorf("Envoy %s: %w", spec.IDs[i], err)
					continue
				}
				f.all[i] = e
			}
		})
	}
	for i := range spec.IDs {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	return f, <-errs // nil once closed and empty
}

// open opens one Envoy's stream as node id: CDS first, then EDS once
// the clusters are in, as Envoy does, each ACKed.
func (f *fleetEnvoys) open(ctx context.Context, id string) (*fleetEnvoy, error) {
	cc, err := grpc.NewClient(f.spec.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	// The stream outlives ctx, which bounds the opening only.
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(context.Background())
	if err != nil {
		return nil, err
	}
	e := &fleetEnvoy{st: st}
	stop := context.AfterFunc(ctx, func() { cc.Close() }) // a stuck opening
	defer stop()
	if err := st.Send(cdsRequest(id)); err != nil {
		return nil, err
	}
	if err := f.expect(e, resource.Cluster); err != nil {
		return nil, err
	}
	if err := st.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNames: f.spec.EDS}); err != nil {
		return nil, err
	}
	if err := f.expect(e, resource.Endpoint); err != nil {
		return nil, err
	}
	go f.follow(e)
	return e, nil
}

// expect receives e's next response, checks that it is of typ and holds
// a resource per endpoint set named (a cluster each, or a set each), and
// ACKs it.
func (f *fleetEnvoys) expect(e *fleetEnvoy, typ *resource.Type) error {
	r, err := e.st.Recv()
	if err != nil {
		return err
	}
	if r.GetTypeUrl() != typ.URL || len(r.GetResources()) != len(f.spec.EDS) {
		return fmt.Errorf("got %d resources of %s, want %d of %s", len(r.GetResources()), r.GetTypeUrl(), len(f.spec.EDS), typ.URL)
	}
	return f.ack(e, r)
}

// ack ACKs r, naming the endpoint sets again in an EDS ACK (a SotW
// request that names none unsubscribes them all).
func (f *fleetEnvoys) ack(e *fleetEnvoy, r *discoveryv3.DiscoveryResponse) error {
	req := ackOf(r)
	eds := r.GetTypeUrl() == resource.Endpoint.URL
	if eds {
		req.ResourceNames = f.spec.EDS
	}
	if err := e.st.Send(req); err != nil {
		return err
	}
	if eds {
		v, err := strconv.ParseInt(r.GetVersionInfo(), 10, 64)
		if err != nil {
			return fmt.Errorf("endpoints at version %q: %w", r.GetVersionInfo(), err)
		}
		e.eds.Store(v)
	}
	return nil
}

// follow ACKs e's responses until its stream fails.
func (f *fleetEnvoys) follow(e *fleetEnvoy) {
	for {
		r, err := e.st.Recv()
		if err == nil {
			err = f.ack(e, r)
		}
		if err != nil {
			f.mu.Lock()
			if f.err == nil {
				f.err = err
			}
			f.mu.Unlock()
			return
		}
	}
}

// wait returns "acked" once every Envoy has ACKed endpoints at rev or
// later, or "failed: why" if a stream failed or fleetTimeout passed.
func (f *fleetEnvoys) wait(rev int64) string {
	deadline := time.Now().Add(fleetTimeout)
	for ; ; time.Sleep(time.Millisecond) {
		f.mu.Lock()
		err := f.err
		f.mu.Unlock()
		if err != nil {
			return "failed: " + err.Error()
		}
		behind := 0
		for _, e := range f.all {
			if e.eds.Load() < rev {
				behind++
			}
		}
		if behind == 0 {
			return "acked"
		}
		if time.Now().After(deadline) {
			return fmt.Sprintf("failed: %d of %d Envoys ACKed no endpoints at revision %d in %s", behind, len(f.all), rev, fleetTimeout)
		}
	}
}
