package status_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/legation-io/legation/internal/cluster/status"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

func TestFromStreams(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 123456789, time.UTC)
	long := strings.Repeat("é", status.MaxNackBytes) // 2 bytes each
	sotw := []xdsstream.Summary{
		{ID: 1, NodeID: "envoy-1", Group: "edge", Protocol: "sotw-ads", ConnectedAt: t0.Add(time.Minute), Types: map[string]xdsstream.TypeSummary{
			"cluster":  {VersionSent: "10", VersionAcked: "10", Resources: 2},
			"listener": {VersionSent: "10", VersionAcked: "9", NackVersion: "10", LastNack: long, Resources: 1},
		}},
		// An older stream of the same node, being abandoned: its cluster
		// state loses to the newer stream's.
		{ID: 2, NodeID: "envoy-1", Group: "edge", Protocol: "sotw-cluster", ConnectedAt: t0, Types: map[string]xdsstream.TypeSummary{
			"cluster": {VersionSent: "8", VersionAcked: "8", Resources: 1},
		}},
		{ID: 3, Protocol: "sotw-ads", ConnectedAt: t0}, // no request yet: no node id
		{ID: 4, NodeID: "grpc-1", Protocol: "sotw-listener", ConnectedAt: t0, Types: map[string]xdsstream.TypeSummary{
			"listener": {},
		}},
	}
	dl := []xdsstream.Summary{
		{ID: 1, NodeID: "envoy-1", Group: "edge", Protocol: "delta-ads", ConnectedAt: t0.Add(2 * time.Minute), Types: map[string]xdsstream.TypeSummary{
			"endpoint": {VersionSent: "11", VersionAcked: "11", Resources: 5},
		}},
		{ID: 2, NodeID: "envoy-2", Group: "mesh", Protocol: "delta-ads", ConnectedAt: t0, Types: map[string]xdsstream.TypeSummary{
			"route": {VersionSent: "12", VersionAcked: "11", NackVersion: "12", LastNack: "bad route", Resources: 3},
		}},
	}
	want := []status.NodeStatus{
		{
			NodeID: "envoy-1", Group: "edge", Home: "a", Protocols: []string{"delta-ads", "sotw-ads", "sotw-cluster"},
			ConnectedSince: t0.Truncate(time.Millisecond), Streams: 3,
			Types: map[string]status.TypeStatus{
				"cluster":  {VersionSent: "10", VersionAcked: "10", Resources: 2},
				"listener": {VersionSent: "10", VersionAcked: "9", NackVersion: "10", LastNack: strings.Repeat("é", (status.MaxNackBytes-3)/2) + "...", Resources: 1},
				"endpoint": {VersionSent: "11", VersionAcked: "11", Resources: 5},
			},
		},
		{
			NodeID: "envoy-2", Group: "mesh", Home: "a", Protocols: []string{"delta-ads"}, ConnectedSince: t0.Truncate(time.Millisecond), Streams: 1,
			Types: map[string]status.TypeStatus{"route": {VersionSent: "12", VersionAcked: "11", NackVersion: "12", LastNack: "bad route", Resources: 3}},
		},
		{
			NodeID: "grpc-1", Home: "a", Protocols: []string{"sotw-listener"}, ConnectedSince: t0.Truncate(time.Millisecond), Streams: 1,
			Types: map[string]status.TypeStatus{"listener": {}},
		},
	}
	got := status.FromStreams("a", sotw, dl)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("FromStreams (-want +got):\n%s", diff)
	}
	if n := len(got[0].Types["listener"].LastNack); n > status.MaxNackBytes {
		t.Errorf("LastNack is %d bytes, over %d", n, status.MaxNackBytes)
	}
	if got := status.FromStreams("a", nil, nil); len(got) != 0 {
		t.Errorf("FromStreams of nothing = %v", got)
	}
}

func TestRead(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	const prefix = "/legation/"
	w := startWriter(t, c, prefix, "a", nil)
	w.src.set(node("b", "1"), node("a", "1"), node("ns/pod", "1"))
	w.sync()
	ctx := testbase.Context(t)
	// Written by another tool: not JSON, another node's record, no home.
	for k, v := range map[string]string{
		"garbage":  "{not json",
		"other":    `{"node_id":"someone-else","home":"a"}`,
		"homeless": `{"node_id":"homeless"}`,
	} {
		if _, err := c.Put(ctx, status.Key(prefix, k), v); err != nil {
			t.Fatal(err)
		}
	}
	// Beside the status directory: not read.
	if _, err := c.Put(ctx, prefix+"statusx", "{}"); err != nil {
		t.Fatal(err)
	}

	recs, bad, err := status.Read(ctx, c, prefix)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.NodeID)
	}
	if diff := cmp.Diff([]string{"a", "b", "ns/pod"}, ids); diff != "" {
		t.Errorf("records read (-want +got):\n%s", diff)
	}
	var badKeys []string
	for _, b := range bad {
		badKeys = append(badKeys, b.Key)
		if !errors.Is(b.Err, status.ErrMalformed) {
			t.Errorf("bad record %s: %v does not wrap ErrMalformed", b.Key, b.Err)
		}
	}
	wantBad := []string{status.Key(prefix, "garbage"), status.Key(prefix, "homeless"), status.Key(prefix, "other")}
	if diff := cmp.Diff(wantBad, badKeys); diff != "" {
		t.Errorf("bad records (-want +got):\n%s", diff)
	}
	if listed, err := status.List(ctx, c, prefix); err != nil || len(listed) != 3 {
		t.Errorf("List = %d records, %v; want 3", len(listed), err)
	}

	got, err := status.Get(ctx, c, prefix, "ns/pod")
	if err != nil || got.NodeID != "ns/pod" || got.Home != "a" {
		t.Errorf("Get(ns/pod) = %+v, %v", got, err)
	}
	if _, err := status.Get(ctx, c, prefix, "nobody"); !errors.Is(err, status.ErrNotFound) {
		t.Errorf("Get(nobody) = %v, want ErrNotFound", err)
	}
	if _, err := status.Get(ctx, c, prefix, "garbage"); !errors.Is(err, status.ErrMalformed) {
		t.Errorf("Get(garbage) = %v, want ErrMalformed", err)
	}
}

func TestReadPages(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	const prefix = "/legation/"
	w := startWriter(t, c, prefix, "a", nil)
	var recs []status.NodeStatus
	for i := range 2500 { // three pages
		recs = append(recs, node(strings.Repeat("n", 1+i%7)+"-"+time.Duration(i).String(), "1"))
	}
	w.src.set(recs...)
	w.sync()
	got, bad, err := status.Read(testbase.Context(t), c, prefix)
	if err != nil || len(bad) != 0 {
		t.Fatalf("Read: %v, bad %v", err, bad)
	}
	if len(got) != len(recs) {
		t.Fatalf("read %d records, want %d", len(got), len(recs))
	}
	for i := 1; i < len(got); i++ {
		if got[i-1].NodeID >= got[i].NodeID {
			t.Fatalf("records out of order at %d: %q, %q", i, got[i-1].NodeID, got[i].NodeID)
		}
	}
}
