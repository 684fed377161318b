package sotw_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/sotw"
)

// idleTypes are the types the idle-cost clients ask for: two full-state
// types and two named ones, the make-before-break chain among them.
var idleTypes = []*resource.Type{resource.Cluster, resource.Endpoint, resource.Listener, resource.Route}

// TestIdleCostSotW checks the idle-cost property (xdstest.CheckIdle) on
// SotW ADS streams: in each round, clients send random legal requests
// (subscriptions of any names, the wildcard and none, ACKs, NACKs,
// stale and missing nonces, requests repeated, reconnects presenting the
// version held) while the state changes; then they only answer, and
// then stop. Every round uses its own seed: a failure names it.
func TestIdleCostSotW(t *testing.T) {
	turns := &xdstest.Turns{}
	e := newEnv(t, func(c *sotw.Config) { c.Busy = turns })
	w := xdstest.NewIdleWorld(t, e.Env)
	xdstest.RunIdleRounds(t, w, turns, func(t *testing.T, r *rand.Rand, id string) xdstest.RandomIdleClient {
		c := &idleClient{t: t, cc: e.conn(t), r: r, id: id}
		c.open()
		return c
	})
}

// idleClient is one random SotW client of TestIdleCostSotW.
type idleClient struct {
	t     *testing.T
	cc    *grpc.ClientConn
	r     *rand.Rand
	id    string
	st    *xdstest.SotWStream
	named bool // the stream's first request, naming the node, is sent
	types map[*resource.Type]*idleType
	// sent counts the requests of the client's own (not Answer's);
	// received the responses.
	sent, received int
}

// idleType is what an idleClient keeps of a type: on its stream, the
// last request sent and the nonces received (the last one's response
// in resp); across streams, the version it holds and its names.
type idleType struct {
	last     *discoveryv3.DiscoveryRequest
	resp     *discoveryv3.DiscoveryResponse
	answered bool // resp was answered (a request carried its nonce)
	nonces   []string
	acked    string
	names    []string
}

// open opens a new stream, forgetting the last one's nonces.
func (c *idleClient) open() {
	if c.st != nil {
		c.st.Cancel()
	}
	c.st, c.named = xdstest.OpenSotW(c.t, c.cc), false
	if c.types == nil {
		c.types = map[*resource.Type]*idleType{}
	}
	for _, ts := range c.types {
		ts.last, ts.resp, ts.answered, ts.nonces = nil, nil, false, nil
	}
}

// Step does one random thing a client may do.
func (c *idleClient) Step() {
	typ := idleTypes[c.r.IntN(len(idleTypes))]
	ts := c.types[typ]
	switch x := c.r.IntN(100); {
	case x < 15:
		c.read(true)
	case x < 30:
		c.wait()
	case x < 50 || ts == nil || ts.last == nil:
		c.subscribe(typ, xdstest.RandomNames(c.r, typ))
	case x < 58:
		c.send(typ, ts.last) // the same request again
	case x < 66 && ts.resp != nil:
		c.answer(ts.resp, true, c.r.IntN(4) == 0)
	case x < 74:
		// A nonce that is not the latest: an older one, or none.
		names := xdstest.RandomNames(c.r, typ)
		nonce := ""
		if len(ts.nonces) > 0 {
			nonce = ts.nonces[c.r.IntN(len(ts.nonces))]
		}
		ts.names = names
		c.send(typ, &discoveryv3.DiscoveryRequest{TypeUrl: typ.URL, VersionInfo: ts.acked, ResponseNonce: nonce, ResourceNames: names})
	case x < 82:
		c.subscribe(typ, nil) // none: unsubscribe all, or a wildcard
	case x < 86:
		c.reconnect()
	default:
		c.subscribe(typ, xdstest.RandomNames(c.r, typ))
	}
}

// subscribe asks for names of typ: the type's first request on the
// stream, presenting the version held at times, or a request answering
// the latest response.
func (c *idleClient) subscribe(typ *resource.Type, names []string) {
	ts := c.types[typ]
	if ts == nil {
		ts = &idleType{}
		c.types[typ] = ts
	}
	ts.names = names
	req := &discoveryv3.DiscoveryRequest{TypeUrl: typ.URL, ResourceNames: names}
	switch {
	case ts.resp != nil:
		req.VersionInfo, req.ResponseNonce = ts.acked, ts.resp.GetNonce()
	case c.r.IntN(2) == 0:
		req.VersionInfo = ts.acked // as Envoy does on a new stream
	}
	c.send(typ, req)
}

// reconnect opens a new stream and asks again for every type held, at
// the version held, as Envoy does.
func (c *idleClient) reconnect() {
	c.open()
	for _, typ := range idleTypes {
		if ts := c.types[typ]; ts != nil && c.r.IntN(4) > 0 {
			c.send(typ, &discoveryv3.DiscoveryRequest{TypeUrl: typ.URL, VersionInfo: ts.acked, ResourceNames: ts.names})
		}
	}
}

// send sends req, the type's last request, naming the node if it is
// the stream's first.
func (c *idleClient) send(typ *resource.Type, req *discoveryv3.DiscoveryRequest) {
	if !c.named {
		req.Node, c.named = xdstest.Node(c.id, "idle"), true
	}
	ts := c.types[typ]
	ts.last = req
	if ts.resp != nil && req.GetResponseNonce() == ts.resp.GetNonce() {
		ts.answered = true
	}
	c.st.Send(req)
	c.sent++
}

// wait reads the responses that arrive within a few milliseconds, as
// read(true), so that later requests answer them.
func (c *idleClient) wait() {
	for end := time.Now().Add(idleWait); time.Now().Before(end) && c.read(true) == 0; {
		time.Sleep(time.Millisecond)
	}
}

// idleWait bounds an idle client's wait for responses.
const idleWait = 5 * time.Millisecond

// read reads the responses that have arrived and returns how many. For
// a request of the client's own (own) it answers each at times, with an
// ACK or a NACK; else it ACKs each, as a client that takes what it is
// sent does (a NACK would end a ping-pong that ACKs would not).
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
			resp := res.Resp
			typ, _ := resource.ByURL(resp.GetTypeUrl())
			ts := c.types[typ]
			if ts == nil {
				c.t.Fatalf("client %s: a response of %s, never asked for", c.id, resp.GetTypeUrl())
			}
			ts.resp, ts.answered, ts.nonces = resp, false, append(ts.nonces, resp.GetNonce())
			switch {
			case !own:
				c.answer(resp, false, false)
			case c.r.IntN(3) > 0:
				c.answer(resp, true, c.r.IntN(5) == 0)
			}
		default:
			return n
		}
	}
}

// answer ACKs or NACKs resp with the names the client holds; own: a
// request of the client's own, counted.
func (c *idleClient) answer(resp *discoveryv3.DiscoveryResponse, own, nack bool) {
	typ, _ := resource.ByURL(resp.GetTypeUrl())
	ts := c.types[typ]
	req := &discoveryv3.DiscoveryRequest{TypeUrl: typ.URL, ResponseNonce: resp.GetNonce(), ResourceNames: ts.names}
	if nack {
		req.VersionInfo = ts.acked
		req.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: "rejected"}
	} else {
		ts.acked = resp.GetVersionInfo()
		req.VersionInfo = ts.acked
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
		if ts := c.types[typ]; ts != nil && ts.resp != nil && !ts.answered {
			c.answer(ts.resp, false, false)
		}
	}
	return c.read(false)
}

// Probe implements xdstest.IdleClient: every type's last request again,
// then one with the names it holds and an older nonce.
func (c *idleClient) Probe() {
	for _, typ := range idleTypes {
		ts := c.types[typ]
		if ts == nil || ts.last == nil {
			continue
		}
		c.st.Send(ts.last)
		if i := slices.Index(ts.nonces, ts.last.GetResponseNonce()); i > 0 {
			c.st.Send(&discoveryv3.DiscoveryRequest{TypeUrl: typ.URL, VersionInfo: ts.acked, ResponseNonce: ts.nonces[i-1], ResourceNames: ts.names})
		}
	}
}

// Asked implements xdstest.IdleClient.
func (c *idleClient) Asked(changes int) int { return 2*c.sent + 2*len(c.types)*changes }

// Received implements xdstest.IdleClient.
func (c *idleClient) Received() int { return c.received }
