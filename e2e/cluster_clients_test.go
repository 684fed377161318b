package e2e

// The load clients of the cluster tests (cluster_test.go) and of
// BenchmarkFailover: raw SotW and delta ADS clients that play Envoy by hand
// and record every response they get, grpc-go xDS clients that keep
// sending RPCs, and the replicas' own account of who serves whom
// (/debug/streams, /debug/cluster).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/legation-io/legation/internal/admin/adminctl"
	"github.com/legation-io/legation/internal/cluster/relay"
	"github.com/legation-io/legation/internal/cluster/shard"
	nodestatus "github.com/legation-io/legation/internal/cluster/status"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/tools/localcluster"
)

const (
	ldsURL = "type.googleapis.com/envoy.config.listener.v3.Listener"

	// clusterTimeout bounds what must happen in a cluster test: hundreds
	// of clients on race-built replicas sharing two cores with etcd,
	// HAProxy and the test itself.
	clusterTimeout = 60 * time.Second

	// Reconnection backoff of the raw clients after a stream ends:
	// jittered, doubling while streams keep failing, from base to max.
	reconnectBase = 100 * time.Millisecond
	reconnectMax  = 2 * time.Second

	// rpcInterval paces each grpc-go client's RPCs.
	rpcInterval = 200 * time.Millisecond
)

// clientMix is how many clients of each kind a test runs.
type clientMix struct {
	GRPC  int // grpc-go xDS clients routing RPCs to a backend
	SotW  int // raw SotW ADS clients: wildcard CDS and LDS, named EDS
	Delta int // raw delta ADS clients: wildcard CDS and LDS, EDS subscribed by name
}

func (m clientMix) total() int { return m.GRPC + m.SotW + m.Delta }

func (m clientMix) String() string {
	return fmt.Sprintf("%d clients (%d grpc-go, %d raw SotW, %d raw delta)", m.total(), m.GRPC, m.SotW, m.Delta)
}

// The fleet's resources. The grpc-go chain for xds:///svc (listener svc,
// route svc-route, cluster and endpoints svc-cluster, helpers_test.go),
// fillCount filler clusters with their endpoints, and a pair: clusters
// pair-a and pair-b, their endpoint sets and listener pair-l, whose bodies
// encode a generation G (connect_timeout G seconds, endpoint port
// pairPortBase+G, listener port pairListenerBase+G). One apply moves the
// whole pair to the next generation in one etcd transaction: a client
// that ever holds pair-a and pair-b at different generations saw half of
// an apply.
const (
	pairA            = "pair-a"
	pairB            = "pair-b"
	pairListener     = "pair-l"
	pairPortBase     = 20000
	pairListenerBase = 30000
	fillCount        = 8
)

// fleetTypes are the types the raw clients follow, in the order they ask
// for them (/debug/streams names them so).
var fleetTypes = []struct{ name, url string }{
	{"cluster", cdsURL},
	{"listener", ldsURL},
	{"endpoint", edsURL},
}

// fleetEDSNames are the endpoint sets the raw clients ask for: one per
// cluster.
func fleetEDSNames() []string {
	names := []string{clusterName, pairA, pairB}
	for i := range fillCount {
		names = append(names, fmt.Sprintf("fill-%d", i))
	}
	return names
}

// fleetCounts is how many resources of each type a synced raw client
// holds.
func fleetCounts() map[string]int {
	n := len(fleetEDSNames())
	return map[string]int{"cluster": n, "listener": 2, "endpoint": n}
}

// fleetYAML is everything the fleet follows, the pair at generation gen
// and svc-cluster's endpoint on backendPort: one apply.
func fleetYAML(backendPort, gen int) string {
	docs := []string{allYAML(backendPort)}
	for i := range fillCount {
		name := fmt.Sprintf("fill-%d", i)
		docs = append(docs, deltaClusterYAML(name, "1s"), deltaEndpointsYAML(name, 40000+i))
	}
	docs = append(docs, pairYAML(gen))
	return strings.Join(docs, "---\n")
}

// pairYAML moves the pair to generation gen: two clusters, two endpoint
// sets and a listener, in one apply.
func pairYAML(gen int) string {
	return strings.Join([]string{
		deltaClusterYAML(pairA, fmt.Sprintf("%ds", gen)),
		deltaClusterYAML(pairB, fmt.Sprintf("%ds", gen)),
		deltaEndpointsYAML(pairA, pairPortBase+gen),
		deltaEndpointsYAML(pairB, pairPortBase+gen),
		fmt.Sprintf(`"@type": type.googleapis.com/envoy.config.listener.v3.Listener
name: %s
address:
  socket_address:
    address: 127.0.0.1
    port_value: %d
`, pairListener, pairListenerBase+gen),
	}, "---\n")
}

// resourceGen decodes a resource body: its name, and the pair generation
// it encodes (0 for a resource outside the pair).
func resourceGen(typeURL string, body *anypb.Any) (string, int, error) {
	switch typeURL {
	case cdsURL:
		var c clusterv3.Cluster
		if err := body.UnmarshalTo(&c); err != nil {
			return "", 0, err
		}
		if c.Name == pairA || c.Name == pairB {
			return c.Name, int(c.GetConnectTimeout().AsDuration() / time.Second), nil
		}
		return c.Name, 0, nil
	case edsURL:
		var e endpointv3.ClusterLoadAssignment
		if err := body.UnmarshalTo(&e); err != nil {
			return "", 0, err
		}
		if e.ClusterName == pairA || e.ClusterName == pairB {
			for _, l := range e.GetEndpoints() {
				for _, ep := range l.GetLbEndpoints() {
					return e.ClusterName, int(ep.GetEndpoint().GetAddress().GetSocketAddress().GetPortValue()) - pairPortBase, nil
				}
			}
		}
		return e.ClusterName, 0, nil
	case ldsURL:
		var l listenerv3.Listener
		if err := body.UnmarshalTo(&l); err != nil {
			return "", 0, err
		}
		if l.Name == pairListener {
			return l.Name, int(l.GetAddress().GetSocketAddress().GetPortValue()) - pairListenerBase, nil
		}
		return l.Name, 0, nil
	}
	return "", 0, fmt.Errorf("unexpected type %s", typeURL)
}

// typeName is the short name of a type URL the fleet follows.
func typeName(url string) string {
	for _, t := range fleetTypes {
		if t.url == url {
			return t.name
		}
	}
	return url
}

// ---------------------------------------------------------------- records

type loadKind int

const (
	kindSotW loadKind = iota
	kindDelta
)

func (k loadKind) String() string {
	if k == kindDelta {
		return "delta"
	}
	return "sotw"
}

// resRec is one resource of a response.
type resRec struct {
	Name    string
	Version string // delta: the resource's version; SotW: none
	Gen     int    // the pair generation its body encodes, 0 outside the pair
}

// respRec is one response a raw client received.
type respRec struct {
	At      time.Time
	Stream  int    // the stream it came on, from 1
	Type    string // cluster, listener or endpoint
	Version string // SotW version_info, delta system_version_info
	Res     []resRec
	Removed []string // delta removed_resources
	Bytes   int      // the response's encoded size
}

// streamRec is one stream of a raw client.
type streamRec struct {
	N      int
	Opened time.Time
	Ended  time.Time // zero while open
	Err    error     // how it ended
}

// heldRes is what a client holds of one resource.
type heldRes struct {
	Version string // delta: the resource's version
	Gen     int
}

// heldState is what a raw client holds, as Envoy would: per type the
// resources and the version of the last response. It survives streams.
type heldState struct {
	res     map[string]map[string]heldRes // type -> name -> held
	version map[string]string             // type -> last version_info / system_version_info
}

func newHeldState() *heldState {
	h := &heldState{res: map[string]map[string]heldRes{}, version: map[string]string{}}
	for _, t := range fleetTypes {
		h.res[t.name] = map[string]heldRes{}
	}
	return h
}

// apply takes a response in. SotW CDS and LDS responses are the full
// set; SotW EDS ones update the names they carry (the client keeps the
// others); delta ones update and remove.
func (h *heldState) apply(kind loadKind, r *respRec) {
	m := h.res[r.Type]
	if kind == kindSotW && r.Type != "endpoint" {
		clear(m)
	}
	for _, x := range r.Res {
		m[x.Name] = heldRes{Version: x.Version, Gen: x.Gen}
	}
	for _, n := range r.Removed {
		delete(m, n)
	}
	h.version[r.Type] = r.Version
}

// deltaVersions is what a delta client presents on a new stream for a
// type: initial_resource_versions.
func (h *heldState) deltaVersions(typ string) map[string]string {
	out := make(map[string]string, len(h.res[typ]))
	for n, x := range h.res[typ] {
		out[n] = x.Version
	}
	return out
}

func (h *heldState) clone() *heldState {
	c := newHeldState()
	for t, m := range h.res {
		c.res[t] = maps.Clone(m)
	}
	c.version = maps.Clone(h.version)
	return c
}

// ---------------------------------------------------------------- raw clients

// loadClient is a raw ADS client with a node id of its own and a
// connection of its own (HAProxy balances connections, not streams). One
// goroutine runs its streams one after the other: it sends the requests,
// receives, records and ACKs every response; when a stream ends it opens
// the next after a jittered backoff, presenting what it holds, as Envoy
// does: SotW the last version_info per type, delta
// initial_resource_versions.
type loadClient struct {
	id     string
	kind   loadKind
	target string
	node   *corev3.Node
	eds    []string
	cc     *grpc.ClientConn
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns

	mu      sync.Mutex // guards what follows
	held    *heldState
	resps   []respRec
	streams []streamRec
	bad     []string // responses that did not decode
}

// newLoadClient makes a raw client of kind for node id on target
// (host:port), holding a copy of from (nil: nothing), in plaintext. It
// does no I/O: start runs it.
func newLoadClient(id string, kind loadKind, target string, from *heldState) (*loadClient, error) {
	return newLoadClientWith(id, kind, target, from, nil)
}

// newLoadClientWith is newLoadClient over TLS with creds (nil:
// plaintext).
func newLoadClientWith(id string, kind loadKind, target string, from *heldState, creds *clientCreds) (*loadClient, error) {
	cc, err := grpc.NewClient("passthrough:///"+target,
		grpc.WithTransportCredentials(creds.transport()),
		// Thousands of them in one process: small buffers.
		grpc.WithReadBufferSize(16<<10), grpc.WithWriteBufferSize(16<<10))
	if err != nil {
		return nil, fmt.Errorf("%s: grpc.NewClient %s: %w", id, target, err)
	}
	held := newHeldState()
	if from != nil {
		held = from.clone()
	}
	return &loadClient{id: id, kind: kind, target: target, cc: cc, held: held,
		node: &corev3.Node{Id: id, Cluster: "c1"}, eds: fleetEDSNames(), done: make(chan struct{})}, nil
}

func (c *loadClient) String() string { return fmt.Sprintf("%s client %s", c.kind, c.id) }

func (c *loadClient) start() {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go c.run(ctx)
}

// close stops the client and waits for its goroutine. Call it once, after
// start.
func (c *loadClient) close() {
	c.cancel()
	<-c.done
	c.cc.Close()
}

func (c *loadClient) run(ctx context.Context) {
	defer close(c.done)
	wait := reconnectBase
	for n := 1; ; n++ {
		opened := time.Now()
		c.mu.Lock()
		c.streams = append(c.streams, streamRec{N: n, Opened: opened})
		c.mu.Unlock()
		var err error
		if c.kind == kindSotW {
			err = c.runSotW(ctx, n)
		} else {
			err = c.runDelta(ctx, n)
		}
		c.mu.Lock()
		c.streams[len(c.streams)-1].Ended, c.streams[len(c.streams)-1].Err = time.Now(), err
		c.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		if time.Since(opened) > 2*reconnectMax {
			wait = reconnectBase // it lasted: start the backoff over
		}
		t := time.NewTimer(wait/2 + rand.N(wait))
		wait = min(2*wait, reconnectMax)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// sendErr is the error a stream's Send failure stands for: on io.EOF the
// stream has ended and Recv says why.
func sendErr(err error, recv func() error) error {
	if errors.Is(err, io.EOF) {
		return recv()
	}
	return err
}

func (c *loadClient) runSotW(ctx context.Context, n int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(c.cc).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	recvErr := func() error { _, err := s.Recv(); return err }
	c.mu.Lock()
	versions := maps.Clone(c.held.version)
	c.mu.Unlock()
	for i, t := range fleetTypes {
		req := &discoveryv3.DiscoveryRequest{TypeUrl: t.url, VersionInfo: versions[t.name]}
		if i == 0 {
			req.Node = c.node
		}
		if t.url == edsURL {
			req.ResourceNames = c.eds
		}
		if err := s.Send(req); err != nil {
			return sendErr(err, recvErr)
		}
	}
	for {
		resp, err := s.Recv()
		if err != nil {
			return err
		}
		r := respRec{At: time.Now(), Stream: n, Type: typeName(resp.GetTypeUrl()), Version: resp.GetVersionInfo(), Bytes: proto.Size(resp)}
		for _, a := range resp.GetResources() {
			name, gen, err := resourceGen(resp.GetTypeUrl(), a)
			if err != nil {
				return c.undecodable(fmt.Errorf("stream %d: %s resource: %w", n, r.Type, err))
			}
			r.Res = append(r.Res, resRec{Name: name, Gen: gen})
		}
		c.record(&r)
		ack := &discoveryv3.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}
		if resp.GetTypeUrl() == edsURL {
			ack.ResourceNames = c.eds // the same names, or they would be unsubscribed
		}
		if err := s.Send(ack); err != nil {
			return sendErr(err, recvErr)
		}
	}
}

func (c *loadClient) runDelta(ctx context.Context, n int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(c.cc).DeltaAggregatedResources(ctx)
	if err != nil {
		return err
	}
	recvErr := func() error { _, err := s.Recv(); return err }
	c.mu.Lock()
	initial := map[string]map[string]string{}
	for _, t := range fleetTypes {
		initial[t.name] = c.held.deltaVersions(t.name)
	}
	c.mu.Unlock()
	for i, t := range fleetTypes {
		req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: t.url, InitialResourceVersions: initial[t.name]}
		if i == 0 {
			req.Node = c.node
		}
		if t.url == edsURL {
			req.ResourceNamesSubscribe = c.eds
		}
		if err := s.Send(req); err != nil {
			return sendErr(err, recvErr)
		}
	}
	for {
		resp, err := s.Recv()
		if err != nil {
			return err
		}
		r := respRec{At: time.Now(), Stream: n, Type: typeName(resp.GetTypeUrl()), Version: resp.GetSystemVersionInfo(),
			Removed: resp.GetRemovedResources(), Bytes: proto.Size(resp)}
		for _, x := range resp.GetResources() {
			name, gen, err := resourceGen(resp.GetTypeUrl(), x.GetResource())
			if err != nil || name != x.GetName() {
				return c.undecodable(fmt.Errorf("stream %d: %s resource %q (body names %q): %v", n, r.Type, x.GetName(), name, err))
			}
			r.Res = append(r.Res, resRec{Name: name, Version: x.GetVersion(), Gen: gen})
		}
		c.record(&r)
		if err := s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}); err != nil {
			return sendErr(err, recvErr)
		}
	}
}

// undecodable notes a response the client could not read and ends the
// stream with err.
func (c *loadClient) undecodable(err error) error {
	c.mu.Lock()
	c.bad = append(c.bad, err.Error())
	c.mu.Unlock()
	return err
}

func (c *loadClient) record(r *respRec) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held.apply(c.kind, r)
	c.resps = append(c.resps, *r)
}

// heldCopy returns a copy of what the client holds.
func (c *loadClient) heldCopy() *heldState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held.clone()
}

// holds reports whether the client holds the whole fleet with the pair at
// generation gen, at versions minRev or later (SotW: every type's
// version_info; delta: the pair's resource versions), and if not, why.
func (c *loadClient) holds(gen int, minRev int64) (bool, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	counts := fleetCounts()
	for _, t := range fleetTypes {
		m := c.held.res[t.name]
		if len(m) != counts[t.name] {
			return false, fmt.Sprintf("%s holds %d %ss, want %d", c, len(m), t.name, counts[t.name])
		}
		for n, x := range m {
			if n == pairA || n == pairB || n == pairListener {
				if x.Gen != gen {
					return false, fmt.Sprintf("%s holds %s %s at generation %d, want %d", c, t.name, n, x.Gen, gen)
				}
				if c.kind == kindDelta && parseRev(x.Version) < minRev {
					return false, fmt.Sprintf("%s holds %s %s at version %s, want >= %d", c, t.name, n, x.Version, minRev)
				}
			}
		}
		if c.kind == kindSotW && parseRev(c.held.version[t.name]) < minRev {
			return false, fmt.Sprintf("%s holds %ss at version %q, want >= %d", c, t.name, c.held.version[t.name], minRev)
		}
	}
	return true, ""
}

// versions returns the version of the last response per type (SotW
// version_info, delta system_version_info) and, for delta, the highest
// resource version held per type.
func (c *loadClient) versions() (last, maxRes map[string]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	last, maxRes = map[string]int64{}, map[string]int64{}
	for _, t := range fleetTypes {
		last[t.name] = parseRev(c.held.version[t.name])
		for _, x := range c.held.res[t.name] {
			maxRes[t.name] = max(maxRes[t.name], parseRev(x.Version))
		}
	}
	return last, maxRes
}

// traffic is what a client received in a period.
type traffic struct {
	Responses int
	Resources map[string]int // per type
	Bytes     int
}

func (t traffic) total() int {
	n := 0
	for _, v := range t.Resources {
		n += v
	}
	return n
}

// since sums the responses received at or after from.
func (c *loadClient) since(from time.Time) traffic {
	c.mu.Lock()
	defer c.mu.Unlock()
	tr := traffic{Resources: map[string]int{}}
	for _, r := range c.resps {
		if r.At.Before(from) {
			continue
		}
		tr.Responses++
		tr.Resources[r.Type] += len(r.Res)
		tr.Bytes += r.Bytes
	}
	return tr
}

// endsSince returns the streams that ended at or after from.
func (c *loadClient) endsSince(from time.Time) []streamRec {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []streamRec
	for _, s := range c.streams {
		if !s.Ended.IsZero() && !s.Ended.Before(from) {
			out = append(out, s)
		}
	}
	return out
}

// streamsCopy returns the client's streams so far.
func (c *loadClient) streamsCopy() []streamRec {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.streams)
}

// checkHistory replays every response the client received, from an empty
// state, and returns what broke the rules: a version going backwards for
// a type (SotW version_info, delta system_version_info) or a resource
// (delta), a generation going backwards, a state holding pair-a and
// pair-b at different generations (half of an apply), or a response that
// did not decode.
func (c *loadClient) checkHistory() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	problems := slices.Clone(c.bad)
	h := newHeldState()
	lastVersion := map[string]int64{}
	for i := range c.resps {
		r := &c.resps[i]
		where := fmt.Sprintf("%s, stream %d, %s response at version %s", c, r.Stream, r.Type, r.Version)
		v := parseRev(r.Version)
		if v < lastVersion[r.Type] {
			problems = append(problems, fmt.Sprintf("%s: version went back from %d", where, lastVersion[r.Type]))
		}
		lastVersion[r.Type] = max(lastVersion[r.Type], v)
		for _, x := range r.Res {
			old, ok := h.res[r.Type][x.Name]
			if !ok {
				continue
			}
			if x.Gen < old.Gen {
				problems = append(problems, fmt.Sprintf("%s: %s went back from generation %d to %d", where, x.Name, old.Gen, x.Gen))
			}
			if c.kind == kindDelta && parseRev(x.Version) < parseRev(old.Version) {
				problems = append(problems, fmt.Sprintf("%s: %s went back from version %s to %s", where, x.Name, old.Version, x.Version))
			}
		}
		h.apply(c.kind, r)
		a, okA := h.res[r.Type][pairA]
		b, okB := h.res[r.Type][pairB]
		if okA && okB && (a.Gen != b.Gen || a.Version != b.Version) {
			problems = append(problems, fmt.Sprintf("%s: half an apply: holds %s at generation %d (version %q), %s at %d (version %q)",
				where, pairA, a.Gen, a.Version, pairB, b.Gen, b.Version))
		}
	}
	return problems
}

func parseRev(v string) int64 {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// ---------------------------------------------------------------- grpc-go clients

// grpcClient is a grpc-go xDS client (its own xDS client, ADS stream and
// node id, through the bootstrap's server) for xds:///svc that, once its
// first RPC reached the backend, sends one every rpcInterval and records
// each result.
type grpcClient struct {
	id     string
	port   int // the backend's
	cc     *grpc.ClientConn
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex // guards what follows
	reached bool       // the first RPC reached the backend
	err     error      // why it never did
	results []rpcResult
}

type rpcResult struct {
	At  time.Time
	Err error // nil: answered by the backend on port
}

// newGRPCClient starts a grpc-go xDS client for node id whose xDS server
// is server, over TLS with creds (nil: plaintext).
func newGRPCClient(server, id string, port int, creds *clientCreds) (*grpcClient, error) {
	r, err := xds.NewXDSResolverWithConfigForTesting(bootstrapWith(server, id, creds.channelCreds()))
	if err != nil {
		return nil, fmt.Errorf("xds resolver for %s: %w", id, err)
	}
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(r))
	if err != nil {
		return nil, fmt.Errorf("grpc.NewClient for %s: %w", id, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &grpcClient{id: id, port: port, cc: cc, cancel: cancel, done: make(chan struct{})}
	go g.run(ctx)
	return g, nil
}

func (g *grpcClient) run(ctx context.Context) {
	defer close(g.done)
	if err := reaches(ctx, g.cc, g.port); err != nil {
		g.mu.Lock()
		g.err = err
		g.mu.Unlock()
		return
	}
	g.mu.Lock()
	g.reached = true
	g.mu.Unlock()
	tick := time.NewTicker(rpcInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		port, err := call(ctx, g.cc)
		if ctx.Err() != nil {
			return
		}
		if err == nil && port != g.port {
			err = fmt.Errorf("answered by port %d, want %d", port, g.port)
		}
		g.mu.Lock()
		g.results = append(g.results, rpcResult{At: time.Now(), Err: err})
		g.mu.Unlock()
	}
}

func (g *grpcClient) close() {
	g.cancel()
	<-g.done
	g.cc.Close()
}

// rpcStats sums a client's RPCs over a period: successes, failures (the
// first one's error), and the longest time without a success.
type rpcStats struct {
	OK, Failed int
	FirstErr   error
	FirstErrAt time.Time
	MaxGap     time.Duration
}

// stats sums the RPCs made from from to to.
func (g *grpcClient) stats(from, to time.Time) rpcStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	var s rpcStats
	last := from
	for _, r := range g.results {
		if r.At.Before(from) || r.At.After(to) {
			continue
		}
		if r.Err != nil {
			s.Failed++
			if s.FirstErr == nil {
				s.FirstErr, s.FirstErrAt = r.Err, r.At
			}
			continue
		}
		s.OK++
		s.MaxGap = max(s.MaxGap, r.At.Sub(last))
		last = r.At
	}
	s.MaxGap = max(s.MaxGap, to.Sub(last))
	return s
}

// ---------------------------------------------------------------- fleet

// fleet is a test's clients, all through one target (HAProxy).
type fleet struct {
	raw  []*loadClient // SotW first, then delta
	grpc []*grpcClient
	port int // the backend grpc-go clients reach
}

// startFleet starts mix's clients on server (host:port), node ids
// prefix-KIND-I, in plaintext, and stops them when the test ends. It
// returns at once: waitSynced waits.
func startFleet(t testing.TB, server, prefix string, mix clientMix, port int) *fleet {
	t.Helper()
	return startFleetWith(t, server, prefix, mix, port, nil)
}

// startFleetWith is startFleet over TLS with creds (nil: plaintext).
func startFleetWith(t testing.TB, server, prefix string, mix clientMix, port int, creds *clientCreds) *fleet {
	t.Helper()
	f := &fleet{port: port}
	t.Cleanup(f.close)
	for i := range mix.SotW + mix.Delta {
		kind, n := kindSotW, i
		if i >= mix.SotW {
			kind, n = kindDelta, i-mix.SotW
		}
		c, err := newLoadClientWith(fmt.Sprintf("%s-%s-%04d", prefix, kind, n), kind, server, nil, creds)
		if err != nil {
			t.Fatal(err)
		}
		c.start()
		f.raw = append(f.raw, c)
	}
	for i := range mix.GRPC {
		g, err := newGRPCClient(server, fmt.Sprintf("%s-grpc-%04d", prefix, i), port, creds)
		if err != nil {
			t.Fatal(err)
		}
		f.grpc = append(f.grpc, g)
	}
	return f
}

// close stops every client, in parallel (a grpc-go client takes a moment).
func (f *fleet) close() {
	var wg sync.WaitGroup
	for _, c := range f.raw {
		wg.Go(c.close)
	}
	for _, g := range f.grpc {
		wg.Go(g.close)
	}
	wg.Wait()
	f.raw, f.grpc = nil, nil
}

// ids returns every client's node id.
func (f *fleet) ids() []string {
	var ids []string
	for _, c := range f.raw {
		ids = append(ids, c.id)
	}
	for _, g := range f.grpc {
		ids = append(ids, g.id)
	}
	return ids
}

// waitSynced waits until every raw client holds the fleet at generation
// gen and version minRev or later, and every grpc-go client's first RPC
// reached the backend; it returns how long that took.
func (f *fleet) waitSynced(t testing.TB, gen int, minRev int64) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(clusterTimeout)
	for {
		why, n := "", 0
		for _, c := range f.raw {
			if ok, w := c.holds(gen, minRev); !ok {
				n++
				why = w
			}
		}
		for _, g := range f.grpc {
			g.mu.Lock()
			reached, err := g.reached, g.err
			g.mu.Unlock()
			if err != nil {
				t.Fatalf("grpc-go client %s: %v", g.id, err)
			}
			if !reached {
				n++
				why = fmt.Sprintf("grpc-go client %s has not reached the backend yet", g.id)
			}
		}
		if n == 0 {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d clients not synced at generation %d (version >= %d) after %s; e.g. %s",
				n, len(f.raw)+len(f.grpc), gen, minRev, clusterTimeout, why)
		}
		time.Sleep(pollInterval)
	}
}

// checkHistories fails the test for every broken rule in every raw
// client's history (loadClient.checkHistory).
func (f *fleet) checkHistories(t testing.TB) {
	t.Helper()
	n := 0
	for _, c := range f.raw {
		for _, p := range c.checkHistory() {
			if n++; n <= 20 {
				t.Error(p)
			}
		}
	}
	if n > 20 {
		t.Errorf("... and %d more", n-20)
	}
}

// rpcStats sums the grpc-go clients' RPCs from from to to: failures,
// successes, one failure's account, and the longest time any client went
// without a success.
func (f *fleet) rpcStats(from, to time.Time) (failed, ok int, example string, maxGap time.Duration) {
	for _, g := range f.grpc {
		s := g.stats(from, to)
		failed += s.Failed
		ok += s.OK
		if s.FirstErr != nil && example == "" {
			example = fmt.Sprintf("%s at %s: %v", g.id, s.FirstErrAt.Format("15:04:05.000"), s.FirstErr)
		}
		maxGap = max(maxGap, s.MaxGap)
	}
	return failed, ok, example, maxGap
}

// ---------------------------------------------------------------- the replicas' account

// replicaDebug is what one replica says of itself: its ring and the
// streams it has.
type replicaDebug struct {
	Name   string
	Ring   []string
	Shares map[string]float64
	SotW   []xdstest.SotWStatus
	Delta  []xdstest.DeltaStatus
	Relay  []relay.StreamInfo
}

// readDebug reads /debug/cluster and /debug/streams of every running
// replica.
func readDebug(c *localcluster.TestCluster) ([]replicaDebug, error) {
	var out []replicaDebug
	for _, r := range c.Replicas() {
		if !r.Running() {
			continue
		}
		d := replicaDebug{Name: r.Name}
		var cl struct {
			Ring   []string           `json:"ring"`
			Shares map[string]float64 `json:"ring_shares"`
		}
		if err := clusterJSON(c, r.HTTPAddr, "/debug/cluster", &cl); err != nil {
			return nil, fmt.Errorf("%s: %w", r.Name, err)
		}
		d.Ring, d.Shares = cl.Ring, cl.Shares
		var st struct {
			xdstest.DebugStreams
			Relay []relay.StreamInfo `json:"relay"`
		}
		if err := clusterJSON(c, r.HTTPAddr, "/debug/streams", &st); err != nil {
			return nil, fmt.Errorf("%s: %w", r.Name, err)
		}
		d.SotW, d.Delta, d.Relay = st.Streams, st.DeltaStreams, st.Relay
		out = append(out, d)
	}
	return out, nil
}

// getJSON GETs path from the plain HTTP server on addr and decodes its
// JSON body into v.
func getJSON(addr, path string, v any) error {
	return decodeJSON(path, v)(httpGet(addr, path))
}

// clusterJSON is getJSON from a replica of c, over HTTPS as the admin
// when c is secure.
func clusterJSON(c *localcluster.TestCluster, addr, path string, v any) error {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	return decodeJSON(path, v)(c.Cluster().HTTPGet(ctx, addr, path))
}

// decodeJSON returns what decodes the answer to a GET of path into v.
func decodeJSON(path string, v any) func(code int, body string, err error) error {
	return func(code int, body string, err error) error {
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("GET %s: %d %v %.200s", path, code, err, body)
		}
		if err := json.Unmarshal([]byte(body), v); err != nil {
			return fmt.Errorf("GET %s: %w", path, err)
		}
		return nil
	}
}

// runningNames returns the names of the running replicas, sorted.
func runningNames(c *localcluster.TestCluster) []string {
	var names []string
	for _, r := range c.Replicas() {
		if r.Running() {
			names = append(names, r.Name)
		}
	}
	sort.Strings(names)
	return names
}

// ringHome returns the home function of the ring over the replicas named:
// shard.NewRing with the default virtual nodes, as every replica builds
// it (the hash depends on the names only).
func ringHome(names []string) func(nodeID string) string {
	members := make([]shard.Member, len(names))
	for i, n := range names {
		members[i] = shard.Member{Name: n}
	}
	r := shard.NewRing(members, 0)
	return func(id string) string {
		m, _ := r.Home(id)
		return m.Name
	}
}

// served is one stream a replica serves locally.
type served struct {
	Replica string
	SotW    *xdstest.SotWStatus
	Delta   *xdstest.DeltaStatus
}

// localStreams maps each node id to the streams replicas serve locally.
func localStreams(views []replicaDebug) map[string][]served {
	out := map[string][]served{}
	for _, v := range views {
		for i := range v.SotW {
			out[v.SotW[i].NodeID] = append(out[v.SotW[i].NodeID], served{Replica: v.Name, SotW: &v.SotW[i]})
		}
		for i := range v.Delta {
			out[v.Delta[i].NodeID] = append(out[v.Delta[i].NodeID], served{Replica: v.Name, Delta: &v.Delta[i]})
		}
	}
	return out
}

// nodeExpect is what a settled stream of a node shows.
type nodeExpect struct {
	kind   string // "sotw", "delta" or "grpc"
	minRev int64  // every type's ACKed version (delta: the pair's) at least this
}

// expect returns what each of the fleet's nodes shows once settled: raw
// clients at rawMinRev or later, grpc-go ones at grpcMinRev or later.
func (f *fleet) expect(rawMinRev, grpcMinRev int64) map[string]nodeExpect {
	out := map[string]nodeExpect{}
	for _, c := range f.raw {
		out[c.id] = nodeExpect{kind: c.kind.String(), minRev: rawMinRev}
	}
	for _, g := range f.grpc {
		out[g.id] = nodeExpect{kind: "grpc", minRev: grpcMinRev}
	}
	return out
}

// settled says whether s, a stream's status, shows a node with nothing
// outstanding: every type it follows sent and ACKed, at versions at least
// want.minRev, and if not, why.
func (s served) settled(want nodeExpect) (bool, string) {
	switch want.kind {
	case "sotw", "grpc":
		if s.SotW == nil {
			return false, "served as delta, want SotW"
		}
		types := []string{"cluster", "listener", "endpoint"}
		if want.kind == "grpc" {
			types = append(types, "route")
		}
		for _, typ := range types {
			ts := s.SotW.Types[typ]
			switch {
			case ts == nil:
				return false, "no " + typ + " yet"
			case ts.VersionSent == "" || ts.VersionAcked != ts.VersionSent:
				return false, fmt.Sprintf("%s sent %q, ACKed %q", typ, ts.VersionSent, ts.VersionAcked)
			case parseRev(ts.VersionAcked) < want.minRev:
				return false, fmt.Sprintf("%s ACKed %s, want >= %d", typ, ts.VersionAcked, want.minRev)
			case ts.NackVersion != "":
				return false, fmt.Sprintf("%s NACKed %s: %s", typ, ts.NackVersion, ts.LastNack)
			}
		}
	case "delta":
		if s.Delta == nil {
			return false, "served as SotW, want delta"
		}
		counts := fleetCounts()
		for _, typ := range []string{"cluster", "listener", "endpoint"} {
			ts := s.Delta.Types[typ]
			switch {
			case ts == nil:
				return false, "no " + typ + " yet"
			case ts.Outstanding != "":
				return false, fmt.Sprintf("%s response %s not ACKed", typ, ts.Outstanding)
			case ts.NackVersion != "":
				return false, fmt.Sprintf("%s NACKed %s: %s", typ, ts.NackVersion, ts.LastNack)
			case ts.Held != counts[typ]:
				return false, fmt.Sprintf("%s: holds %d, want %d", typ, ts.Held, counts[typ])
			}
			var newest int64
			for n, r := range ts.Resources {
				if r.VersionAcked != r.VersionSent {
					return false, fmt.Sprintf("%s %s sent %s, ACKed %q", typ, n, r.VersionSent, r.VersionAcked)
				}
				newest = max(newest, parseRev(r.VersionAcked))
			}
			if newest < want.minRev {
				return false, fmt.Sprintf("%s: newest resource at %d, want >= %d", typ, newest, want.minRev)
			}
		}
	}
	return true, ""
}

// homeCheck is the replicas' account checked against the ring of the
// running replicas.
type homeCheck struct {
	ringsAgree bool              // every running replica's ring is the running set
	bad        map[string]string // node id -> why it is not settled on its home
	perReplica map[string]int    // replica -> nodes it serves locally
}

// checkHomes checks that each node in want is served locally by exactly
// one replica, its home on the ring of the running replicas, with its
// stream settled (served.settled); that every relayed stream goes to the
// node's home; and that every replica's ring is the running set.
func checkHomes(c *localcluster.TestCluster, views []replicaDebug, want map[string]nodeExpect) homeCheck {
	names := runningNames(c)
	home := ringHome(names)
	hc := homeCheck{ringsAgree: true, bad: map[string]string{}, perReplica: map[string]int{}}
	for _, v := range views {
		ring := slices.Sorted(slices.Values(v.Ring))
		if !slices.Equal(ring, names) {
			hc.ringsAgree = false
		}
	}
	local := localStreams(views)
	for id, exp := range want {
		ss := local[id]
		switch {
		case len(ss) == 0:
			hc.bad[id] = "no replica serves it"
			continue
		case len(ss) > 1:
			var where []string
			for _, s := range ss {
				where = append(where, s.Replica)
			}
			hc.bad[id] = fmt.Sprintf("served by %d streams, on %v", len(ss), where)
			continue
		}
		s := ss[0]
		hc.perReplica[s.Replica]++
		if h := home(id); s.Replica != h {
			hc.bad[id] = fmt.Sprintf("served by %s, its home is %s", s.Replica, h)
			continue
		}
		if ok, why := s.settled(exp); !ok {
			hc.bad[id] = fmt.Sprintf("on %s: %s", s.Replica, why)
		}
	}
	for _, v := range views {
		for _, r := range v.Relay {
			if _, ok := want[r.NodeID]; !ok || hc.bad[r.NodeID] != "" {
				continue
			}
			h := home(r.NodeID)
			switch {
			case r.ServedBy == relay.Local && v.Name != h:
				hc.bad[r.NodeID] = fmt.Sprintf("%s serves a stream of it locally (relay registry), its home is %s", v.Name, h)
			case r.ServedBy != relay.Local && r.ServedBy != h:
				hc.bad[r.NodeID] = fmt.Sprintf("%s relays a stream of it to %s, its home is %s", v.Name, r.ServedBy, h)
			}
		}
	}
	return hc
}

// example returns one entry of bad, the first by id, for messages.
func example(bad map[string]string) string {
	if len(bad) == 0 {
		return ""
	}
	ids := slices.Sorted(maps.Keys(bad))
	return ids[0] + ": " + bad[ids[0]]
}

// homing is the result of waitHomed.
type homing struct {
	All     time.Duration            // from the start until every node was settled on its home
	PerNode map[string]time.Duration // from the start until that node was, for the nodes whose stream ended after the start
	Polls   int
}

// waitHomed polls the running replicas until every node of want is
// settled on its home (checkHomes) and every ring is the running set,
// failing the test after bound. Times count from start. For the raw
// clients whose stream ended after start, it also notes when each was
// first seen settled on its home on a later stream.
func waitHomed(t testing.TB, c *localcluster.TestCluster, f *fleet, want map[string]nodeExpect, start time.Time, bound time.Duration) homing {
	t.Helper()
	return waitHomedEvery(t, c, f, want, start, bound, pollInterval)
}

// waitHomedEvery is waitHomed polling every interval: with thousands of
// streams a poll of /debug/streams costs the replicas CPU.
func waitHomedEvery(t testing.TB, c *localcluster.TestCluster, f *fleet, want map[string]nodeExpect, start time.Time, bound, interval time.Duration) homing {
	t.Helper()
	res := homing{PerNode: map[string]time.Duration{}}
	deadline := start.Add(bound)
	for {
		views, err := readDebug(c)
		now := time.Now()
		res.Polls++
		if err == nil {
			hc := checkHomes(c, views, want)
			for _, cl := range f.raw {
				if _, done := res.PerNode[cl.id]; done || hc.bad[cl.id] != "" {
					continue
				}
				if ss := cl.streamsCopy(); len(ss) > 0 && ss[len(ss)-1].Opened.After(start) && ss[len(ss)-1].Ended.IsZero() {
					res.PerNode[cl.id] = now.Sub(start)
				}
			}
			if hc.ringsAgree && len(hc.bad) == 0 {
				res.All = now.Sub(start)
				return res
			}
			if now.After(deadline) {
				t.Fatalf("%d of %d nodes not settled on their homes (rings agree: %t) %s after the start; e.g. %s",
					len(hc.bad), len(want), hc.ringsAgree, bound, example(hc.bad))
			}
		} else if now.After(deadline) {
			t.Fatalf("reading the replicas: %v", err)
		}
		time.Sleep(interval)
	}
}

// servingCounts returns, per running replica, how many of the fleet's
// nodes it serves locally.
func servingCounts(t testing.TB, c *localcluster.TestCluster, want map[string]nodeExpect) map[string]int {
	t.Helper()
	views, err := readDebug(c)
	if err != nil {
		t.Fatal(err)
	}
	return checkHomes(c, views, want).perReplica
}

// busiest returns the index in c.Replicas of the running replica serving
// the most nodes, and how many.
func busiest(t testing.TB, c *localcluster.TestCluster, want map[string]nodeExpect) (int, int) {
	t.Helper()
	counts := servingCounts(t, c, want)
	best, n := -1, -1
	for i, r := range c.Replicas() {
		if r.Running() && counts[r.Name] > n {
			best, n = i, counts[r.Name]
		}
	}
	return best, n
}

// waitStatusHomes waits until `xdsadmin -o json status` lists every node
// of want with its home on the ring of the running replicas (replicas
// rewrite their records about once a second), failing the test after
// clusterTimeout.
func waitStatusHomes(t testing.TB, c *localcluster.TestCluster, want map[string]nodeExpect) {
	t.Helper()
	home := ringHome(runningNames(c))
	deadline := time.Now().Add(clusterTimeout)
	for {
		out, errOut, code := clusterAdmin(c, "", "-o", "json", "status")
		why := ""
		if code != 0 {
			why = fmt.Sprintf("exit %d: %s", code, strings.TrimSpace(errOut))
		} else {
			var recs []nodestatus.NodeStatus
			if err := json.Unmarshal([]byte(out), &recs); err != nil {
				t.Fatalf("xdsadmin -o json status: %v\n%.500s", err, out)
			}
			got := map[string]string{}
			for _, r := range recs {
				got[r.NodeID] = r.Home
			}
			bad := map[string]string{}
			for id := range want {
				if h, ok := got[id]; !ok {
					bad[id] = "not listed"
				} else if h != home(id) {
					bad[id] = fmt.Sprintf("home %s, the ring says %s", h, home(id))
				}
			}
			if len(bad) == 0 {
				return
			}
			why = fmt.Sprintf("%d of %d nodes wrong (%d listed); e.g. %s", len(bad), len(want), len(recs), example(bad))
		}
		if time.Now().After(deadline) {
			t.Fatalf("xdsadmin status: not every node listed with its home after %s: %s", clusterTimeout, why)
		}
		time.Sleep(250 * time.Millisecond) // xdsadmin status reads every record: pace it
	}
}

// ---------------------------------------------------------------- xdsadmin and etcd

// clusterAdmin runs xdsadmin in-process against the cluster's etcd (as
// legation-admin when c is secure).
func clusterAdmin(c *localcluster.TestCluster, stdin string, args ...string) (stdout, stderr string, code int) {
	return adminRun(clusterConn(c), stdin, args...)
}

// clusterConn are xdsadmin's flags for c's etcd: its endpoints and, when
// c is secure, legation-admin's TLS files.
func clusterConn(c *localcluster.TestCluster) []string {
	conn := []string{"--etcd-endpoints", strings.Join(c.EtcdEndpoints, ",")}
	if sec := c.Security(); sec != nil {
		conn = append(conn, sec.XDSAdminArgs()...)
	}
	return conn
}

// adminRun runs xdsadmin in-process with the etcd flags conn, then args.
// It may be called from any goroutine.
func adminRun(conn []string, stdin string, args ...string) (stdout, stderr string, code int) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var out, errOut bytes.Buffer
	code = adminctl.Run(ctx, append(slices.Clone(conn), args...), strings.NewReader(stdin), &out, &errOut)
	return out.String(), errOut.String(), code
}

// clusterApplyErr is `xdsadmin -o json apply -f -` with doc; it returns
// the revision the apply made. It may be called from any goroutine.
func clusterApplyErr(c *localcluster.TestCluster, doc string) (int64, error) {
	return applyWith(clusterConn(c), doc)
}

// applyAt is clusterApplyErr against the etcd members at endpoints.
func applyAt(endpoints []string, doc string) (int64, error) {
	return applyWith([]string{"--etcd-endpoints", strings.Join(endpoints, ",")}, doc)
}

// applyWith is clusterApplyErr with the etcd flags conn.
func applyWith(conn []string, doc string) (int64, error) {
	out, errOut, code := adminRun(conn, doc, "-o", "json", "apply", "-f", "-")
	if code != 0 {
		return 0, fmt.Errorf("xdsadmin apply: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	var res struct {
		Revision int64 `json:"revision"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Revision <= 0 {
		return 0, fmt.Errorf("xdsadmin apply -o json: no revision (%v) in:\n%s", err, out)
	}
	return res.Revision, nil
}

func clusterApply(t testing.TB, c *localcluster.TestCluster, doc string) int64 {
	t.Helper()
	rev, err := clusterApplyErr(c, doc)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// etcdClient is a client of the cluster's etcd members at endpoints,
// closed when the test ends.
func etcdClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// etcdRevision is etcd's current revision.
func etcdRevision(t testing.TB, cli *clientv3.Client) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	resp, err := cli.Get(ctx, "revision-probe", clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("etcd get: %v", err)
	}
	return resp.Header.Revision
}

// isUnavailable reports whether err is a gRPC UNAVAILABLE status.
func isUnavailable(err error) bool { return status.Code(err) == codes.Unavailable }
