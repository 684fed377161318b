package delta_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// TestSubscriptionBudget is the memory probe of a hostile client: one
// delta ADS stream subscribing names of 1,000 bytes, 1,000 a request, on
// type after type (10 types of 10,000 such names took a replica from 68
// to 445 MB). It is refused with RESOURCE_EXHAUSTED naming
// --max-subscribed-bytes-per-stream once its names over all types cost
// more than 4 MiB, about 3,900 of them, and the server's heap grows by
// no more than a few times that.
func TestSubscriptionBudget(t *testing.T) {
	e := newEnv(t)
	s := e.deltaADS(t)
	before := heapInUse()
	types := []*resource.Type{resource.Cluster, resource.Endpoint, resource.Listener, resource.Route, resource.Secret}
	sent, refused := 0, error(nil)
send:
	for _, typ := range types {
		for chunk := range 10 {
			names := make([]string, 1000)
			for i := range names {
				names[i] = fmt.Sprintf("%s-%d-%05d-", typ.Name, chunk, i) + strings.Repeat("x", 980)
			}
			s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: xdstest.Node("prober", "c1"), TypeUrl: typ.URL, ResourceNamesSubscribe: names})
			sent += len(names)
			select {
			case res := <-s.Recv():
				if res.Err != nil {
					refused = res.Err
					break send
				}
				s.Ack(res.Resp)
			case <-time.After(xdstest.Timeout):
				t.Fatalf("%s chunk %d: no answer", typ.Name, chunk)
			}
		}
	}
	if status.Code(refused) != codes.ResourceExhausted || !strings.Contains(refused.Error(), "--max-subscribed-bytes-per-stream") {
		t.Fatalf("after %d names: %v, want RESOURCE_EXHAUSTED naming --max-subscribed-bytes-per-stream", sent, refused)
	}
	if sent > 5000 {
		t.Errorf("refused after %d names of 1,000 bytes, want within the first 5,000 (4 MiB)", sent)
	}
	if grown := heapInUse() - before; grown > 64<<20 {
		t.Errorf("the server's heap grew by %d MiB, want at most 64", grown>>20)
	}
	if got := xdstest.CounterSum(t, e.reg, "legation_delta_limit_hits_total", "limit", "subscribed_bytes"); got != 1 {
		t.Errorf(`legation_delta_limit_hits_total{limit="subscribed_bytes"} = %v, want 1`, got)
	}
}

// heapInUse is the process's heap in use after a collection.
func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}
