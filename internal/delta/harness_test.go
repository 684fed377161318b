package delta_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/legation-io/legation/internal/ads"
	"github.com/legation-io/legation/internal/delta"
	"github.com/legation-io/legation/internal/resource"
	"github.com/legation-io/legation/internal/store"
	"github.com/legation-io/legation/internal/store/storetest"
)

const (
	defaultTestTimeout      = 20 * time.Second
	defaultTestShortTimeout = 300 * time.Millisecond
)

// env is a real embedded etcd, a real view, and the delta server behind
// the ADS service on a real gRPC server on 127.0.0.1.
type env struct {
	client *clientv3.Client
	store  *store.Store
	view   *store.View
	srv    *delta.Server
	reg    *prometheus.Registry
	addr   string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	etcd := storetest.Start(t, storetest.Options{})
	e := &env{client: etcd.Client(t), reg: prometheus.NewRegistry()}
	var err error
	if e.store, err = store.New(store.Config{Client: e.client}); err != nil {
		t.Fatal(err)
	}
	if e.view, err = store.NewView(store.ViewConfig{Client: e.client}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.view.Run(ctx) }() //nolint:errcheck // nil on cancel
	t.Cleanup(func() { cancel(); wg.Wait() })
	select {
	case <-e.view.Ready():
	case <-time.After(defaultTestTimeout):
		t.Fatal("view not ready")
	}
	if e.srv, err = delta.New(delta.Config{Source: e.view, Registerer: e.reg, CatchupTimeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	sotw, err := ads.New(ads.Config{Source: e.view, Delta: e.srv})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(ads.ServerOptions()...)
	sotw.Register(g)
	go g.Serve(lis) //nolint:errcheck // ends with Stop
	t.Cleanup(g.Stop)
	e.addr = lis.Addr().String()
	return e
}

func (e *env) apply(t *testing.T, puts []store.Put, deletes ...store.Key) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	plan, err := e.store.MakePlan(ctx, store.PlanRequest{Puts: puts, Deletes: deletes})
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	res, err := e.store.Apply(ctx, plan, store.ApplyOptions{})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if _, err := e.view.WaitRevision(ctx, res.Revision); err != nil {
		t.Fatal(err)
	}
	return res.Revision
}

func put(t testing.TB, typ *resource.Type, scope string, m proto.Message) store.Put {
	t.Helper()
	body, err := resource.Marshal(typ, m)
	if err != nil {
		t.Fatal(err)
	}
	return store.Put{Key: store.Key{Type: typ, Scope: scope, Name: typ.NameOf(m)}, Body: body}
}

func key(typ *resource.Type, name string) store.Key {
	return store.Key{Type: typ, Scope: store.DefaultScope, Name: name}
}

func cluster(name string, ms int64) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ConnectTimeout:       durationpb.New(time.Duration(ms) * time.Millisecond),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
	}
}

// deltaStream is a raw delta ADS stream.
type deltaStream struct {
	t      *testing.T
	stream grpc.BidiStreamingClient[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]
	recv   chan deltaResult
}

type deltaResult struct {
	resp *discoveryv3.DeltaDiscoveryResponse
	err  error
}

func (e *env) deltaADS(t *testing.T) *deltaStream {
	t.Helper()
	cc, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d := &deltaStream{t: t, stream: s, recv: make(chan deltaResult, 100)}
	go func() {
		for {
			r, err := s.Recv()
			d.recv <- deltaResult{r, err}
			if err != nil {
				return
			}
		}
	}()
	return d
}

func (d *deltaStream) send(r *discoveryv3.DeltaDiscoveryRequest) {
	d.t.Helper()
	if err := d.stream.Send(r); err != nil {
		d.t.Fatalf("send: %v", err)
	}
}

func (d *deltaStream) expect() *discoveryv3.DeltaDiscoveryResponse {
	d.t.Helper()
	select {
	case r := <-d.recv:
		if r.err != nil {
			d.t.Fatalf("stream ended: %v", r.err)
		}
		return r.resp
	case <-time.After(defaultTestTimeout):
		d.t.Fatal("no response")
		return nil
	}
}

func (d *deltaStream) expectNone() {
	d.t.Helper()
	select {
	case r := <-d.recv:
		if r.err != nil {
			d.t.Fatalf("stream ended: %v", r.err)
		}
		d.t.Fatalf("unexpected response: %v", r.resp)
	case <-time.After(defaultTestShortTimeout):
	}
}

func (d *deltaStream) expectErr() error {
	d.t.Helper()
	for {
		select {
		case r := <-d.recv:
			if r.err != nil {
				return r.err
			}
		case <-time.After(defaultTestTimeout):
			d.t.Fatal("stream did not end")
			return nil
		}
	}
}

// ack acknowledges resp.
func (d *deltaStream) ack(resp *discoveryv3.DeltaDiscoveryResponse) {
	d.t.Helper()
	d.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()})
}

// versions maps the names of resp's resources to their versions.
func versions(resp *discoveryv3.DeltaDiscoveryResponse) map[string]string {
	out := map[string]string{}
	for _, r := range resp.GetResources() {
		out[r.GetName()] = r.GetVersion()
	}
	return out
}
