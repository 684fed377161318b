package canary_test

import (
	"strings"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/cluster/canary"
	"github.com/legation-io/legation/internal/cluster/status"
	"github.com/legation-io/legation/internal/state/rollout"
)

// running is a running rollout of one cluster, begun at revision 100, as
// stored and read back.
func running(t *testing.T, scope, selector string, bake time.Duration, maxRej int, promote string) *rollout.Rollout {
	t.Helper()
	b := `{"id":"r1","scope":"` + scope + `","selector":"` + selector + `","bake":"` + bake.String() + `","maxRejections":` +
		string(rune('0'+maxRej)) + `,"promote":"` + promote + `","state":"running","by":"t","at":"` + time.Now().Add(-10*time.Second).Format(time.RFC3339Nano) +
		`","resources":[{"type":"cluster","name":"c1","base":5}]}`
	r, err := rollout.Parse([]byte(b), 100)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func node(id, group string, types map[string]status.TypeStatus) status.NodeStatus {
	return status.NodeStatus{NodeID: id, Group: group, Types: types}
}

// TestMeasure: canary nodes are counted acked, pending or rejecting by
// their state on the rollout's types since it began; nodes the selector
// does not pick are others; nodes of another group than the rollout's
// scope are not counted.
func TestMeasure(t *testing.T) {
	r := running(t, "edge", "node:canary-*", time.Second, 0, rollout.PromoteAuto)
	recs := []status.NodeStatus{
		node("canary-acked", "edge", map[string]status.TypeStatus{"cluster": {VersionSent: "101", VersionAcked: "101"}}),
		node("canary-pending", "edge", map[string]status.TypeStatus{"cluster": {VersionSent: "102", VersionAcked: "90"}}),
		node("canary-nack", "edge", map[string]status.TypeStatus{"cluster": {VersionSent: "101", VersionAcked: "90", NackVersion: "101", LastNack: "bad cluster"}}),
		node("canary-old-nack", "edge", map[string]status.TypeStatus{"cluster": {VersionSent: "99", VersionAcked: "90", NackVersion: "99"}}),
		node("canary-untouched", "edge", map[string]status.TypeStatus{"listener": {VersionSent: "105", NackVersion: "105"}}),
		node("stable-1", "edge", nil),
		node("canary-elsewhere", "core", map[string]status.TypeStatus{"cluster": {VersionSent: "101", NackVersion: "101"}}),
	}
	p := canary.Measure(r, recs)
	want := canary.Progress{Canary: 5, Others: 1, Acked: 1, Pending: 1, Rejecting: 1}
	if p.Canary != want.Canary || p.Others != want.Others || p.Acked != want.Acked || p.Pending != want.Pending || p.Rejecting != want.Rejecting {
		t.Errorf("Measure = %+v, want counts %+v", p, want)
	}
	if len(p.RejectingNodes) != 1 || p.RejectingNodes[0] != "canary-nack" || p.Messages[0] != "cluster: bad cluster" || p.PendingNodes[0] != "canary-pending" {
		t.Errorf("named nodes %+v", p)
	}
}

// TestDecide: more rejections than allowed abort (whatever the bake);
// an automatic rollout is promoted once baked with none pending; a
// manual one, one still baking, or one with a pending node is left.
func TestDecide(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name    string
		bake    time.Duration
		maxRej  int
		promote string
		p       canary.Progress
		want    string
	}{
		{"rejected", time.Hour, 0, rollout.PromoteAuto, canary.Progress{Canary: 3, Rejecting: 1, Messages: []string{"cluster: no"}}, "abort"},
		{"rejections allowed", time.Second, 1, rollout.PromoteAuto, canary.Progress{Canary: 3, Acked: 2, Rejecting: 1}, "promote"},
		{"baked", time.Second, 0, rollout.PromoteAuto, canary.Progress{Canary: 3, Acked: 3}, "promote"},
		{"no canary node", time.Second, 0, rollout.PromoteAuto, canary.Progress{}, "promote"},
		{"baking", time.Hour, 0, rollout.PromoteAuto, canary.Progress{Canary: 3, Acked: 3}, ""},
		{"pending", time.Second, 0, rollout.PromoteAuto, canary.Progress{Canary: 3, Acked: 2, Pending: 1}, ""},
		{"manual", time.Second, 0, rollout.PromoteManual, canary.Progress{Canary: 3, Acked: 3}, ""},
		{"manual rejected", time.Second, 0, rollout.PromoteManual, canary.Progress{Canary: 3, Rejecting: 1}, "abort"},
	} {
		r := running(t, "default", "10%", tc.bake, tc.maxRej, tc.promote)
		v := canary.Decide(r, tc.p, now)
		if v.Action != tc.want {
			t.Errorf("%s: Decide = %+v, want %q", tc.name, v, tc.want)
		}
		if v.Action == "abort" && !strings.Contains(v.Reason, "rejected it") {
			t.Errorf("%s: abort reason %q", tc.name, v.Reason)
		}
	}
}
