package delta_test

import (
	"fmt"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// BenchmarkGlobCollection measures a LEDS collection of 10,000
// LbEndpoints (xRFC TP1 glob) followed by 100 raw delta streams: the
// set-up logs how long the first answer, every member, took to reach
// every stream; then each operation changes one member, alternately
// adding one and deleting it, and waits until every stream has the
// response, which must hold that member alone (or remove it alone).
// Reported: the bytes of one such response, and the time from the view
// holding a change to every stream holding its response.
func BenchmarkGlobCollection(b *testing.B) {
	const members, streams = 10000, 100
	e := newEnv(b)
	var puts []store.Put
	for i := range members {
		puts = append(puts, memberPut(b, fmt.Sprintf("%sbig/e%05d", ledsPrefix, i), uint32(10000+i%50000)))
	}
	for i := 0; i < len(puts); i += 100 {
		e.Apply(b, puts[i:min(i+100, len(puts))])
	}
	glob := ledsPrefix + "big/*"
	start := time.Now()
	ss := make([]*xdstest.DeltaStream, streams)
	for i := range ss {
		ss[i] = e.deltaLEDS(b)
		ss[i].Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: fmt.Sprintf("leds-%d", i)}, ResourceNamesSubscribe: []string{glob}})
	}
	for _, s := range ss {
		resp := s.ExpectType(resource.LbEndpoint)
		if len(resp.GetResources()) != members {
			b.Fatalf("first answer holds %d members, want %d", len(resp.GetResources()), members)
		}
		s.Ack(resp)
	}
	b.Logf("%d streams subscribed to a collection of %d members, all sent and ACKed in %s", streams, members, time.Since(start).Round(time.Millisecond))
	extra := ledsPrefix + "big/extra"
	var size int
	b.ResetTimer()
	for i := range b.N {
		// The write and its plan, which reads the whole store, are not
		// the server's: timed is the fan-out, from the view holding the
		// change to every stream holding the response.
		b.StopTimer()
		if i%2 == 0 {
			e.Apply(b, []store.Put{memberPut(b, extra, 9)})
		} else {
			e.Apply(b, nil, xdstest.Key(resource.LbEndpoint, extra))
		}
		b.StartTimer()
		for _, s := range ss {
			resp := s.ExpectType(resource.LbEndpoint)
			if got := len(resp.GetResources()) + len(resp.GetRemovedResources()); got != 1 {
				b.Fatalf("a change of one member sent %d resources and %d removals", len(resp.GetResources()), len(resp.GetRemovedResources()))
			}
			size = proto.Size(resp)
			s.Ack(resp)
		}
	}
	b.ReportMetric(float64(size), "bytes/response")
}
