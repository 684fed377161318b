package loadgen

import (
	"io"
	"net/rpc"
	"slices"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/legation-io/legation/internal/testkit/fixture"
)

// TestDeltaResumeKeepsSubscriptions: a resuming delta client's first
// requests ask again for every EDS and RDS name it held, also when the
// stream before ended before all its first requests were sent (which
// once lost the RDS subscription for good: found by the chaos run,
// seed 348, a client that never converged).
func TestDeltaResumeKeepsSubscriptions(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Resume = true
	f := &fleet{cfg: cfg, index: map[string]int{}, routeIndex: map[string]int{}}
	for i := range 3 {
		f.names = append(f.names, fixture.ClusterName(i))
		f.index[f.names[i]] = i
	}
	for i := range 2 {
		f.routes = append(f.routes, fixture.RouteName(i))
		f.routeIndex[f.routes[i]] = i
	}
	c := newClient(f, 0, nil)
	// What the first stream left: clusters, their endpoints, listeners
	// and routes held and subscribed.
	res := func(name, version string) deltaResource {
		return deltaResource{name: []byte(name), version: []byte(version)}
	}
	for _, r := range []*deltaResponse{
		{typeURL: cdsURL, resources: []deltaResource{res(fixture.ClusterName(0), "5"), res(fixture.ClusterName(1), "5")}},
		{typeURL: edsURL, resources: []deltaResource{res(fixture.ClusterName(0), "5"), res(fixture.ClusterName(1), "6")}},
		{typeURL: ldsURL, resources: []deltaResource{res(fixture.ListenerName(0), "5")}},
		{typeURL: rdsURL, resources: []deltaResource{res(fixture.RouteName(0), "7"), res(fixture.RouteName(1), "5")}},
	} {
		c.holdDelta(r)
	}
	addSubscribed(c.subscribed, []int{0, 1}, f.names)
	addSubscribed(c.rdsSubscribed, []int{0, 1}, f.routes)

	want := map[string][]string{edsURL: {fixture.ClusterName(0), fixture.ClusterName(1)}, rdsURL: {fixture.RouteName(0), fixture.RouteName(1)}}
	// Three streams in a row, each ending after its first request was
	// sent, then one that sends them all: every one asks for the same.
	for stream := 1; stream <= 4; stream++ {
		reqs, askLDS := c.deltaFirstRequests(c.presentedDelta())
		if askLDS {
			t.Errorf("stream %d: LDS left for later; a resuming client asks at once", stream)
		}
		got := map[string][]string{}
		var types []string
		for _, r := range reqs {
			types = append(types, r.GetTypeUrl())
			if len(r.GetResourceNamesSubscribe()) > 0 {
				got[r.GetTypeUrl()] = r.GetResourceNamesSubscribe()
			}
			if r.GetTypeUrl() != cdsURL && len(r.GetInitialResourceVersions()) == 0 {
				t.Errorf("stream %d: %s request presents nothing", stream, r.GetTypeUrl())
			}
		}
		if !slices.Equal(types, []string{cdsURL, edsURL, ldsURL, rdsURL}) {
			t.Fatalf("stream %d: first requests of %v, want CDS, EDS, LDS, RDS", stream, types)
		}
		for typ, names := range want {
			if !slices.Equal(got[typ], names) {
				t.Errorf("stream %d: %s subscribes %v, want %v", stream, typ, got[typ], names)
			}
		}
	}
}

// TestResumePresentsWhatWasApplied: a response is taken (its version held,
// to be presented on the next stream) before the requests it makes are
// sent, so a stream that ends on one of those sends leaves the client
// presenting the configuration it applied, as Envoy does (found by the
// chaos run, seed 6: a SotW client that applied CDS 1546, its stream
// ending as it asked for the new EDS names, presented 1541).
func TestResumePresentsWhatWasApplied(t *testing.T) {
	fail := func(*discoveryv3.DiscoveryRequest) error { return io.EOF }
	c := benchFleet(t)
	c.sotwVersions = map[string]string{}
	if err := benchSotW(c, &sotwState{askLDS: true}, &sotwResponse{}, sotwWire(t, cdsURL, 4), fail); err == nil {
		t.Fatal("onSotW: no error from a failed send")
	}
	if got := c.presentedSotW()[cdsURL][""]; got != "4" {
		t.Errorf("SotW presents CDS %q after its stream ended on the EDS request, want 4", got)
	}
	d := benchFleet(t)
	d.deltaVersions = map[string]map[string]string{}
	dfail := func(*discoveryv3.DeltaDiscoveryRequest) error { return io.EOF }
	if err := benchDelta(d, &deltaState{}, &deltaResponse{}, deltaWire(t, cdsURL, 6), dfail); err == nil {
		t.Fatal("onDelta: no error from a failed send")
	}
	if got := d.presentedDelta()[cdsURL][fixture.ClusterName(7)]; got != "6" {
		t.Errorf("delta presents %s at %q after its stream ended on the EDS subscription, want 6", fixture.ClusterName(7), got)
	}
}

// TestWorkerShares: the streams are split over the workers as evenly as
// they go, numbered on from one worker to the next (node ids and the
// spread over --xds-addr's addresses are the fleet's, not the
// worker's), with the connections in proportion, at least one each,
// and the open rate divided.
func TestWorkerShares(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Streams, cfg.Conns, cfg.OpenRate, cfg.Processes = 10, 5, 900, 3
	p := &processSet{cfg: cfg, workers: make([]*rpc.Client, 3)}
	var streams, conns []int
	var firsts []int
	for i := range 3 {
		c, first := p.share(i)
		if c.Processes != 1 || c.StartWorker != nil || c.OpenRate != 300 {
			t.Errorf("worker %d: processes %d, start worker set %v, open rate %v; want 1, false, 300", i, c.Processes, c.StartWorker != nil, c.OpenRate)
		}
		streams, conns, firsts = append(streams, c.Streams), append(conns, c.Conns), append(firsts, first)
	}
	if !slices.Equal(streams, []int{4, 3, 3}) || !slices.Equal(firsts, []int{0, 4, 7}) || !slices.Equal(conns, []int{2, 1, 1}) {
		t.Errorf("streams %v from %v on %v conns; want [4 3 3] from [0 4 7] on [2 1 1]", streams, firsts, conns)
	}
	cfg.Conns = 0
	p.cfg = cfg
	if c, _ := p.share(2); c.Conns != 0 {
		t.Errorf("one connection per stream: a worker got --conns %d, want 0", c.Conns)
	}
}
