package chaos

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/tools/chaos/record"
	legationv1 "github.com/legation-io/legation/proto/legation/v1"
)

const (
	cds = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	eds = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
)

// body is the bytes of resource name of type typ ("cluster", "endpoint")
// as written at revision rev: each revision's differ.
func body(typ, name string, rev int64) *anypb.Any {
	var m proto.Message
	rt := resource.Cluster
	switch typ {
	case "cluster":
		m = &clusterv3.Cluster{Name: name, AltStatName: strconv.FormatInt(rev, 10)}
	case "endpoint":
		m, rt = &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: make([]*endpointv3.LocalityLbEndpoints, rev)}, resource.Endpoint
	}
	a, err := resource.Marshal(rt, m)
	if err != nil {
		panic(err)
	}
	return a
}

// envelope is the stored value of body(typ, name, rev).
func envelope(t *testing.T, typ, name string, rev int64) []byte {
	t.Helper()
	b, err := proto.Marshal(&legationv1.Envelope{Body: body(typ, name, rev)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// testHistory is the history of the self-test, written as a history
// file and read back:
//
//	rev 2: clusters a, b and their endpoints (one apply)
//	rev 3: endpoints a changed; cluster c in group g
//	rev 4: cluster b and endpoints b deleted
//	rev 5: endpoints a changed
//	rev 6: nothing under the prefix (progress)
func testHistory(t *testing.T) *History {
	t.Helper()
	const p = "/legation/resources/"
	put := func(rev int64, path string) HistoryRecord {
		typ, _, _ := strings.Cut(path, "/")
		return HistoryRecord{Kind: HistPut, Rev: rev, Key: p + path, Value: envelope(t, typ, path[strings.LastIndex(path, "/")+1:], rev), Mod: rev}
	}
	del := func(rev int64, path string) HistoryRecord {
		return HistoryRecord{Kind: HistDelete, Rev: rev, Key: p + path}
	}
	recs := []HistoryRecord{
		{Kind: HistHeader, Rev: 1, Prefix: p},
		put(2, "cluster/default/a"), put(2, "cluster/default/b"), put(2, "endpoint/default/a"), put(2, "endpoint/default/b"),
		put(3, "endpoint/default/a"), put(3, "cluster/g/c"),
		del(4, "cluster/default/b"), del(4, "endpoint/default/b"),
		put(5, "endpoint/default/a"),
		{Kind: HistProgress, Rev: 6},
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for i := range recs {
		if err := enc.Encode(&recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	h, err := ReadHistory(&b)
	if err != nil {
		t.Fatalf("ReadHistory: %v", err)
	}
	if h.Start != 1 || h.Last != 6 {
		t.Fatalf("history [%d, %d], want [1, 6]", h.Start, h.Last)
	}
	return h
}

var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// rec builds a recording; each step is one event.
type rec struct{ es []record.Event }

func (r *rec) start(client string, stream int64, mode string, presented map[string]map[string]string) *rec {
	r.es = append(r.es, record.Event{Kind: record.KindStart, Client: client, Stream: stream, Mode: mode, Presented: presented})
	return r
}

func (r *rec) end(client string, stream int64, mode string) *rec {
	r.es = append(r.es, record.Event{Kind: record.KindEnd, Client: client, Stream: stream, Mode: mode})
	return r
}

// resp adds a response; each item is a name (SotW), name@version
// (delta) or -name (delta, removed); a suffix #N gives it the bytes it
// has at revision N.
func (r *rec) resp(client string, stream int64, mode, typ, version string, items ...string) *rec {
	e := record.Event{Kind: record.KindResponse, Client: client, Stream: stream, Mode: mode, Type: typ, Version: version, Nonce: "n"}
	for _, it := range items {
		if name, ok := strings.CutPrefix(it, "-"); ok {
			e.Removed = append(e.Removed, name)
			continue
		}
		it, at, hashed := strings.Cut(it, "#")
		name, v, ok := strings.Cut(it, "@")
		if !ok {
			v = version
		}
		r := record.Resource{Name: name, Version: v}
		if hashed {
			rev, _ := strconv.ParseInt(at, 10, 64)
			typName := map[string]string{cds: "cluster", eds: "endpoint"}[typ]
			r.Hash = record.BodyHash(body(typName, name, rev).GetValue())
		}
		e.Resources = append(e.Resources, r)
	}
	r.es = append(r.es, e)
	return r
}

// events writes the recording through record.Writer and reads it back, so that
// lines and times are as in a file.
func (r *rec) events(t *testing.T) []record.Event {
	t.Helper()
	var b bytes.Buffer
	w := record.NewWriter(nopCloser{&b})
	for i := range r.es {
		e := r.es[i]
		e.Time = base.Add(time.Duration(i) * time.Second)
		w.Record(&e)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	es, err := record.ReadEvents(&b)
	if err != nil {
		t.Fatalf("ReadEvents: %v", err)
	}
	if len(es) != len(r.es) || es[len(es)-1].Line != len(es) {
		t.Fatalf("read %d events, want %d", len(es), len(r.es))
	}
	return es
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// good is a run without a violation: a SotW client that reconnects, a
// delta client that reconnects presenting what it holds, and a SotW
// client of group g.
func good() *rec {
	r := &rec{}
	r.start("s1", 1, record.ModeSotW, nil).
		resp("s1", 1, record.ModeSotW, cds, "2", "a", "b").
		resp("s1", 1, record.ModeSotW, eds, "2", "a", "b").
		resp("s1", 1, record.ModeSotW, eds, "3", "a#3").
		resp("s1", 1, record.ModeSotW, cds, "4", "a#2").
		resp("s1", 1, record.ModeSotW, eds, "5", "a").
		end("s1", 1, record.ModeSotW).
		start("s1", 2, record.ModeSotW, nil).
		resp("s1", 2, record.ModeSotW, cds, "5", "a").
		resp("s1", 2, record.ModeSotW, eds, "5", "a")
	r.start("d1", 1, record.ModeDelta, nil).
		resp("d1", 1, record.ModeDelta, cds, "2", "a@2", "b@2").
		resp("d1", 1, record.ModeDelta, eds, "2", "a@2", "b@2").
		resp("d1", 1, record.ModeDelta, eds, "3", "a@3").
		resp("d1", 1, record.ModeDelta, cds, "4", "-b").
		resp("d1", 1, record.ModeDelta, eds, "4", "-b").
		end("d1", 1, record.ModeDelta).
		start("d1", 2, record.ModeDelta, map[string]map[string]string{cds: {"a": "2"}, eds: {"a": "3"}}).
		resp("d1", 2, record.ModeDelta, eds, "5", "a@5#5")
	r.start("g-1", 1, record.ModeSotW, nil).
		resp("g-1", 1, record.ModeSotW, cds, "3", "a", "b", "c").
		resp("g-1", 1, record.ModeSotW, cds, "6", "a", "c")
	return r
}

func group(client string) string {
	if strings.HasPrefix(client, "g-") {
		return "g"
	}
	return ""
}

// TestCheckCatchesEachKind gives the checker a good recording and one bad
// recording per kind of violation: the good one yields none, each bad one
// exactly its kind.
func TestCheckCatchesEachKind(t *testing.T) {
	h := testHistory(t)
	documented := DocumentedExceptions()
	documented.Group = group
	heal := documented
	heal.Heal = base

	for _, tc := range []struct {
		name string
		r    *rec
		opts Options
		want []string // kinds, in order
	}{
		{"good", good(), heal, nil},
		{"backwards on a stream", (&rec{}).start("s1", 1, record.ModeSotW, nil).
			resp("s1", 1, record.ModeSotW, eds, "3", "a").
			resp("s1", 1, record.ModeSotW, eds, "2", "a", "b"), documented, []string{VersionBackwards}},
		{"backwards across a reconnect", (&rec{}).start("d1", 1, record.ModeDelta, nil).
			resp("d1", 1, record.ModeDelta, eds, "5", "a@5").
			end("d1", 1, record.ModeDelta).
			start("d1", 2, record.ModeDelta, map[string]map[string]string{eds: {"a": "5"}}).
			resp("d1", 2, record.ModeDelta, eds, "3", "a@3"), documented, []string{VersionBackwards}},
		{"delta reconnect below its last system version, not below what it presents", (&rec{}).start("d2", 1, record.ModeDelta, nil).
			resp("d2", 1, record.ModeDelta, eds, "2", "a@2", "b@2").
			resp("d2", 1, record.ModeDelta, eds, "4", "-b").
			end("d2", 1, record.ModeDelta).
			start("d2", 2, record.ModeDelta, map[string]map[string]string{eds: {"a": "2"}}).
			resp("d2", 2, record.ModeDelta, eds, "3", "a@3"), documented, nil},
		{"half an apply (SotW set)", (&rec{}).start("s1", 1, record.ModeSotW, nil).
			resp("s1", 1, record.ModeSotW, cds, "2", "a"), documented, []string{HalfApply}},
		{"half an apply (delta version)", (&rec{}).start("d1", 1, record.ModeDelta, nil).
			resp("d1", 1, record.ModeDelta, eds, "3", "a@2", "b@2"), documented, []string{HalfApply}},
		{"half an apply (SotW old bytes)", (&rec{}).start("s1", 1, record.ModeSotW, nil).
			resp("s1", 1, record.ModeSotW, eds, "3", "a#2"), documented, []string{HalfApply}},
		{"half an apply (SotW set, old bytes)", (&rec{}).start("g-1", 1, record.ModeSotW, nil).
			resp("g-1", 1, record.ModeSotW, cds, "3", "a#2", "b#2", "c#2"), documented, []string{HalfApply}},
		{"a deleted resource comes back", (&rec{}).start("s1", 1, record.ModeSotW, nil).
			resp("s1", 1, record.ModeSotW, eds, "5", "b"), documented, []string{Resurrected}},
		{"the same version twice", (&rec{}).start("s1", 1, record.ModeSotW, nil).
			resp("s1", 1, record.ModeSotW, eds, "2", "a", "b").
			resp("s1", 1, record.ModeSotW, eds, "2", "a", "b"), documented, []string{Duplicate}},
		{"new names at the same version, not allowed", (&rec{}).start("s1", 1, record.ModeSotW, nil).
			resp("s1", 1, record.ModeSotW, eds, "2", "a").
			resp("s1", 1, record.ModeSotW, eds, "2", "b"), Options{}, []string{Duplicate}},
		{"new names at the same version, documented", (&rec{}).start("s1", 1, record.ModeSotW, nil).
			resp("s1", 1, record.ModeSotW, eds, "2", "a").
			resp("s1", 1, record.ModeSotW, eds, "2", "b"), documented, nil},
		{"a name that does not exist, answered at the same version with its error only", (&rec{}).start("s1", 1, record.ModeSotW, nil).
			resp("s1", 1, record.ModeSotW, eds, "2", "a").
			resp("s1", 1, record.ModeSotW, eds, "2"), documented, nil},
		{"an empty response at the same version, not allowed", (&rec{}).start("s1", 1, record.ModeSotW, nil).
			resp("s1", 1, record.ModeSotW, eds, "2", "a").
			resp("s1", 1, record.ModeSotW, eds, "2"), Options{}, []string{Duplicate}},
		{"interim CDS, documented", (&rec{}).start("s1", 1, record.ModeSotW, nil).
			resp("s1", 1, record.ModeSotW, cds, "2", "a", "b").
			resp("s1", 1, record.ModeSotW, cds, "2", "a", "b").
			resp("s1", 1, record.ModeSotW, cds, "4", "a"), documented, nil},
		{"interims, then a set too big", (&rec{}).start("g-1", 1, record.ModeSotW, nil).
			resp("g-1", 1, record.ModeSotW, cds, "2", "a#2", "b#2").
			resp("g-1", 1, record.ModeSotW, cds, "2", "a#2", "b#2", "c#3").
			resp("g-1", 1, record.ModeSotW, cds, "2", "a#2", "b#2", "c#3", "x"), documented, []string{HalfApply}},
		{"a repeat that removes nothing is no interim", (&rec{}).start("s1", 1, record.ModeSotW, nil).
			resp("s1", 1, record.ModeSotW, cds, "4", "a").
			resp("s1", 1, record.ModeSotW, cds, "4", "a"), documented, []string{Duplicate}},
		{"interim CDS first on a resumed stream, documented", (&rec{}).
			start("g-1", 1, record.ModeSotW, map[string]map[string]string{cds: {"": "2"}}).
			resp("g-1", 1, record.ModeSotW, cds, "2", "a#2", "b#2", "c#3").
			resp("g-1", 1, record.ModeSotW, cds, "4", "a#2", "c#3"), Options{InterimCDS: true, Group: group}, nil},
		{"interim CDS, not allowed", (&rec{}).start("s1", 1, record.ModeSotW, nil).
			resp("s1", 1, record.ModeSotW, cds, "2", "a", "b").
			resp("s1", 1, record.ModeSotW, cds, "2", "a", "b").
			resp("s1", 1, record.ModeSotW, cds, "4", "a"), Options{}, []string{Duplicate}},
		{"delta resource resent on a stream", (&rec{}).start("d1", 1, record.ModeDelta, nil).
			resp("d1", 1, record.ModeDelta, eds, "3", "a@3").
			resp("d1", 1, record.ModeDelta, eds, "4", "a@3", "-b"), documented, []string{Duplicate}},
		{"a presented version resent", (&rec{}).start("d1", 1, record.ModeDelta, map[string]map[string]string{eds: {"a": "3"}}).
			resp("d1", 1, record.ModeDelta, eds, "3", "a@3"), documented, []string{Resent}},
		{"not converged", (&rec{}).start("s1", 1, record.ModeSotW, nil).
			resp("s1", 1, record.ModeSotW, cds, "4", "a").
			resp("s1", 1, record.ModeSotW, eds, "3", "a"), heal, []string{NotConverged}},
		{"converged too late", (&rec{}).start("s1", 1, record.ModeSotW, nil).
			resp("s1", 1, record.ModeSotW, cds, "5", "a"), func() Options { o := heal; o.ConvergeWithin = 500 * time.Millisecond; return o }(),
			[]string{NotConverged}},
		{"a version that is no revision", (&rec{}).start("s1", 1, record.ModeSotW, nil).
			resp("s1", 1, record.ModeSotW, cds, "abc", "a"), documented, []string{Malformed}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := CheckRun(h, tc.r.events(t), tc.opts)
			var got []string
			for _, v := range rep.Violations {
				got = append(got, v.Kind)
				t.Log(v)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("violations %v, want %v", got, tc.want)
			}
			if rep.Responses == 0 {
				t.Errorf("no response checked")
			}
		})
	}
}

// TestViolationNamesWhatIsInvolved checks that a violation prints the
// stream, the responses' lines and versions and the revisions.
func TestViolationNamesWhatIsInvolved(t *testing.T) {
	h := testHistory(t)
	r := (&rec{}).start("s1", 7, record.ModeSotW, nil).resp("s1", 7, record.ModeSotW, eds, "5", "b")
	vs := Check(h, r.events(t), DocumentedExceptions())
	if len(vs) != 1 {
		t.Fatalf("violations %v, want 1", vs)
	}
	got := vs[0].String()
	for _, want := range []string{"resurrected", "client s1 stream 7", "type endpoint", "line 2 (version 5)", "revisions [5 4]"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q does not name %q", got, want)
		}
	}
}

// TestReadErrorsNameTheLine checks that bad lines are reported with their
// line number.
func TestReadErrorsNameTheLine(t *testing.T) {
	_, err := record.ReadEvents(strings.NewReader(`{"kind":"start","client":"a","stream":1,"mode":"sotw"}` + "\n" + `{"kind":"response","client":"a","stream":1,"mode":"sotw"}` + "\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), "no type") {
		t.Errorf("ReadEvents: %v, want an error naming line 2 and the missing type", err)
	}
	_, err = ReadHistory(strings.NewReader(`{"kind":"header","rev":1,"prefix":"/p/resources/"}` + "\n" + `{"kind":"put","rev":2,"key":"/p/resources/cluster/default","mod":2}` + "\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("ReadHistory: %v, want an error naming line 2", err)
	}
}

// TestGapInHistory reads a history whose watch was compacted: a key
// missing from the state after the gap was deleted in it, a response in
// the gap is not checked, and one after it that carries the deleted key
// is caught.
func TestGapInHistory(t *testing.T) {
	const p = "/legation/resources/"
	recs := []HistoryRecord{
		{Kind: HistHeader, Rev: 1, Prefix: p},
		{Kind: HistPut, Rev: 2, Key: p + "cluster/default/a", Value: envelope(t, "cluster", "a", 2), Mod: 2},
		{Kind: HistPut, Rev: 2, Key: p + "cluster/default/b", Value: envelope(t, "cluster", "b", 2), Mod: 2},
		{Kind: HistGap, From: 2, Rev: 9},
		{Kind: HistState, Rev: 9, Key: p + "cluster/default/a", Value: envelope(t, "cluster", "a", 7), Mod: 7},
		{Kind: HistProgress, Rev: 10},
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for i := range recs {
		if err := enc.Encode(&recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	h, err := ReadHistory(&b)
	if err != nil {
		t.Fatalf("ReadHistory: %v", err)
	}
	if h.Known(5) || !h.Known(2) || !h.Known(9) || len(h.Gaps) != 1 {
		t.Errorf("known 2, 5, 9: %v %v %v, gaps %d; want true false true, 1", h.Known(2), h.Known(5), h.Known(9), len(h.Gaps))
	}
	r := (&rec{}).start("d1", 1, record.ModeDelta, nil).
		resp("d1", 1, record.ModeDelta, cds, "2", "a@2").
		resp("d1", 1, record.ModeDelta, cds, "5", "a@5").
		resp("d1", 1, record.ModeDelta, cds, "10", "a@7", "b@2")
	rep := CheckRun(h, r.events(t), DocumentedExceptions())
	if rep.Unknown != 1 || len(rep.Violations) != 1 || rep.Violations[0].Kind != Resurrected {
		t.Errorf("unknown %d, violations %v; want 1 unknown and one resurrected", rep.Unknown, rep.Violations)
	}
}

// TestCheckOverlays: while a canary rollout's overlay exists, a client it
// picks must hold the overlay's resource and every other client the
// default scope's; once the overlay is gone (the rollout aborted), the
// canary client the default scope's again. Canary content sent to
// another client, or a canary client answered with the default scope's
// resource at a version that holds the overlay, is a HalfApply.
//
//	rev 2: cluster a
//	rev 3: cluster a in overlay ~rollout.r1 (the rollout began)
//	rev 4: the overlay deleted (aborted)
func TestCheckOverlays(t *testing.T) {
	const p = "/legation/resources/"
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, r := range []HistoryRecord{
		{Kind: HistHeader, Rev: 1, Prefix: p},
		{Kind: HistPut, Rev: 2, Key: p + "cluster/default/a", Value: envelope(t, "cluster", "a", 2), Mod: 2},
		{Kind: HistPut, Rev: 3, Key: p + "cluster/~rollout.r1/a", Value: envelope(t, "cluster", "a", 3), Mod: 3},
		{Kind: HistDelete, Rev: 4, Key: p + "cluster/~rollout.r1/a"},
		{Kind: HistProgress, Rev: 5},
	} {
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
	}
	h, err := ReadHistory(&b)
	if err != nil {
		t.Fatal(err)
	}
	opts := DocumentedExceptions()
	opts.Overlays = func(client string) []string {
		if strings.HasPrefix(client, "canary-") {
			return []string{"~rollout.r1"}
		}
		return nil
	}
	for _, tc := range []struct {
		name string
		r    *rec
		want []string
	}{
		{"each side", (&rec{}).start("canary-1", 1, record.ModeSotW, nil).
			resp("canary-1", 1, record.ModeSotW, cds, "2", "a#2").
			resp("canary-1", 1, record.ModeSotW, cds, "3", "a#3").
			resp("canary-1", 1, record.ModeSotW, cds, "4", "a#2").
			start("other-1", 1, record.ModeSotW, nil).
			resp("other-1", 1, record.ModeSotW, cds, "3", "a#2"), nil},
		{"canary content outside the canary", (&rec{}).start("other-1", 1, record.ModeSotW, nil).
			resp("other-1", 1, record.ModeSotW, cds, "3", "a#3"), []string{HalfApply}},
		{"a canary node answered without its overlay", (&rec{}).start("canary-1", 1, record.ModeSotW, nil).
			resp("canary-1", 1, record.ModeSotW, cds, "3", "a#2"), []string{HalfApply}},
		{"delta: the overlay's version", (&rec{}).start("canary-2", 1, record.ModeDelta, nil).
			resp("canary-2", 1, record.ModeDelta, cds, "3", "a@3#3").
			resp("canary-2", 1, record.ModeDelta, cds, "4", "a@2#2"), nil},
	} {
		var kinds []string
		for _, v := range Check(h, tc.r.events(t), opts) {
			kinds = append(kinds, v.Kind)
		}
		if !slices.Equal(kinds, tc.want) {
			t.Errorf("%s: violations %v, want %v", tc.name, kinds, tc.want)
		}
	}
}
