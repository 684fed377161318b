package authz

import (
	"strings"
	"testing"
)

func TestValidateSPIFFE(t *testing.T) {
	good := []string{
		"spiffe://example.org",
		"spiffe://example.org/ns/edge/sa/envoy",
		"spiffe://a-b_c.9/A.b-C_d",
		"spiffe://td/..a/.b/c..",
	}
	for _, id := range good {
		if err := ValidateSPIFFE(id); err != nil {
			t.Errorf("ValidateSPIFFE(%q) = %v", id, err)
		}
	}
	bad := []struct{ id, want string }{
		{"SPIFFE://example.org/x", `scheme must be "spiffe://"`},
		{"spiffe:///x", "empty trust domain"},
		{"spiffe://Example.org/x", "must be lowercase"},
		{"spiffe://example.org:8080/x", `character ':'`},
		{"spiffe://user@example.org/x", `character '@'`},
		{"spiffe://example.org/", "must not end with '/'"},
		{"spiffe://example.org/a/", "empty path segment"},
		{"spiffe://example.org//a", "empty path segment"},
		{"spiffe://example.org/a/./b", `segment "."`},
		{"spiffe://example.org/a/..", `segment ".."`},
		{"spiffe://example.org/a?b", `character '?'`},
		{"spiffe://example.org/a#b", `character '#'`},
		{"spiffe://example.org/a%20b", `character '%'`},
		{"spiffe://example.org/日本", `character '日'`},
		{"spiffe://" + strings.Repeat("a", 256) + "/x", "longer than 255"},
	}
	for _, tt := range bad {
		err := ValidateSPIFFE(tt.id)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ValidateSPIFFE(%q) = %v, want an error with %q", tt.id, err, tt.want)
		}
	}
}

func TestRuleValidate(t *testing.T) {
	good := []Rule{
		{Identity: "spiffe://example.org/ns/edge/sa/envoy", Nodes: []string{"edge-*"}},
		{Identity: "envoy.edge.example.org", Nodes: []string{"edge-1", "edge-2"}, Groups: []string{"edge", "canary-*"}},
		{Identity: "Envoy Proxy CN", Nodes: []string{"*"}},
		{Identity: "ops.example.org", Admin: true},
		// Not a SPIFFE id: compared as a plain string.
		{Identity: "spiffe:/x", Nodes: []string{"n"}},
	}
	for _, r := range good {
		if err := r.Validate(); err != nil {
			t.Errorf("%+v: %v", r, err)
		}
	}
	bad := []struct {
		name string
		rule Rule
		want string
	}{
		{"empty identity", Rule{Nodes: []string{"n"}}, "identity: empty"},
		{"control character", Rule{Identity: "a\nb", Nodes: []string{"n"}}, `identity "a\nb": control character U+000A`},
		{"long identity", Rule{Identity: strings.Repeat("a", MaxIdentityBytes+1), Nodes: []string{"n"}}, "longer than 1024 bytes"},
		{"invalid UTF-8", Rule{Identity: "a\xffb", Nodes: []string{"n"}}, "not valid UTF-8"},
		{"bad SPIFFE id", Rule{Identity: "spiffe://Example.org/x", Nodes: []string{"n"}}, `identity "spiffe://Example.org/x": bad SPIFFE id: trust domain "Example.org": must be lowercase`},
		{"upper-case scheme", Rule{Identity: "Spiffe://example.org/x", Nodes: []string{"n"}}, `scheme must be "spiffe://"`},
		{"bad node pattern", Rule{Identity: "a", Nodes: []string{"ok", `edge\`}}, `identity "a": node pattern "edge\\": trailing backslash`},
		{"empty node pattern", Rule{Identity: "a", Nodes: []string{""}}, `identity "a": node pattern "": empty`},
		{"bad group pattern", Rule{Identity: "a", Nodes: []string{"n"}, Groups: []string{"g\x00"}}, `identity "a": group pattern "g\x00": control character U+0000`},
		{"grants nothing", Rule{Identity: "a"}, `identity "a": the rule grants nothing`},
		{"groups only", Rule{Identity: "a", Groups: []string{"g"}}, "grants nothing"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.rule.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want an error with %q", err, tt.want)
			}
		})
	}
}
