package status_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/legation-io/legation/internal/cluster/status"
)

// FuzzDecodeStatus feeds Decode values as another tool might have written
// them: it must never panic, and what it accepts must read back the same
// once written again.
func FuzzDecodeStatus(f *testing.F) {
	good, _ := json.Marshal(node("n1", "7"))
	f.Add("n1", good)
	f.Add("n1", []byte(`{"home":"a","types":{"cluster":{"version_sent":"1","last_nack":"x"}}}`))
	f.Add("n1", []byte(`{"node_id":"n2","home":"a"}`))
	f.Add("n1", []byte(`{"home":"a","streams":-1}`))
	f.Add("n/1", []byte(`{"home":"a"} {}`))
	f.Add("", []byte(`null`))
	f.Add("n1", []byte(`{"home":"a","connected_since":"not a time"}`))
	f.Fuzz(func(t *testing.T, id string, value []byte) {
		ns, err := status.Decode(id, value)
		if err != nil {
			return
		}
		if ns.NodeID != id || ns.Home == "" {
			t.Fatalf("Decode accepted %+v for node %q", ns, id)
		}
		again, err := json.Marshal(ns)
		if err != nil {
			// A time outside years 0-9999 decodes but does not encode; the
			// writer never produces one.
			return
		}
		back, err := status.Decode(id, again)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v\n%s", err, again)
		}
		if diff := cmp.Diff(ns, back); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}
