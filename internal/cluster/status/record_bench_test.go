package status

import (
	"fmt"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// BenchmarkRecords builds and encodes the records of a status writer's
// round at its default budget: 1,280 nodes of one ADS stream each,
// holding two types (what a push at 10,000 streams makes it do every
// second).
func BenchmarkRecords(b *testing.B) {
	sums := make([]xdsstream.Summary, 1280)
	for i := range sums {
		sums[i] = xdsstream.Summary{ID: uint64(i + 1), NodeID: fmt.Sprintf("node-%05d", i), Group: "default", Protocol: "delta-ads",
			ConnectedAt: time.Unix(1700000000, 0), Types: map[string]xdsstream.TypeSummary{
				"cluster":  {VersionSent: "171", VersionAcked: "171", Resources: 200},
				"endpoint": {VersionSent: "184", VersionAcked: "184", Resources: 200},
			}}
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, r := range FromStreams("replica-a", sums) {
			if len(encode(r)) == 0 {
				b.Fatal("empty record")
			}
		}
	}
}

// BenchmarkCountRejected sets the rejection gauges of a writer holding
// 10,000 nodes that reject clusters, traced to a history of 32 records
// (what a round costs once a bad apply reached every node here).
func BenchmarkCountRejected(b *testing.B) {
	w := &Writer{metrics: newMetrics(), cfg: Config{RejectedApplies: DefaultRejectedApplies}, rejected: rejected{nodes: map[string]nodeRejections{}}}
	for i := range rejectedHistoryRecords {
		rev := int64(100 - i)
		w.rejected.history = append(w.rejected.history, store.HistoryRecord{ID: fmt.Sprintf("apply-%02d", rev), Revision: rev,
			Changes: []store.HistoryChange{{Type: "cluster", Scope: store.DefaultScope, Name: fmt.Sprint("c", i), Action: "changed"}}})
	}
	for i := range 10000 {
		w.rejected.nodes[fmt.Sprintf("node-%05d", i)] = nodeRejections{group: fmt.Sprint("g", i%10), types: map[string]TypeStatus{
			"cluster": {VersionAcked: "90", NackVersion: fmt.Sprint(91 + i%10), LastNack: "bad"}}}
	}
	b.ReportAllocs()
	for b.Loop() {
		w.countRejected()
	}
}
