package wire

import (
	"fmt"
	"hash/maphash"
	"slices"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
)

// TestListsCollision: a list in the table under the hash of a request's
// names but with other names (a hash collision) is not taken: the names
// are decoded.
func TestListsCollision(t *testing.T) {
	want := []string{"collision-a", "collision-b"}
	b, err := proto.Marshal(&discoveryv3.DiscoveryRequest{ResourceNames: want})
	if err != nil {
		t.Fatal(err)
	}
	start, end, n, ok := namesRun(b)
	if !ok || n != 2 || end == 0 {
		t.Fatalf("namesRun = %d, %d, %d, %v", start, end, n, ok)
	}
	other, err := proto.Marshal(&discoveryv3.DiscoveryRequest{ResourceNames: []string{"collision-a", "collision-x"}})
	if err != nil {
		t.Fatal(err)
	}
	lists.mu.Lock()
	if lists.m == nil {
		lists.m = map[uint64]*list{}
	}
	lists.m[maphash.Bytes(listSeed, b[start:end])] = &list{run: string(other), names: []string{"collision-a", "collision-x"}}
	lists.mu.Unlock()
	var m discoveryv3.DiscoveryRequest
	if _, err := unmarshalRequest(b, &m); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.ResourceNames, want) {
		t.Errorf("names %q, want %q", m.ResourceNames, want)
	}
}

// TestListsStartOver: the lists table holds at most maxListed bytes;
// past that it starts over, and requests still decode right.
func TestListsStartOver(t *testing.T) {
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprintf("start-over-%d", i)
	}
	startedOver, last := false, 0
	for i := range maxListed/(len(names)*30) + 10 {
		names[0] = fmt.Sprintf("start-over-first-%d", i)
		b, err := proto.Marshal(&discoveryv3.DiscoveryRequest{ResourceNames: names})
		if err != nil {
			t.Fatal(err)
		}
		var m discoveryv3.DiscoveryRequest
		if _, err := unmarshalRequest(b, &m); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(m.ResourceNames, names) {
			t.Fatalf("request %d: names differ", i)
		}
		lists.mu.RLock()
		held := lists.bytes
		lists.mu.RUnlock()
		if held > maxListed {
			t.Fatalf("request %d: the table holds %d bytes, more than %d", i, held, maxListed)
		}
		startedOver = startedOver || held < last
		last = held
	}
	if !startedOver {
		t.Error("the table never started over")
	}
}
