package authz

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testbase"
)

const (
	// defaultTestTimeout bounds what must happen.
	defaultTestTimeout = testbase.Timeout
	// revocationTimeout bounds how long a revocation may take to reach a
	// watcher: the promise is "a second or two".
	revocationTimeout = 2 * time.Second
)

var prefixSeq struct {
	sync.Mutex
	n int
}

// newPrefix returns a prefix no other test uses.
func newPrefix() string {
	prefixSeq.Lock()
	defer prefixSeq.Unlock()
	prefixSeq.n++
	return fmt.Sprintf("/test%d/", prefixSeq.n)
}

func TestKey(t *testing.T) {
	if got, want := Key("/legation/", edgeID), "/legation/authz/spiffe:%2F%2Fexample.org%2Fns%2Fedge%2Fsa%2Fenvoy"; got != want {
		t.Errorf("Key = %q, want %q", got, want)
	}
	if got, want := Key("/legation/", "cn:legacy envoy"), "/legation/authz/cn:legacy%20envoy"; got != want {
		t.Errorf("Key = %q, want %q", got, want)
	}
	if got, want := Key("/legation/", "dns:envoy-7.mesh.example.org"), "/legation/authz/dns:envoy-7.mesh.example.org"; got != want {
		t.Errorf("Key = %q, want %q", got, want)
	}
	if got, want := Dir("/legation/"), "/legation/authz/"; got != want {
		t.Errorf("Dir = %q, want %q", got, want)
	}
}

func TestDecode(t *testing.T) {
	const p = "/p/"
	good := `{"identity":"spiffe://example.org/a","nodes":["n-*"],"groups":["g"],"admin":true}`
	if r, err := Decode(p, Key(p, "spiffe://example.org/a"), []byte(good)); err != nil {
		t.Fatal(err)
	} else if want := (Rule{Identity: "spiffe://example.org/a", Nodes: []string{"n-*"}, Groups: []string{"g"}, Admin: true}); !cmp.Equal(r, want) {
		t.Errorf("Decode = %+v, want %+v", r, want)
	}
	for _, tt := range []struct {
		name, key, value, want string
	}{
		{"not JSON", Key(p, "cn:a"), "not json", "invalid character"},
		{"two values", Key(p, "cn:a"), `{"identity":"cn:a","nodes":["n"]} {}`, "more than one JSON value"},
		{"unknown field", Key(p, "cn:a"), `{"identity":"cn:a","nodes":["n"],"node":"x"}`, `unknown field "node"`},
		{"invalid rule", Key(p, "cn:a"), `{"identity":"cn:a","nodes":["n\\"]}`, "trailing backslash"},
		{"grants nothing", Key(p, "cn:a"), `{"identity":"cn:a"}`, "grants nothing"},
		{"key of another identity", Key(p, "cn:b"), `{"identity":"cn:a","nodes":["n"]}`, `holds the rule of identity "cn:a"`},
		{"unescaped key", p + "authz/spiffe://example.org/a", `{"identity":"spiffe://example.org/a","nodes":["n"]}`, "holds the rule of identity"},
		{"outside the directory", "/q/authz/cn:a", `{"identity":"cn:a","nodes":["n"]}`, "is not under"},
		{"untyped identity", Key(p, "envoy-7.mesh.example.org"), `{"identity":"envoy-7.mesh.example.org","nodes":["n"]}`,
			`key "/p/authz/envoy-7.mesh.example.org": identity "envoy-7.mesh.example.org": identity does not say its kind`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(p, tt.key, []byte(tt.value))
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Decode = %v, want ErrMalformed with %q", err, tt.want)
			}
		})
	}
}

func TestGrantListRevoke(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	ctx := testbase.Context(t)
	prefix := newPrefix()

	for _, r := range testRules() {
		if err := Grant(ctx, c, prefix, r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := List(ctx, c, prefix)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := NewTable(testRules(), Options{})
	if diff := cmp.Diff(want.Rules(), got); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}

	t.Run("stored form", func(t *testing.T) {
		resp, err := c.Get(ctx, Key(prefix, edgeID))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("get %s: %v %v", Key(prefix, edgeID), resp, err)
		}
		if got, want := string(resp.Kvs[0].Value), `{"identity":"spiffe://example.org/ns/edge/sa/envoy","nodes":["edge-*","gw-1"],"groups":["edge","canary-?"]}`; got != want {
			t.Errorf("value = %s, want %s", got, want)
		}
	})

	t.Run("grant replaces", func(t *testing.T) {
		r := Rule{Identity: dnsID, Nodes: []string{"mesh-2"}, Admin: true}
		prev, replaced, err := Replace(ctx, c, prefix, r)
		if err != nil {
			t.Fatal(err)
		}
		if want := testRules()[1]; !replaced || !cmp.Equal(prev, want) {
			t.Errorf("Replace = %+v, %v; want %+v, true", prev, replaced, want)
		}
		if _, replaced, err := Replace(ctx, c, prefix, Rule{Identity: "cn:new", Nodes: []string{"n"}}); err != nil || replaced {
			t.Errorf("Replace of a new identity = %v, %v; want false, nil", replaced, err)
		}
		if _, err := Revoke(ctx, c, prefix, "cn:new"); err != nil {
			t.Fatal(err)
		}
		rules, err := List(ctx, c, prefix)
		if err != nil {
			t.Fatal(err)
		}
		if len(rules) != len(testRules()) || !cmp.Equal(rules[1], r) { // after cnID
			t.Errorf("after replacing: %+v", rules)
		}
	})

	t.Run("invalid rules write nothing", func(t *testing.T) {
		before, err := c.Get(ctx, "/no-such-key")
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []Rule{
			{Identity: "spiffe://Example.org/x", Nodes: []string{"n"}},
			{Identity: "cn:x", Nodes: []string{`n\`}},
			{Identity: "cn:x"},
			{Identity: "x.example.org", Nodes: []string{"n"}},
			{Identity: "", Nodes: []string{"n"}},
		} {
			if err := Grant(ctx, c, prefix, r); err == nil {
				t.Errorf("Grant(%+v) succeeded", r)
			}
		}
		if err := Grant(ctx, c, "no-slash", Rule{Identity: "cn:x", Nodes: []string{"n"}}); err == nil {
			t.Error("Grant with a bad prefix succeeded")
		}
		after, err := c.Get(ctx, "/no-such-key")
		if err != nil {
			t.Fatal(err)
		}
		if after.Header.Revision != before.Header.Revision {
			t.Errorf("etcd revision moved from %d to %d", before.Header.Revision, after.Header.Revision)
		}
	})

	t.Run("revoke", func(t *testing.T) {
		existed, err := Revoke(ctx, c, prefix, edgeID)
		if err != nil || !existed {
			t.Fatalf("Revoke(%q) = %v, %v; want true, nil", edgeID, existed, err)
		}
		existed, err = Revoke(ctx, c, prefix, edgeID)
		if err != nil || existed {
			t.Fatalf("Revoke again = %v, %v; want false, nil", existed, err)
		}
		rules, err := List(ctx, c, prefix)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rules {
			if r.Identity == edgeID {
				t.Errorf("revoked rule still listed")
			}
		}
	})

	t.Run("read reports malformed values", func(t *testing.T) {
		putRaw(t, c, prefix+"authz/junk", "junk")
		rules, bad, rev, err := Read(ctx, c, prefix)
		if err != nil {
			t.Fatal(err)
		}
		if len(bad) != 1 || bad[0].Key != prefix+"authz/junk" || !errors.Is(bad[0].Err, ErrMalformed) || bad[0].ModRevision == 0 || rev < bad[0].ModRevision {
			t.Errorf("Read bad = %+v at %d", bad, rev)
		}
		if listed, _ := List(ctx, c, prefix); !cmp.Equal(listed, rules) {
			t.Errorf("List = %+v, Read = %+v", listed, rules)
		}
	})
}

func putRaw(t *testing.T, c *clientv3.Client, key, value string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	resp, err := c.Put(ctx, key, value)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}
