package localcluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/legation-io/legation/internal/admin/adminctl"
	"github.com/legation-io/legation/internal/tools/localcluster"
)

const (
	cdsURL = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	// testTimeout bounds what must happen.
	testTimeout = 20 * time.Second
)

// TestCluster runs the whole deployment of deploy/local: 3 etcd members,
// 3 xds-node replicas and HAProxy, as processes. A cluster applied to etcd
// reaches a SotW ADS client through HAProxy at the apply's revision; with
// the replica that served it killed (kill -9), new streams through HAProxy
// are served by the others; with an etcd member stopped, an apply still
// succeeds and reaches every stream.
func TestCluster(t *testing.T) {
	start := time.Now()
	cfg := localcluster.DefaultConfig()
	// Killed or stopped, a replica's streams end at once.
	cfg.XDSNodeFlags = []string{"--shutdown-timeout", "2s", "--drain-period", "1s"}
	c := localcluster.StartForTest(t, cfg)
	if len(c.EtcdEndpoints) != 3 || len(c.Replicas()) != 3 {
		t.Fatalf("got %d etcd endpoints and %d replicas, want 3 and 3", len(c.EtcdEndpoints), len(c.Replicas()))
	}

	rev1 := apply(t, c.EtcdEndpoints, clusterYAML("c1", "1s"))
	first := dialADS(t, c.LBAddr, "n1")
	got := first.waitCluster(t, "c1", time.Second, rev1)
	t.Logf("n1 got cluster c1 at version %d through HAProxy (the apply made revision %d)", got, rev1)

	// Kill the replica that serves n1: the streams opened next through
	// HAProxy are served by the two others, three of them so that round
	// robin gives each some.
	victim := servingReplica(t, c, "n1")
	step := time.Now()
	c.KillReplica(victim)
	t.Logf("killed %s (kill -9), which served n1; HAProxy marked it down in %s",
		c.Replicas()[victim].Name, time.Since(step).Round(time.Millisecond))
	first.close()
	// Streams opened before the survivors agree on the ring could be
	// moved by the rebalance that follows: wait for it.
	c.WaitRing()
	var streams []*adsClient
	for _, id := range []string{"n1", "n2", "n3"} {
		s := dialADS(t, c.LBAddr, id)
		s.waitCluster(t, "c1", time.Second, rev1)
		streams = append(streams, s)
	}

	// One etcd member down of three: applies still succeed, and every
	// replica's view follows.
	step = time.Now()
	c.StopEtcd(0)
	if c.Etcd()[0].Running() {
		t.Fatalf("%s still runs after StopEtcd", c.Etcd()[0].Name)
	}
	t.Logf("stopped %s in %s", c.Etcd()[0].Name, time.Since(step).Round(time.Millisecond))
	step = time.Now()
	rev2 := apply(t, c.EtcdEndpoints, clusterYAML("c1", "2s"))
	for _, s := range streams {
		s.waitCluster(t, "c1", 2*time.Second, rev2)
	}
	t.Logf("applied revision %d with %s down; every stream got it in %s", rev2, c.Etcd()[0].Name, time.Since(step).Round(time.Millisecond))
	step = time.Now()
	c.StartEtcd(0)
	t.Logf("restarted %s in %s", c.Etcd()[0].Name, time.Since(step).Round(time.Millisecond))
	t.Logf("whole test body in %s", time.Since(start).Round(time.Millisecond))
}

// apply runs `xdsadmin -o json apply -f -` in-process against the
// etcd at endpoints and returns the revision it made.
func apply(t *testing.T, endpoints []string, doc string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var out, errOut bytes.Buffer
	args := []string{"--etcd-endpoints", strings.Join(endpoints, ","), "-o", "json", "apply", "-f", "-"}
	if code := adminctl.Run(ctx, args, strings.NewReader(doc), &out, &errOut); code != 0 {
		t.Fatalf("xdsadmin apply: exit %d\nstdout:\n%s\nstderr:\n%s", code, &out, &errOut)
	}
	var res struct {
		Revision int64 `json:"revision"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.Revision <= 0 {
		t.Fatalf("xdsadmin apply -o json: no revision (%v) in:\n%s", err, &out)
	}
	return res.Revision
}

func clusterYAML(name, connectTimeout string) string {
	return fmt.Sprintf(`"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
name: %s
type: STATIC
connect_timeout: %s
`, name, connectTimeout)
}

// adsClient is a raw SotW ADS stream asking for every cluster (wildcard
// CDS) and ACKing each response.
type adsClient struct {
	id     string
	cc     *grpc.ClientConn
	stream grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]
	cancel context.CancelFunc
	msgs   chan *discoveryv3.DiscoveryResponse // closed when the stream ends
	done   chan struct{}                       // closed when the receive goroutine has returned
}

func dialADS(t *testing.T, addr, id string) *adsClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient %s: %v", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &adsClient{id: id, cc: cc, cancel: cancel, msgs: make(chan *discoveryv3.DiscoveryResponse, 16), done: make(chan struct{})}
	t.Cleanup(c.close)
	c.stream, err = discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		close(c.done)
		t.Fatalf("%s: ADS stream through %s: %v", id, addr, err)
	}
	go func() {
		defer close(c.done)
		defer close(c.msgs)
		for {
			resp, err := c.stream.Recv()
			if err != nil {
				return
			}
			c.msgs <- resp
		}
	}()
	c.send(t, &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: id}, TypeUrl: cdsURL})
	return c
}

func (c *adsClient) send(t *testing.T, req *discoveryv3.DiscoveryRequest) {
	t.Helper()
	if err := c.stream.Send(req); err != nil {
		t.Fatalf("%s: send: %v", c.id, err)
	}
}

// waitCluster ACKs responses until one at version minVersion or later
// holds cluster name with connect_timeout want, and returns its version.
func (c *adsClient) waitCluster(t *testing.T, name string, want time.Duration, minVersion int64) int64 {
	t.Helper()
	deadline := time.After(testTimeout)
	last := "no response"
	for {
		select {
		case resp, ok := <-c.msgs:
			if !ok {
				t.Fatalf("%s: stream ended waiting for cluster %s (connect_timeout %s) at version >= %d; last: %s",
					c.id, name, want, minVersion, last)
			}
			c.send(t, &discoveryv3.DiscoveryRequest{TypeUrl: cdsURL, VersionInfo: resp.VersionInfo, ResponseNonce: resp.Nonce})
			v, err := strconv.ParseInt(resp.VersionInfo, 10, 64)
			if err != nil {
				t.Fatalf("%s: version_info %q: not a revision: %v", c.id, resp.VersionInfo, err)
			}
			last = fmt.Sprintf("version %d:", v)
			found := false
			for _, a := range resp.Resources {
				var cl clusterv3.Cluster
				if err := a.UnmarshalTo(&cl); err != nil {
					t.Fatalf("%s: resource of type %s: %v", c.id, a.TypeUrl, err)
				}
				last += fmt.Sprintf(" %s(connect_timeout %s)", cl.Name, cl.GetConnectTimeout().AsDuration())
				found = found || cl.Name == name && cl.GetConnectTimeout().AsDuration() == want
			}
			if found && v >= minVersion {
				return v
			}
		case <-deadline:
			t.Fatalf("%s: no cluster %s (connect_timeout %s) at version >= %d after %s; last: %s",
				c.id, name, want, minVersion, testTimeout, last)
		}
	}
}

// close ends the stream and waits for its receive goroutine.
func (c *adsClient) close() {
	c.cancel()
	<-c.done
	c.cc.Close()
}

// servingReplica returns the index of the replica whose /debug/streams
// shows a stream of node id.
func servingReplica(t *testing.T, c *localcluster.TestCluster, id string) int {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		for i, r := range c.Replicas() {
			if streamsOf(t, r.HTTPAddr)[id] {
				return i
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no replica's /debug/streams shows node %s after %s", id, testTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// streamsOf returns the node ids of the SotW streams /debug/streams shows
// on the replica at addr.
func streamsOf(t *testing.T, addr string) map[string]bool {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/debug/streams")
	if err != nil {
		t.Fatalf("GET %s/debug/streams: %v", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s/debug/streams: %d %v %s", addr, resp.StatusCode, err, body)
	}
	var got struct {
		Streams []struct {
			NodeID string `json:"node_id"`
		} `json:"streams"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("%s/debug/streams: %v\n%s", addr, err, body)
	}
	ids := map[string]bool{}
	for _, s := range got.Streams {
		ids[s.NodeID] = true
	}
	return ids
}
