package view

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/legation-io/legation/internal/state/keyspace"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/testkit/storetest"
	legationv1 "github.com/legation-io/legation/proto/legation/v1"
)

// benchValue is a realistic stored cluster: an EDS cluster in an envelope.
func benchValue(tb testing.TB, name string, ms int) []byte {
	body, err := resource.Marshal(resource.Cluster, &clusterv3.Cluster{
		Name:                 name,
		ConnectTimeout:       durationpb.New(time.Duration(ms) * time.Millisecond),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{ServiceName: name},
	})
	if err != nil {
		tb.Fatal(err)
	}
	b, err := proto.Marshal(&legationv1.Envelope{Body: body, WrittenBy: "bench"})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func benchName(i int) string { return fmt.Sprintf("cluster-%06d", i) }

// benchLoadedView returns a view holding n clusters at revision n, loaded
// without etcd.
func benchLoadedView(tb testing.TB, n int) *View {
	v, err := New(Config{Client: &clientv3.Client{}})
	if err != nil {
		tb.Fatal(err)
	}
	b := newBuilder(newSnapshot())
	b.initial = true
	for i := 0; i < n; i++ {
		key := v.root + "cluster/default/" + benchName(i)
		b.put(v, &mvccpb.KeyValue{Key: []byte(key), Value: benchValue(tb, benchName(i), 1), ModRevision: int64(i + 1), CreateRevision: int64(i + 1)}, key[len(v.root):])
	}
	b.rev = int64(n)
	v.publish(b.build(v))
	return v
}

// benchEvents makes count single-key revisions after rev, each updating one
// of the n clusters.
func benchEvents(tb testing.TB, v *View, n, count int, rev int64) []*clientv3.Event {
	evs := make([]*clientv3.Event, count)
	for i := range evs {
		name := benchName((i * 7919) % n)
		evs[i] = &clientv3.Event{Type: clientv3.EventTypePut, Kv: &mvccpb.KeyValue{
			Key: []byte(v.root + "cluster/default/" + name), Value: benchValue(tb, name, i%1000+2),
			ModRevision: rev + int64(i) + 1, CreateRevision: 1, Version: 2,
		}}
	}
	return evs
}

// BenchmarkViewApplyEvents measures watch events applied per second, 100
// revisions per watch response (a busy etcd), one snapshot per response.
func BenchmarkViewApplyEvents(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("resources=%d", n), func(b *testing.B) {
			v := benchLoadedView(b, n)
			const batch = 100
			evs := benchEvents(b, v, n, 100*batch, int64(n))
			b.ResetTimer()
			rev := int64(n)
			for i := 0; i < b.N; i++ {
				chunk := evs[(i%100)*batch : (i%100+1)*batch]
				for j, e := range chunk { // keep revisions increasing across rounds
					e.Kv.ModRevision = rev + int64(j) + 1
				}
				rev += batch
				v.handle(clientv3.WatchResponse{Events: chunk})
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkViewPublish measures one revision of one event applied and
// published as a snapshot: the latency a change adds before streams see it.
func BenchmarkViewPublish(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("resources=%d", n), func(b *testing.B) {
			v := benchLoadedView(b, n)
			evs := benchEvents(b, v, n, 1000, int64(n))
			rev := int64(n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				e := evs[i%len(evs)]
				rev++
				e.Kv.ModRevision = rev
				v.handle(clientv3.WatchResponse{Events: []*clientv3.Event{e}})
			}
		})
	}
}

// BenchmarkViewMemory reports the heap held per resource by a loaded view.
func BenchmarkViewMemory(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("resources=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				v := benchLoadedView(b, n)
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "bytes/resource")
				runtime.KeepAlive(v)
			}
		})
	}
}

// BenchmarkViewLoadFromEtcd measures the start-up load of 100,000 resources
// from a real embedded etcd with the paginated range.
func BenchmarkViewLoadFromEtcd(b *testing.B) {
	const n = 100_000
	e := storetest.Start(b, storetest.Options{MaxTxnOps: 10_000, MaxRequestBytes: 64 << 20})
	c := e.Client(b)
	ctx := context.Background()
	for i := 0; i < n; i += 10_000 {
		ops := make([]clientv3.Op, 0, 10_000)
		for j := i; j < i+10_000; j++ {
			ops = append(ops, clientv3.OpPut(keyspace.Resources.Key(keyspace.DefaultPrefix, "cluster/default/"+benchName(j)), string(benchValue(b, benchName(j), 1))))
		}
		if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		v, err := New(Config{Client: c})
		if err != nil {
			b.Fatal(err)
		}
		if err := v.load(ctx, false); err != nil {
			b.Fatal(err)
		}
		if got := v.Snapshot().Len(); got != n {
			b.Fatalf("loaded %d, want %d", got, n)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "resources/s")
}
