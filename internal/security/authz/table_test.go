package authz

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	edgeID  = "spiffe://example.org/ns/edge/sa/envoy"
	otherID = "spiffe://example.org/ns/other/sa/envoy"
	adminID = "spiffe://example.org/ns/ops/sa/xdsadmin"
	dnsID   = "dns:envoy.mesh.example.org"
	cnID    = "cn:legacy envoy"
)

func testRules() []Rule {
	return []Rule{
		{Identity: edgeID, Nodes: []string{"edge-*", "gw-1"}, Groups: []string{"edge", "canary-?"}},
		{Identity: dnsID, Nodes: []string{"mesh/*"}},
		{Identity: cnID, Nodes: []string{"legacy-1"}, Groups: []string{"*"}},
		{Identity: adminID, Admin: true},
		{Identity: otherID, Nodes: []string{"other-*"}},
	}
}

func TestAllows(t *testing.T) {
	tests := []struct {
		name                  string
		td                    string // DefaultTrustDomain
		identity, node, group string
		want                  string // "" allowed, else the refusal
	}{
		{name: "exact node", identity: edgeID, node: "gw-1"},
		{name: "glob node", identity: edgeID, node: "edge-7"},
		{name: "glob node with slash", identity: dnsID, node: "mesh/a/b"},
		{name: "node not matched", identity: edgeID, node: "gw-2", want: `identity "` + edgeID + `" may not claim node "gw-2"`},
		{name: "another identity's node", identity: edgeID, node: "other-1", want: `identity "` + edgeID + `" may not claim node "other-1"`},
		{name: "default scope always", identity: dnsID, node: "mesh/x", group: ""},
		{name: "group exact", identity: edgeID, node: "edge-1", group: "edge"},
		{name: "group glob", identity: edgeID, node: "edge-1", group: "canary-3"},
		{name: "group not matched", identity: edgeID, node: "edge-1", group: "canary-33", want: `identity "` + edgeID + `" may not claim group "canary-33" (node "edge-1")`},
		{name: "no groups: default scope only", identity: dnsID, node: "mesh/x", group: "edge", want: `may not claim group "edge"`},
		{name: "any group", identity: cnID, node: "legacy-1", group: "whatever"},
		{name: "node checked before group", identity: cnID, node: "legacy-2", group: "x", want: `may not claim node "legacy-2"`},
		{name: "admin-only rule claims no node", identity: adminID, node: "edge-1", want: "may not claim node"},
		{name: "no rule", identity: "spiffe://example.org/ns/x/sa/y", node: "edge-1", want: `no rule for identity "spiffe://example.org/ns/x/sa/y"`},
		{name: "no rule, DNS", identity: "dns:x.example.org", node: "n", want: `no rule for identity "dns:x.example.org"`},
		{name: "DNS kind of a granted name", identity: "envoy.mesh.example.org", node: "mesh/x", want: "no rule"},
		{name: "identity is exact, not a pattern", identity: "cn:legacy envoy ", node: "legacy-1", want: "no rule"},
		{name: "default trust domain", td: "example.org", identity: "spiffe://example.org/ns/x/sa/y", node: "anything", group: "any"},
		{name: "default trust domain, other domain", td: "example.org", identity: "spiffe://other.org/ns/x", node: "n", want: `no rule for identity "spiffe://other.org/ns/x"`},
		{name: "default trust domain, suffix is not the domain", td: "example.org", identity: "spiffe://evil-example.org/x", node: "n", want: "no rule"},
		{name: "default trust domain, sub-domain is another domain", td: "example.org", identity: "spiffe://a.example.org/x", node: "n", want: "no rule"},
		{name: "default trust domain, trust domain's own id", td: "example.org", identity: "spiffe://example.org", node: "n", want: "no rule"},
		{name: "default trust domain, not SPIFFE", td: "example.org", identity: "dns:example.org", node: "n", want: "no rule"},
		// A CN or DNS SAN reading as a SPIFFE ID of the domain is not one.
		{name: "default trust domain, CN reading as SPIFFE", td: "example.org", identity: "cn:spiffe://example.org/x", node: "n", want: "no rule"},
		{name: "default trust domain, DNS SAN reading as SPIFFE", td: "example.org", identity: "dns:spiffe://example.org/x", node: "n", want: "no rule"},
		{name: "default trust domain, invalid SPIFFE id", td: "example.org", identity: "spiffe://example.org/a/../b", node: "n", want: "no rule"},
		{name: "a rule wins over the default", td: "example.org", identity: edgeID, node: "other-1", want: "may not claim node"},
		{name: "a rule wins over the default, group", td: "example.org", identity: dnsID, node: "mesh/1", group: "g", want: "may not claim group"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab, err := NewTable(testRules(), Options{DefaultTrustDomain: tt.td})
			if err != nil {
				t.Fatal(err)
			}
			err = tab.Allows(tt.identity, tt.node, tt.group)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Allows(%q, %q, %q) = %v, want allowed", tt.identity, tt.node, tt.group, err)
			case tt.want == "":
			case err == nil:
				t.Fatalf("Allows(%q, %q, %q) allowed, want %q", tt.identity, tt.node, tt.group, tt.want)
			case !errors.Is(err, ErrDenied):
				t.Fatalf("error %v does not match ErrDenied", err)
			case !strings.Contains(err.Error(), tt.want):
				t.Fatalf("Allows(%q, %q, %q) = %v, want %q", tt.identity, tt.node, tt.group, err, tt.want)
			}
			// A refusal names only what was asked: no pattern, no other
			// identity.
			if err != nil {
				for _, r := range testRules() {
					if !strings.HasPrefix(tt.identity, r.Identity) && strings.Contains(err.Error(), r.Identity) {
						t.Errorf("refusal %q names identity %q", err, r.Identity)
					}
					for _, p := range append(r.Nodes, r.Groups...) {
						if strings.ContainsAny(p, "*?") && strings.Contains(err.Error(), p) {
							t.Errorf("refusal %q names pattern %q", err, p)
						}
					}
				}
			}
		})
	}
}

func TestTableAdminRulesLen(t *testing.T) {
	tab, err := NewTable(testRules(), Options{DefaultTrustDomain: "example.org"})
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{adminID: true, edgeID: false, "spiffe://example.org/ns/x/sa/y": false, "cn:nobody": false, "cn:" + adminID: false, "dns:" + adminID: false} {
		if got := tab.Admin(id); got != want {
			t.Errorf("Admin(%q) = %v, want %v", id, got, want)
		}
	}
	if tab.Len() != 5 {
		t.Errorf("Len() = %d, want 5", tab.Len())
	}
	got := tab.Rules()
	var ids []string
	for _, r := range got {
		ids = append(ids, r.Identity)
	}
	if want := []string{cnID, dnsID, edgeID, adminID, otherID}; !cmp.Equal(ids, want) {
		t.Errorf("Rules() identities = %q, want %q", ids, want)
	}
	// Rules returns copies: changing them changes nothing.
	got[0].Nodes[0] = "*"
	if err := tab.Allows(cnID, "anything", ""); err == nil {
		t.Error("a change to Rules()'s result reached the table")
	}

	var zero Table
	if err := zero.Allows(edgeID, "edge-1", ""); err == nil || zero.Admin(adminID) || zero.Len() != 0 {
		t.Error("the zero Table allows something")
	}
}

func TestNewTableErrors(t *testing.T) {
	for _, tt := range []struct {
		name  string
		rules []Rule
		opts  Options
		want  string
	}{
		{"duplicate", []Rule{{Identity: "cn:a", Nodes: []string{"x"}}, {Identity: "cn:a", Admin: true}}, Options{}, `two rules for identity "cn:a"`},
		{"invalid rule", []Rule{{Identity: "cn:a", Nodes: []string{"x\\"}}}, Options{}, "trailing backslash"},
		{"untyped identity", []Rule{{Identity: "a.example.org", Nodes: []string{"x"}}}, Options{}, "dns:NAME"},
		{"bad trust domain", nil, Options{DefaultTrustDomain: "Example.org"}, "must be lowercase"},
		{"trust domain with a path", nil, Options{DefaultTrustDomain: "example.org/x"}, `character '/'`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewTable(tt.rules, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewTable = %v, want an error with %q", err, tt.want)
			}
		})
	}
}
