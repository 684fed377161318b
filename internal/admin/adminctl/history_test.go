package adminctl

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testcerts"
)

// applyIDPattern is the form of an apply id: its time to the
// microsecond, then 6 hex digits.
var applyIDPattern = regexp.MustCompile(`^\d{8}-\d{6}\.\d{6}-[0-9a-f]{6}$`)

// TestHistory: each apply and delete is in the history, newest first,
// with its revisions, author, kind, message and changes, as a table and
// as JSON; TYPE, NAME and --scope keep the applies that changed those
// and only those changes; --history-keep bounds the records kept.
func TestHistory(t *testing.T) {
	t.Parallel()
	e := startEnv(t, storetest.Options{})
	h := e.newHarness(t)
	f := writeFile(t, "two.yaml", docs(clusterYAML("a", "1s"), clusterYAML("b", "1s")))
	var first applyOutput
	if err := json.Unmarshal([]byte(h.mustRun("apply", "-f", f, "-m", "two clusters", "-o", "json")), &first); err != nil {
		t.Fatal(err)
	}
	h.mustRun("apply", "-f", writeFile(t, "a.yaml", clusterYAML("a", "2s")), "--scope", "edge", "-m", "a for the edge")
	h.mustRun("delete", "cluster", "b", "-m", "b is gone")

	var entries []historyEntry
	if err := json.Unmarshal([]byte(h.mustRun("history", "-o", "json")), &entries); err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 {
		t.Fatalf("%d applies in the history, want 3", len(entries))
	}
	del, edge, two := entries[0], entries[1], entries[2]
	if two.ID != first.ApplyID || len(two.Revisions) != 1 || two.Revisions[0] != first.Revision {
		t.Errorf("first apply %s at %v, want %s at %d (as apply said)", two.ID, two.Revisions, first.ApplyID, first.Revision)
	}
	if two.Kind != "apply" || two.Message != "two clusters" || !strings.HasPrefix(two.By, "xdsadmin/") || !two.Undo || len(two.Changes) != 2 {
		t.Errorf("first apply %+v: want kind apply, its message, by xdsadmin, 2 changes, undoable", two)
	}
	if del.Kind != "delete" || del.Message != "b is gone" || len(del.Changes) != 1 || del.Changes[0] != (change{Action: "deleted", Type: "cluster", Scope: "default", Name: "b"}) {
		t.Errorf("delete %+v: want kind delete, its message, b deleted", del)
	}
	if edge.Revisions[0] <= two.Revisions[0] || del.Revisions[0] <= edge.Revisions[0] {
		t.Errorf("revisions %v, %v, %v: want newest first", del.Revisions, edge.Revisions, two.Revisions)
	}

	// diff takes apply ids for the revisions they wrote.
	var d diffOutput
	if err := json.Unmarshal([]byte(h.mustRun("diff", two.ID, del.ID, "-o", "json")), &d); err != nil {
		t.Fatal(err)
	}
	if d.From != two.Revisions[0] || d.To != del.Revisions[0] || d.Summary != (diffSummary{Created: 1, Deleted: 1}) {
		t.Errorf("diff of the first apply to the delete: from %d to %d, %+v; want from %d to %d, the edge's a created and b deleted",
			d.From, d.To, d.Summary, two.Revisions[0], del.Revisions[0])
	}

	table := fields(h.mustRun("history"))
	if got := strings.Join(table[0], " "); got != "ID REVISION TIME BY KIND CHANGES MESSAGE" {
		t.Errorf("table header %q", got)
	}
	if len(table) != 4 || table[1][0] != del.ID || table[1][1] != fmt.Sprint(del.Revisions[0]) || table[1][4] != "delete" ||
		!strings.Contains(strings.Join(table[1], " "), "0 created, 0 changed, 1 deleted b is gone") {
		t.Errorf("table rows %q", table[1:])
	}

	for _, tc := range []struct {
		args []string
		want []string // apply messages, newest first
	}{
		{[]string{"history", "cluster", "b"}, []string{"b is gone", "two clusters"}},
		{[]string{"history", "cds", "--scope", "edge"}, []string{"a for the edge"}},
		{[]string{"history", "endpoint"}, nil},
		{[]string{"history", "--limit", "2"}, []string{"b is gone", "a for the edge"}},
	} {
		var got []historyEntry
		if err := json.Unmarshal([]byte(h.mustRun(append(tc.args, "-o", "json")...)), &got); err != nil {
			t.Fatal(err)
		}
		var msgs []string
		for _, e := range got {
			msgs = append(msgs, e.Message)
			for _, c := range e.Changes {
				if len(tc.args) > 2 && tc.args[2] == "b" && c.Name != "b" {
					t.Errorf("%v: change %+v of another resource", tc.args, c)
				}
			}
		}
		if strings.Join(msgs, "|") != strings.Join(tc.want, "|") {
			t.Errorf("%v: applies %q, want %q", tc.args, msgs, tc.want)
		}
	}
	if out := h.mustRun("history", "endpoint"); out != "no applies in the history\n" {
		t.Errorf("an empty history: %q", out)
	}

	h.mustRun("apply", "-f", f, "--history-keep", "2")
	if err := json.Unmarshal([]byte(h.mustRun("history", "-o", "json")), &entries); err != nil || len(entries) != 2 {
		t.Errorf("after an apply with --history-keep 2: %d applies, %v; want 2", len(entries), err)
	}
}

// TestHistoryBadInput: bad flags and arguments are refused, naming what
// is wrong, and nothing is written.
func TestHistoryBadInput(t *testing.T) {
	t.Parallel()
	e := startEnv(t, storetest.Options{})
	h := e.newHarness(t)
	f := writeFile(t, "c.yaml", clusterYAML("c", "1s"))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"history", "--limit", "-1"}, "--limit -1: must not be negative"},
		{[]string{"history", "no-such-type"}, "no-such-type"},
		{[]string{"history", "--scope", "Bad Scope"}, "--scope"},
		{[]string{"history", "cluster", "a", "b"}, "accepts between 0 and 2 arg(s), received 3"},
		{[]string{"apply", "-f", f, "-m", "two\nlines"}, "--message: holds a control character"},
		{[]string{"apply", "-f", f, "-m", strings.Repeat("x", 1025)}, "--message: 1025 bytes, more than 1024"},
		{[]string{"apply", "-f", f, "--history-keep", "0"}, "--history-keep 0: must be at least 1"},
		{[]string{"delete", "cluster", "c", "-m", "\x00"}, "--message: holds a control character"},
	} {
		r := h.run(tc.args...)
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q: %s\nwant a failure naming %q", tc.args, r, tc.want)
		}
	}
	if got := h.list(); len(got) != 0 {
		t.Errorf("%d resources written by refused commands", len(got))
	}
}

// TestEtcdIdentity: the history's author names etcd's user: the
// username given, else the client certificate's common name, else
// nothing.
func TestEtcdIdentity(t *testing.T) {
	ca, err := testcerts.NewCA(t.TempDir(), "ca")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue(t.TempDir(), "ops-admin", testcerts.Options{CommonName: "ops-admin"})
	if err != nil {
		t.Fatal(err)
	}
	kp, err := cert.TLS()
	if err != nil {
		t.Fatal(err)
	}
	withCert := &tls.Config{Certificates: []tls.Certificate{kp}}
	for _, tc := range []struct {
		user string
		tc   *tls.Config
		want string
	}{
		{"alice", withCert, " as etcd user alice"},
		{"", withCert, " as etcd user ops-admin"},
		{"", &tls.Config{}, ""},
		{"", nil, ""},
	} {
		if got := etcdIdentity(tc.user, tc.tc); got != tc.want {
			t.Errorf("etcdIdentity(%q, cert %v) = %q, want %q", tc.user, tc.tc != nil, got, tc.want)
		}
	}
}
