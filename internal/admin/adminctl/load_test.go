package adminctl

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/cluster/lrs"
	"github.com/legation-io/legation/internal/testkit/storetest"
)

// putWindow writes w as replica w.Replica publishes it.
func (h *harness) putWindow(w lrs.Window) {
	h.t.Helper()
	b, err := lrs.Encode(w)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if _, err := h.env.client.Put(ctx, lrs.Key(h.prefix, w.Replica, w.Start), string(b)); err != nil {
		h.t.Fatal(err)
	}
}

// xdsadmin load sums two replicas' windows: table, JSON, by locality and
// by node; a malformed window is skipped with a warning naming its key;
// a bad --by or --windows is an error naming the flag.
func TestLoad(t *testing.T) {
	h := startEnv(t, storetest.Options{}).newHarness(t)
	if out := h.mustRun("load"); !strings.Contains(out, "no load reported") {
		t.Errorf("load with no windows: %q, want \"no load reported\"", out)
	}
	// The interval that closed last: recent enough to be shown.
	t0 := time.Now().Truncate(10 * time.Second).Add(-10 * time.Second)
	for _, w := range []lrs.Window{
		{Replica: "r1", Start: t0, End: t0.Add(10 * time.Second), Rows: []lrs.Row{
			{Cluster: "web", Locality: "eu/a/", Node: "n1", Issued: 100, Succeeded: 90, Errored: 10},
			{Cluster: "web", Node: "n1", Dropped: 20, DroppedBy: map[string]uint64{"throttle": 20}},
		}},
		{Replica: "r2", Start: t0, End: t0.Add(10 * time.Second), Rows: []lrs.Row{
			{Cluster: "web", Locality: "eu/b/", Node: "n2", Identity: "spiffe://example.org/n2", Issued: 100, Succeeded: 100},
			{Cluster: "api", Locality: "eu/b/", Node: "n2", Issued: 5, Succeeded: 5},
		}},
	} {
		h.putWindow(w)
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if _, err := h.env.client.Put(ctx, lrs.Key(h.prefix, "r3", t0), "{bad"); err != nil {
		t.Fatal(err)
	}

	// By default the last 3 intervals: the one window and two before it
	// in which nothing was reported.
	r := h.run("load", "web")
	if r.code != 0 {
		t.Fatalf("load web: %s", r)
	}
	rows := fields(r.stdout)
	if len(rows) != 2 || rows[1][0] != "web" || rows[1][1] != "30s" || rows[1][2] != "6.67" || rows[1][3] != "5.00%" || rows[1][4] != "0.67" || rows[1][5] != "200" || rows[1][10] != "2" {
		t.Errorf("load web table:\n%s\nwant web over 30s, 6.67 rps, 5.00%% errors, 0.67 drops/s, 200 issued, 2 replicas", r.stdout)
	}
	rows = fields(h.mustRun("load", "web", "--windows", "1"))
	if len(rows) != 2 || rows[1][1] != "10s" || rows[1][2] != "20.00" || rows[1][4] != "2.00" {
		t.Errorf("load web --windows 1: %v, want 20.00 rps and 2.00 drops/s over 10s", rows)
	}
	if !strings.Contains(r.stderr, "warning: skipped malformed load window") || !strings.Contains(r.stderr, lrs.Key(h.prefix, "r3", t0)) {
		t.Errorf("load stderr %q: want a warning naming the malformed window's key", r.stderr)
	}

	var sums []lrs.Summary
	if err := json.Unmarshal([]byte(h.mustRun("load", "--by", "locality", "-o", "json")), &sums); err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, s := range sums {
		got[s.Cluster+" "+s.Locality] = s.Issued + s.Dropped
	}
	want := map[string]uint64{"api eu/b/": 5, "web -": 20, "web eu/a/": 100, "web eu/b/": 100}
	if len(got) != len(want) {
		t.Errorf("by locality: %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("by locality %q: %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	byNode := map[string]string{}
	for _, row := range fields(h.mustRun("load", "--by", "node")) {
		byNode[row[0]+" "+row[1]] = row[2]
	}
	if byNode["CLUSTER NODE"] != "IDENTITY" || byNode["web n2"] != "spiffe://example.org/n2" || byNode["web n1"] != "-" {
		t.Errorf("load --by node: %v, want NODE and IDENTITY columns: n2 reported by spiffe://example.org/n2, n1 by no identity (-)", byNode)
	}
	if out := h.mustRun("load", "nope", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("load of an unknown cluster -o json: %q, want []", out)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"load", "--by", "zone"}, "--by"},
		{[]string{"load", "--windows", "0"}, "--windows"},
		{[]string{"load", "a", "b"}, "arg"},
	} {
		if r := h.run(tc.args...); r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("xdsadmin %v: %s\nwant an error naming %s", tc.args, r, tc.want)
		}
	}
}
