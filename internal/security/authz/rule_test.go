package authz

import (
	"errors"
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
		{Identity: "dns:envoy.edge.example.org", Nodes: []string{"edge-1", "edge-2"}, Groups: []string{"edge", "canary-*"}},
		{Identity: "dns:*.edge.example.org", Nodes: []string{"edge-*"}},
		{Identity: "dns:xds_a-1.svc", Nodes: []string{"n"}},
		{Identity: "cn:Envoy Proxy CN", Nodes: []string{"*"}},
		// A CommonName is any text: this one cannot equal a SPIFFE ID.
		{Identity: "cn:spiffe://example.org/replica", Nodes: []string{"n"}},
		{Identity: "dns:ops.example.org", Admin: true},
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
		{"control character", Rule{Identity: "cn:a\nb", Nodes: []string{"n"}}, `identity "cn:a\nb": control character U+000A`},
		{"long identity", Rule{Identity: "cn:" + strings.Repeat("a", MaxIdentityBytes), Nodes: []string{"n"}}, "longer than 1024 bytes"},
		{"invalid UTF-8", Rule{Identity: "cn:a\xffb", Nodes: []string{"n"}}, "not valid UTF-8"},
		{"bad SPIFFE id", Rule{Identity: "spiffe://Example.org/x", Nodes: []string{"n"}}, `identity "spiffe://Example.org/x": bad SPIFFE id: trust domain "Example.org": must be lowercase`},
		{"upper-case scheme", Rule{Identity: "Spiffe://example.org/x", Nodes: []string{"n"}}, `scheme must be "spiffe://"`},
		{"untyped DNS name", Rule{Identity: "envoy-7.mesh.example.org", Nodes: []string{"n"}}, `identity "envoy-7.mesh.example.org": identity does not say its kind: write spiffe://`},
		{"untyped CN", Rule{Identity: "Envoy Proxy", Nodes: []string{"n"}}, "does not say its kind"},
		{"not quite SPIFFE", Rule{Identity: "spiffe:/x", Nodes: []string{"n"}}, "does not say its kind"},
		{"upper-case kind", Rule{Identity: "DNS:a.example", Nodes: []string{"n"}}, "does not say its kind"},
		{"empty DNS name", Rule{Identity: "dns:", Nodes: []string{"n"}}, "the DNS name is empty"},
		{"upper-case DNS name", Rule{Identity: "dns:A.example", Nodes: []string{"n"}}, "must be lower case"},
		{"DNS name reading as SPIFFE", Rule{Identity: "dns:spiffe://example.org/x", Nodes: []string{"n"}}, `character ':' not allowed`},
		{"DNS empty label", Rule{Identity: "dns:a..example", Nodes: []string{"n"}}, "empty label"},
		{"DNS trailing dot", Rule{Identity: "dns:a.example.", Nodes: []string{"n"}}, "empty label"},
		{"DNS hyphen", Rule{Identity: "dns:-a.example", Nodes: []string{"n"}}, "begins or ends with '-'"},
		{"DNS long label", Rule{Identity: "dns:" + strings.Repeat("a", 64) + ".example", Nodes: []string{"n"}}, "longer than 63"},
		{"DNS long name", Rule{Identity: "dns:" + strings.Repeat("a.", 127) + "ab", Nodes: []string{"n"}}, "longer than 253"},
		{"DNS wildcard inside", Rule{Identity: "dns:a.*.example", Nodes: []string{"n"}}, `character '*'`},
		{"DNS space", Rule{Identity: "dns:a example", Nodes: []string{"n"}}, `character ' '`},
		{"empty CN", Rule{Identity: "cn:", Nodes: []string{"n"}}, "the CommonName is empty"},
		{"CN control character", Rule{Identity: "cn:a\tb", Nodes: []string{"n"}}, "control character U+0009"},
		{"bad node pattern", Rule{Identity: "cn:a", Nodes: []string{"ok", `edge\`}}, `identity "cn:a": node pattern "edge\\": trailing backslash`},
		{"empty node pattern", Rule{Identity: "cn:a", Nodes: []string{""}}, `identity "cn:a": node pattern "": empty`},
		{"bad group pattern", Rule{Identity: "cn:a", Nodes: []string{"n"}, Groups: []string{"g\x00"}}, `identity "cn:a": group pattern "g\x00": control character U+0000`},
		{"grants nothing", Rule{Identity: "cn:a"}, `identity "cn:a": the rule grants nothing`},
		{"groups only", Rule{Identity: "cn:a", Groups: []string{"g"}}, "grants nothing"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.rule.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want an error with %q", err, tt.want)
			}
			if untyped := strings.Contains(tt.want, "does not say its kind"); errors.Is(err, ErrUntyped) != untyped {
				t.Errorf("errors.Is(%v, ErrUntyped) = %v, want %v", err, !untyped, untyped)
			}
		})
	}
}
