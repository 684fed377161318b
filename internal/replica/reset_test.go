package replica_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// versionLog follows a SotW stream, ACKing every response, and records
// each version and the connect timeout of cluster "a" it was sent.
type versionLog struct {
	mu         sync.Mutex
	versions   []int64
	connect    []int64 // ms, -1: no cluster a
	err        error   // how the stream ended, nil while open
	reconnects int
}

// reconnect follows s, a new stream of the client, if its last one was
// closed UNAVAILABLE (a rebalance: its node's home moved while replicas
// were not ready), as Envoy reconnects; it reports whether it did.
func (l *versionLog) reconnect(open func() *xdstest.SotWStream, stop <-chan struct{}, wg *sync.WaitGroup) bool {
	l.mu.Lock()
	closed := status.Code(l.err) == codes.Unavailable
	if closed {
		l.err = nil
		l.reconnects++
	}
	l.mu.Unlock()
	if closed {
		l.follow(open(), stop, wg)
	}
	return closed
}

func (l *versionLog) follow(s *xdstest.SotWStream, stop <-chan struct{}, wg *sync.WaitGroup) {
	wg.Go(func() {
		for {
			select {
			case r := <-s.Recv():
				l.mu.Lock()
				if r.Err != nil {
					l.err = r.Err
					l.mu.Unlock()
					return
				}
				v, _ := strconv.ParseInt(r.Resp.GetVersionInfo(), 10, 64)
				ms := int64(-1)
				for _, a := range r.Resp.GetResources() {
					var c clusterv3.Cluster
					if a.UnmarshalTo(&c) == nil && c.GetName() == "a" {
						ms = c.GetConnectTimeout().AsDuration().Milliseconds()
					}
				}
				l.versions = append(l.versions, v)
				l.connect = append(l.connect, ms)
				l.mu.Unlock()
				s.Ack(r.Resp)
			case <-stop:
				return
			}
		}
	})
}

func (l *versionLog) last() (version, connect int64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.versions) == 0 {
		return 0, 0, l.err
	}
	return l.versions[len(l.versions)-1], l.connect[len(l.connect)-1], l.err
}

// TestRevisionResetCluster restores the etcd of a cluster of three
// replicas from an older copy of its data, bumping its revision and
// marking it compacted as `etcdutl snapshot restore --bump-revision
// --mark-compacted` does: with no restart the replicas are ready again
// within 30s, serving the older data, and no client is sent a version
// lower than one it was sent before.
func TestRevisionResetCluster(t *testing.T) {
	checkLeaks(t)
	const prefix = "/reset-test/"
	etcd := storetest.StartRestartable(t)
	client := etcd.Client(t)
	s, err := store.New(store.Config{Client: client, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	apply := func(ms int64) int64 {
		t.Helper()
		ctx := t.Context()
		plan, err := s.MakePlan(ctx, store.PlanRequest{Puts: []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", ms))}})
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Apply(ctx, plan, store.ApplyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return res.Revision
	}
	apply(100)
	etcd.Save(t, "old") // the snapshot: a at 100ms

	var rs []*running
	for _, name := range []string{"r0", "r1", "r2"} {
		cfg := testConfig(t)
		cfg.Name = name
		cfg.EtcdEndpoints = []string{etcd.Endpoint}
		cfg.EtcdPrefix = prefix
		rs = append(rs, start(t, cfg))
	}
	for _, r := range rs {
		waitReady(t, r)
		xdstest.WaitFor(t, "a ring of three replicas", func() (bool, string) {
			c := getDebugCluster(t, r)
			return len(c.Ring) == 3, fmt.Sprint(c.Ring)
		})
	}
	var rev int64
	for i := range 20 {
		rev = apply(200 + int64(i))
	}

	logs := make([]*versionLog, 6)
	opens := make([]func() *xdstest.SotWStream, len(logs))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	for i := range logs {
		r := rs[i%len(rs)]
		waitRevision(t, r, rev)
		opens[i] = func() *xdstest.SotWStream {
			st := xdstest.OpenSotW(t, dial(t, r))
			st.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node(fmt.Sprintf("n%d", i), "c1"), TypeUrl: resource.Cluster.URL})
			return st
		}
		logs[i] = &versionLog{}
		logs[i].follow(opens[i](), stop, &wg)
	}
	for i, l := range logs {
		xdstest.WaitFor(t, "the clients at the last version", func() (bool, string) {
			v, ms, err := l.last()
			return v == rev && ms == 219, fmt.Sprintf("client %d: version %d, a at %dms, err %v", i, v, ms, err)
		})
	}

	restored := time.Now()
	etcd.Restore(t, "old", 1000)
	for _, r := range rs {
		xdstest.WaitFor(t, "every replica ready again, serving the restored data", func() (bool, string) {
			code, body := get(t, r, "/readyz")
			_, dv := getDebugView(t, r)
			return code == http.StatusOK && dv.Revision > rev, fmt.Sprintf("/readyz %d %s, view at %d", code, strings.TrimSpace(body), dv.Revision)
		})
	}
	if took := time.Since(restored); took > 30*time.Second {
		t.Errorf("replicas ready again %s after the restore, want within 30s", took)
	}
	t.Logf("replicas ready again %s after the restore", time.Since(restored).Round(time.Millisecond))
	for i, l := range logs {
		xdstest.WaitFor(t, "the clients sent the restored data", func() (bool, string) {
			if l.reconnect(opens[i], stop, &wg) {
				return false, fmt.Sprintf("client %d: reconnected", i)
			}
			v, ms, err := l.last()
			return v > rev && ms == 100, fmt.Sprintf("client %d: version %d, a at %dms, err %v", i, v, ms, err)
		})
	}
	for i, l := range logs {
		l.mu.Lock()
		for k := 1; k < len(l.versions); k++ {
			if l.versions[k] < l.versions[k-1] {
				t.Errorf("client %d: version %d after %d", i, l.versions[k], l.versions[k-1])
			}
		}
		if l.err != nil {
			t.Errorf("client %d: stream ended: %v", i, l.err)
		}
		l.mu.Unlock()
	}
}

// TestRevisionResetHeld restores etcd from an older copy of its data
// without bumping its revision: the replica reports not ready, naming the
// reset, keeps serving its last view, and is ready again, with no
// restart, once etcd's revision passes its view's.
func TestRevisionResetHeld(t *testing.T) {
	checkLeaks(t)
	const prefix = "/reset-test/"
	etcd := storetest.StartRestartable(t)
	client := etcd.Client(t)
	rev := putCluster(t, client, prefix, "a")
	etcd.Save(t, "old")
	for _, name := range []string{"b", "c"} {
		rev = putCluster(t, client, prefix, name)
	}
	cfg := testConfig(t)
	cfg.EtcdEndpoints = []string{etcd.Endpoint}
	cfg.EtcdPrefix = prefix
	cfg.Standalone = true
	r := startXDS(t, cfg, rev)

	etcd.Restore(t, "old", 0)
	want := fmt.Sprintf("etcd revision reset: etcd at %d < view at %d", rev-2, rev)
	xdstest.WaitFor(t, "/readyz 503 naming the reset", func() (bool, string) {
		code, body := get(t, r, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, want), body
	})
	if _, dv := getDebugView(t, r); dv.Revision != rev || dv.Resources != 3 {
		t.Errorf("while etcd is behind: view at %d with %d resources, want its last, %d with 3", dv.Revision, dv.Resources, rev)
	}
	var now int64
	for now <= rev {
		resp, err := client.Put(t.Context(), "/elsewhere", "x")
		if err != nil {
			t.Fatal(err)
		}
		now = resp.Header.Revision
	}
	waitReady(t, r)
	// The snapshot's one cluster, at a revision past the view's.
	if dv := waitClusters(t, r, now, 1); dv.Revision < now {
		t.Errorf("view at %d, want %d", dv.Revision, now)
	}
}
