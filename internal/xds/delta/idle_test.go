package delta_test

import (
	"math/rand/v2"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/delta"
)

// idleTypes are the types the idle-cost clients ask for: the
// make-before-break chain and on-demand virtual hosts.
var idleTypes = []*resource.Type{resource.Cluster, resource.Endpoint, resource.Listener, resource.Route, resource.VirtualHost}

// TestIdleCostDelta checks the idle-cost property (xdstest.CheckIdle) on
// delta ADS streams: in each round, clients send random legal requests
// (subscriptions and unsubscriptions of any names, the wildcard
// included, both of one name in one request, legacy wildcards, ACKs,
// NACKs, stale nonces, empty requests, reconnects presenting
// initial_resource_versions) while the state changes; then they only
// answer, and then stop. Every round uses its own seed: a failure names
// it.
func TestIdleCostDelta(t *testing.T) {
	turns := &xdstest.Turns{}
	e := newEnvWith(t, xdstest.Options{}, func(c *delta.Config) { c.Busy = turns })
	w := xdstest.NewIdleWorld(t, e.Env)
	xdstest.RunIdleRounds(t, w, turns, func(t *testing.T, r *rand.Rand, id string) xdstest.RandomIdleClient {
		c := &idleClient{t: t, cc: e.dial(t), r: r, id: id}
		c.open()
		return c
	})
}

// idleClient is one random delta client of TestIdleCostDelta.
type idleClient struct {
	t     *testing.T
	cc    *grpc.ClientConn
	r     *rand.Rand
	id    string
	st    *xdstest.DeltaStream
	named bool // the stream's first request, naming the node, is sent
	types map[*resource.Type]*idleType
	// sent counts the requests of the client's own (not Answer's);
	// received the responses.
	sent, received int
}

// idleType is what an idleClient keeps of a type: on its stream, the
// nonces received (the last one's response in resp, answered or not);
// across streams, what it holds (name to version).
type idleType struct {
	asked    bool
	resp     *discoveryv3.DeltaDiscoveryResponse
	answered bool
	nonces   []string
	held     map[string]string
}

// open opens a new stream, forgetting the last one's nonces.
func (c *idleClient) open() {
	if c.st != nil {
		c.st.Cancel()
	}
	c.st, c.named = c.openDelta(), false
	if c.types == nil {
		c.types = map[*resource.Type]*idleType{}
		for _, t := range idleTypes {
			c.types[t] = &idleType{held: map[string]string{}}
		}
	}
	for _, ts := range c.types {
		ts.asked, ts.resp, ts.answered, ts.nonces = false, nil, false, nil
	}
}

func (c *idleClient) openDelta() *xdstest.DeltaStream { return xdstest.OpenDelta(c.t, c.cc) }

// Step does one random thing a client may do.
func (c *idleClient) Step() {
	typ := idleTypes[c.r.IntN(len(idleTypes))]
	ts := c.types[typ]
	req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: typ.URL}
	switch x := c.r.IntN(100); {
	case x < 15:
		c.read(true)
		return
	case x < 30:
		c.wait()
		return
	case x < 50:
		req.ResourceNamesSubscribe = xdstest.RandomNames(c.r, typ)
	case x < 60:
		req.ResourceNamesUnsubscribe = xdstest.RandomNames(c.r, typ)
	case x < 65:
		n := xdstest.RandomNames(c.r, typ)
		req.ResourceNamesSubscribe, req.ResourceNamesUnsubscribe = n, n
	case x < 75 && ts.resp != nil:
		c.answer(typ, true, c.r.IntN(4) == 0) // perhaps again: then stale
		return
	case x < 80 && len(ts.nonces) > 0:
		req.ResponseNonce = ts.nonces[c.r.IntN(len(ts.nonces))]
	case x < 85:
		c.reconnect()
		return
	default:
		// Nothing but the type: a legacy wildcard, if the first.
	}
	if ts.resp != nil && !ts.answered && req.ResponseNonce == "" && c.r.IntN(2) == 0 {
		req.ResponseNonce = ts.resp.GetNonce() // an ACK with a change
	}
	c.send(typ, req)
}

// reconnect opens a new stream and asks again for the types held, each
// presenting what it holds (a version changed at times) and subscribing
// to it, as Envoy does.
func (c *idleClient) reconnect() {
	c.open()
	for _, typ := range idleTypes {
		ts := c.types[typ]
		if len(ts.held) == 0 || c.r.IntN(4) == 0 {
			continue
		}
		req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: typ.URL, InitialResourceVersions: map[string]string{}}
		for n, v := range ts.held {
			if c.r.IntN(5) == 0 {
				v = "1" // older than what it holds
			}
			req.InitialResourceVersions[n] = v
			req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, n)
		}
		c.send(typ, req)
	}
}

// send sends req, naming the node if it is the stream's first.
func (c *idleClient) send(typ *resource.Type, req *discoveryv3.DeltaDiscoveryRequest) {
	if !c.named {
		req.Node, c.named = xdstest.Node(c.id, "idle"), true
	}
	ts := c.types[typ]
	ts.asked = true
	if ts.resp != nil && req.GetResponseNonce() == ts.resp.GetNonce() {
		ts.answered = true
	}
	c.st.Send(req)
	c.sent++
}

// wait reads the responses that arrive within a few milliseconds, as
// read(true), so that later requests answer them.
func (c *idleClient) wait() {
	for end := time.Now().Add(5 * time.Millisecond); time.Now().Before(end) && c.read(true) == 0; {
		time.Sleep(time.Millisecond)
	}
}

// read reads the responses that have arrived, taking what they carry,
// and returns how many. For a request of the client's own (own) it
// answers each at times, with an ACK or a NACK; else it ACKs each, as a
// client that takes what it is sent does.
func (c *idleClient) read(own bool) int {
	n := 0
	for {
		select {
		case res := <-c.st.Recv():
			if res.Err != nil {
				c.t.Fatalf("client %s: the stream ended: %v", c.id, res.Err)
			}
			n++
			c.received++
			typ := c.take(res.Resp)
			switch {
			case !own:
				c.answer(typ, false, false)
			case c.r.IntN(3) > 0:
				c.answer(typ, true, c.r.IntN(5) == 0)
			}
		default:
			return n
		}
	}
}

// take records response resp: what the client holds of its type, and
// its nonce, not answered yet.
func (c *idleClient) take(resp *discoveryv3.DeltaDiscoveryResponse) *resource.Type {
	typ, _ := resource.ByURL(resp.GetTypeUrl())
	ts := c.types[typ]
	if ts == nil || !ts.asked {
		c.t.Fatalf("client %s: a response of %s, never asked for", c.id, resp.GetTypeUrl())
	}
	for _, r := range resp.GetResources() {
		ts.held[r.GetName()] = r.GetVersion()
	}
	for _, n := range resp.GetRemovedResources() {
		delete(ts.held, n)
	}
	ts.resp, ts.answered, ts.nonces = resp, false, append(ts.nonces, resp.GetNonce())
	return typ
}

// answer ACKs or NACKs the latest response of typ; own: a request of
// the client's own, counted.
func (c *idleClient) answer(typ *resource.Type, own, nack bool) {
	ts := c.types[typ]
	req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: typ.URL, ResponseNonce: ts.resp.GetNonce()}
	if nack {
		req.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: "rejected"}
	}
	c.send(typ, req)
	if !own {
		c.sent--
	}
}

// Answer implements xdstest.IdleClient: it ACKs the latest responses
// left unanswered, then those that arrived.
func (c *idleClient) Answer() int {
	for _, typ := range idleTypes {
		if ts := c.types[typ]; ts.resp != nil && !ts.answered {
			c.answer(typ, false, false)
		}
	}
	return c.read(false)
}

// Probe implements xdstest.IdleClient: for every type asked, its latest
// response's ACK again (now a stale nonce) and a request changing
// nothing.
func (c *idleClient) Probe() {
	for _, typ := range idleTypes {
		ts := c.types[typ]
		if !ts.asked {
			continue
		}
		if ts.resp != nil {
			c.st.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typ.URL, ResponseNonce: ts.resp.GetNonce()})
		}
		c.st.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typ.URL})
	}
}

// Asked implements xdstest.IdleClient.
func (c *idleClient) Asked(changes int) int { return 2*c.sent + 2*len(idleTypes)*changes }

// Received implements xdstest.IdleClient.
func (c *idleClient) Received() int { return c.received }
