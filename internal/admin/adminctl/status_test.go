package adminctl

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/legation-io/legation/internal/cluster/status"
	"github.com/legation-io/legation/internal/testkit/storetest"
)

// statusWriter runs a status.Writer for replica on the harness's prefix,
// serving recs; it has written them when it returns, and stops when the
// test ends.
func (h *harness) statusWriter(replica string, recs ...status.NodeStatus) {
	h.t.Helper()
	cfg := status.DefaultConfig()
	cfg.Client = h.env.client
	cfg.Prefix = h.prefix
	cfg.Replica = replica
	cfg.Source = status.ListSource(func() []status.NodeStatus { return slices.Clone(recs) })
	cfg.Interval = time.Hour // written by Sync below
	cfg.ResyncInterval = time.Hour
	w, err := status.NewWriter(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx) //nolint:errcheck // revokes; the test's etcd is going away
	}()
	h.t.Cleanup(func() {
		cancel()
		<-done
	})
	sctx, scancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer scancel()
	if err := w.Sync(sctx); err != nil {
		h.t.Fatalf("status writer: %v", err)
	}
}

// nodeStatus is a record of id with the given types.
func nodeStatus(id, group string, types map[string]status.TypeStatus) status.NodeStatus {
	return status.NodeStatus{
		NodeID: id, Group: group, Protocols: []string{"sotw-ads"}, Streams: 1,
		ConnectedSince: time.Now().Add(-90 * time.Second).UTC().Truncate(time.Millisecond),
		Types:          types,
	}
}

func TestStatus(t *testing.T) {
	e := startEnv(t, storetest.Options{})
	synced := status.TypeStatus{VersionSent: "7", VersionAcked: "7", Resources: 2}
	recs := []status.NodeStatus{
		nodeStatus("envoy-1", "edge", map[string]status.TypeStatus{
			"listener": {VersionSent: "9", VersionAcked: "7", NackVersion: "9", LastNack: "Error adding/updating listener(s) l1:\n" + strings.Repeat("x", 100)},
			"cluster":  synced,
			"route":    {VersionSent: "9", VersionAcked: "7"},
		}),
		nodeStatus("team/envoy-2", "", map[string]status.TypeStatus{"endpoint": synced}),
	}
	fresh := nodeStatus("envoy-3", "edge", nil)
	fresh.Protocols = []string{"delta-ads", "sotw-cluster"}
	fresh.Streams = 2

	t.Run("table", func(t *testing.T) {
		h := e.newHarness(t)
		h.statusWriter("replica-a", recs...)
		h.statusWriter("replica-b", fresh)
		out := h.mustRun("status")
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		// The NACK column holds words; compare the fields before it, and
		// the age column by its form.
		want := [][]string{
			{"NODE", "GROUP", "HOME", "PROTOCOL", "CONNECTED", "TYPE", "SENT", "ACKED", "NACK"},
			{"envoy-1", "edge", "replica-a", "sotw-ads", "1m30s", "cluster", "7", "7", "-"},
			{"envoy-1", "edge", "replica-a", "sotw-ads", "1m30s", "listener", "9", "7", "9:"},
			{"envoy-1", "edge", "replica-a", "sotw-ads", "1m30s", "route", "9", "7", "-"},
			{"envoy-3", "edge", "replica-b", "delta-ads,sotw-cluster", "1m30s", "-", "-", "-", "-"},
			{"team/envoy-2", "-", "replica-a", "sotw-ads", "1m30s", "endpoint", "7", "7", "-"},
		}
		var got [][]string
		for _, l := range lines {
			f := strings.Fields(l)
			if len(f) > 9 {
				f = f[:9]
			}
			if len(f) > 4 && strings.HasPrefix(f[4], "1m3") {
				f[4] = "1m30s" // a second or two may pass
			}
			got = append(got, f)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("status table (-want +got):\n%s\n%s", diff, out)
		}
		nack := lines[2][strings.Index(lines[2], "9: "):]
		if !strings.HasPrefix(nack, "9: Error adding/updating listener(s) l1: xxx") || !strings.HasSuffix(nack, "...") || len(nack) > 3+maxNackColumn {
			t.Errorf("NACK column = %q, want the version and the message on one line, shortened", nack)
		}
	})

	t.Run("one node", func(t *testing.T) {
		h := e.newHarness(t)
		h.statusWriter("replica-a", recs...)
		got := fields(h.mustRun("status", "team/envoy-2"))
		if len(got) != 2 || got[1][0] != "team/envoy-2" || got[1][5] != "endpoint" {
			t.Errorf("status team/envoy-2:\n%v", got)
		}
	})

	t.Run("unknown node", func(t *testing.T) {
		h := e.newHarness(t)
		h.statusWriter("replica-a", recs...)
		r := h.run("status", "envoy-9")
		if r.code == 0 || !strings.Contains(r.stderr, `node "envoy-9" is not connected`) {
			t.Errorf("status envoy-9: %s", r)
		}
	})

	t.Run("json", func(t *testing.T) {
		h := e.newHarness(t)
		h.statusWriter("replica-a", recs...)
		var got []status.NodeStatus
		if err := json.Unmarshal([]byte(h.mustRun("status", "-o", "json")), &got); err != nil {
			t.Fatal(err)
		}
		var want []status.NodeStatus
		for _, r := range recs {
			r.Home = "replica-a"
			want = append(want, r)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("status -o json (-want +got):\n%s", diff)
		}

		var one status.NodeStatus
		if err := json.Unmarshal([]byte(h.mustRun("status", "envoy-1", "-o", "json")), &one); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want[0], one); diff != "" {
			t.Errorf("status envoy-1 -o json (-want +got):\n%s", diff)
		}
		if !strings.Contains(h.mustRun("status", "envoy-1", "-o", "yaml"), "last_nack: |-\n") {
			t.Error("status -o yaml does not hold the whole NACK message")
		}
	})

	t.Run("none and malformed", func(t *testing.T) {
		h := e.newHarness(t)
		if out := h.mustRun("status"); out != "no nodes are connected\n" {
			t.Errorf("status with no records: %q", out)
		}
		if out := h.mustRun("status", "-o", "json"); strings.TrimSpace(out) != "[]" {
			t.Errorf("status -o json with no records: %q", out)
		}
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		defer cancel()
		if _, err := h.env.client.Put(ctx, status.Key(h.prefix, "junk"), "{"); err != nil {
			t.Fatal(err)
		}
		h.statusWriter("replica-a", recs[1])
		r := h.run("status")
		if r.code != 0 || !strings.Contains(r.stderr, "warning: skipped malformed status record") || !strings.Contains(r.stdout, "team/envoy-2") {
			t.Errorf("status with a malformed record: %s", r)
		}
		if r := h.run("status", "junk"); r.code == 0 || !strings.Contains(r.stderr, "malformed") {
			t.Errorf("status junk: %s", r)
		}
	})
}

func TestFormatAge(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0s"},
		{42 * time.Second, "42s"},
		{5*time.Minute + 3*time.Second, "5m3s"},
		{3*time.Hour + 4*time.Minute + 5*time.Second, "3h4m"},
		{50 * time.Hour, "2d2h"},
	} {
		if got := formatAge(tc.d); got != tc.want {
			t.Errorf("formatAge(%s) = %q, want %q", tc.d, got, tc.want)
		}
	}
}
