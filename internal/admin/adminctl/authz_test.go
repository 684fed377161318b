package adminctl

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/legation-io/legation/internal/security/authz"
	"github.com/legation-io/legation/internal/testkit/storetest"
)

const (
	edgeIdentity = "spiffe://example.org/ns/edge/sa/envoy"
	opsIdentity  = "spiffe://example.org/ns/ops/sa/deployer"
	dnsIdentity  = "dns:envoy-7.mesh.example.org"
)

// rules reads the harness's rules straight from etcd.
func (h *harness) rules() []authz.Rule {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	rs, err := authz.List(ctx, h.env.client, h.prefix)
	if err != nil {
		h.t.Fatal(err)
	}
	return rs
}

func TestAuthz(t *testing.T) {
	t.Parallel()
	e := startEnv(t, storetest.Options{})
	h := e.newHarness(t)

	t.Run("grant", func(t *testing.T) {
		out := h.mustRun("authz", "grant", edgeIdentity, "--nodes", "edge-*,gw-1", "--groups", "edge,canary-?")
		want := "granted " + edgeIdentity + `
  nodes   edge-*, gw-1
  groups  edge, canary-? (and the default scope)
  admin   no
`
		if out != want {
			t.Errorf("output:\n%s\nwant:\n%s", out, want)
		}
		h.mustRun("authz", "grant", opsIdentity, "--admin")
		out = h.mustRun("authz", "grant", dnsIdentity, "--nodes", "envoy-7")
		if !strings.Contains(out, "groups  none (the default scope only)") {
			t.Errorf("output:\n%s", out)
		}
		wantRules := []authz.Rule{
			{Identity: dnsIdentity, Nodes: []string{"envoy-7"}},
			{Identity: edgeIdentity, Nodes: []string{"edge-*", "gw-1"}, Groups: []string{"edge", "canary-?"}},
			{Identity: opsIdentity, Admin: true},
		}
		if diff := cmp.Diff(wantRules, h.rules()); diff != "" {
			t.Errorf("rules in etcd (-want +got):\n%s", diff)
		}
	})

	t.Run("grant replaces", func(t *testing.T) {
		out := h.mustRun("authz", "grant", dnsIdentity, "--nodes", "envoy-7,envoy-8", "--admin")
		want := "granted " + dnsIdentity + `
  nodes   envoy-7, envoy-8
  groups  none (the default scope only)
  admin   yes
replacing:
  nodes   envoy-7
  groups  none (the default scope only)
  admin   no
`
		if out != want {
			t.Errorf("output:\n%s\nwant:\n%s", out, want)
		}
	})

	t.Run("grant -o json", func(t *testing.T) {
		out := h.mustRun("authz", "grant", dnsIdentity, "--nodes", "envoy-7", "-o", "json")
		var got authz.Rule
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if want := (authz.Rule{Identity: dnsIdentity, Nodes: []string{"envoy-7"}}); !cmp.Equal(got, want) {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})

	t.Run("list", func(t *testing.T) {
		got := fields(h.mustRun("authz", "list"))
		want := [][]string{
			{"IDENTITY", "NODES", "GROUPS", "ADMIN"},
			{dnsIdentity, "envoy-7", "-", "no"},
			{edgeIdentity, "edge-*,gw-1", "edge,canary-?", "no"},
			{opsIdentity, "-", "-", "yes"},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("list (-want +got):\n%s", diff)
		}
		for _, format := range []string{"json", "yaml"} {
			out := h.mustRun("authz", "list", "-o", format)
			var rules []authz.Rule
			if err := yaml.Unmarshal([]byte(out), &rules); err != nil {
				t.Fatalf("-o %s: %v\n%s", format, err, out)
			}
			if diff := cmp.Diff(h.rules(), rules); diff != "" {
				t.Errorf("-o %s (-etcd +output):\n%s", format, diff)
			}
		}
	})

	t.Run("revoke", func(t *testing.T) {
		if out := h.mustRun("authz", "revoke", edgeIdentity); out != "revoked "+edgeIdentity+"\n" {
			t.Errorf("output: %q", out)
		}
		for _, r := range h.rules() {
			if r.Identity == edgeIdentity {
				t.Error("revoked rule still in etcd")
			}
		}
		r := h.run("authz", "revoke", edgeIdentity)
		want := `xdsadmin: no rule for identity "` + edgeIdentity + `" at ` + authz.Key(h.prefix, edgeIdentity) + " (see xdsadmin authz list)\n"
		if r.code == 0 || r.stderr != want {
			t.Errorf("revoking again: %s\nwant stderr %q", r, want)
		}
	})

	t.Run("list warns about malformed rules", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		defer cancel()
		if _, err := e.client.Put(ctx, authz.Dir(h.prefix)+"junk", "{"); err != nil {
			t.Fatal(err)
		}
		r := h.run("authz", "list", "-o", "json")
		if r.code != 0 || !strings.Contains(r.stderr, `warning: skipped malformed rule at key "`+authz.Dir(h.prefix)+`junk"`) {
			t.Errorf("%s", r)
		}
	})

	t.Run("empty", func(t *testing.T) {
		h2 := e.newHarness(t)
		if out := h2.mustRun("authz", "list"); out != "no rules under "+authz.Dir(h2.prefix)+"\n" {
			t.Errorf("output: %q", out)
		}
		if out := h2.mustRun("authz", "list", "-o", "json"); out != "[]\n" {
			t.Errorf("json output: %q", out)
		}
	})
}

// TestAuthzBadInput checks that bad input is refused with a message
// naming what is wrong, and that nothing is written.
func TestAuthzBadInput(t *testing.T) {
	t.Parallel()
	e := startEnv(t, storetest.Options{})
	h := e.newHarness(t)
	h.mustRun("authz", "grant", edgeIdentity, "--nodes", "edge-*")
	rev := e.revision(t)

	for _, tc := range []struct {
		name string
		args []string
		want string // the whole error message, without "xdsadmin: "
	}{
		{
			name: "bad node pattern",
			args: []string{"authz", "grant", edgeIdentity, "--nodes", `edge-*,gw\`},
			want: `--nodes: pattern "gw\\": trailing backslash (write \\ for a literal one)`,
		},
		{
			name: "empty node pattern",
			args: []string{"authz", "grant", edgeIdentity, "--nodes", "a,,b"},
			want: `--nodes: pattern "": empty`,
		},
		{
			name: "bad group pattern",
			args: []string{"authz", "grant", edgeIdentity, "--nodes", "n", "--groups", "edge\t1"},
			want: `--groups: pattern "edge\t1": control character U+0009 at byte 4`,
		},
		{
			name: "bad SPIFFE id: upper-case trust domain",
			args: []string{"authz", "grant", "spiffe://Example.org/ns/edge", "--nodes", "n"},
			want: `identity "spiffe://Example.org/ns/edge": bad SPIFFE id: trust domain "Example.org": must be lowercase`,
		},
		{
			name: "bad SPIFFE id: dot segment",
			args: []string{"authz", "grant", "spiffe://example.org/ns/../admin", "--nodes", "n"},
			want: `identity "spiffe://example.org/ns/../admin": bad SPIFFE id: path segment ".." is not allowed`,
		},
		{
			name: "bad SPIFFE id: port",
			args: []string{"authz", "grant", "spiffe://example.org:443/x", "--nodes", "n"},
			want: `identity "spiffe://example.org:443/x": bad SPIFFE id: trust domain "example.org:443": character ':' not allowed (lowercase letters, digits, '.', '-', '_')`,
		},
		{
			name: "nothing granted",
			args: []string{"authz", "grant", edgeIdentity},
			want: `nothing to grant to "` + edgeIdentity + `": give --nodes, or --admin`,
		},
		{
			name: "groups alone grant nothing",
			args: []string{"authz", "grant", edgeIdentity, "--groups", "edge"},
			want: `nothing to grant to "` + edgeIdentity + `": give --nodes, or --admin`,
		},
		{
			name: "empty identity",
			args: []string{"authz", "grant", "", "--nodes", "n"},
			want: "identity: empty",
		},
		{
			name: "identity with a control character",
			args: []string{"authz", "grant", "cn:a\x1bb", "--nodes", "n"},
			want: `identity "cn:a\x1bb": control character U+001B at byte 4`,
		},
		{
			name: "bare identity",
			args: []string{"authz", "grant", "envoy-7.mesh.example.org", "--nodes", "n"},
			want: `identity "envoy-7.mesh.example.org": identity does not say its kind: write spiffe://TRUST_DOMAIN/PATH for a SPIFFE ID (URI SAN), ` +
				`dns:NAME for a DNS SAN or cn:NAME for a certificate's CommonName (a rule stored without its kind is rewritten by xdsadmin authz migrate --as dns|cn)`,
		},
		{
			name: "DNS identity in upper case",
			args: []string{"authz", "grant", "dns:Envoy.example.org", "--nodes", "n"},
			want: `identity "dns:Envoy.example.org": DNS name "Envoy.example.org": must be lower case (certificates' DNS names are compared in lower case)`,
		},
		{
			name: "revoke: bare identity",
			args: []string{"authz", "revoke", "envoy-7"},
			want: `identity "envoy-7": identity does not say its kind: write spiffe://TRUST_DOMAIN/PATH for a SPIFFE ID (URI SAN), ` +
				`dns:NAME for a DNS SAN or cn:NAME for a certificate's CommonName (a rule stored without its kind is rewritten by xdsadmin authz migrate --as dns|cn) ` +
				`(to delete a rule stored without its kind, give --untyped)`,
		},
		{
			name: "revoke --untyped of a typed identity",
			args: []string{"authz", "revoke", "--untyped", "dns:envoy-7"},
			want: `--untyped: identity "dns:envoy-7" says its kind: revoke it without --untyped`,
		},
		{
			name: "migrate without --as",
			args: []string{"authz", "migrate"},
			want: `--as "": give --as dns (the identities are DNS SANs) or --as cn (CommonNames)`,
		},
		{
			name: "no identity",
			args: []string{"authz", "grant", "--nodes", "n"},
			want: "accepts 1 arg(s), received 0\nRun 'xdsadmin authz grant --help' for usage",
		},
		{
			name: "revoke: empty identity",
			args: []string{"authz", "revoke", ""},
			want: "identity: empty",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.run(tc.args...)
			if r.code == 0 || r.stderr != "xdsadmin: "+tc.want+"\n" {
				t.Errorf("%s\nwant stderr %q", r, "xdsadmin: "+tc.want+"\n")
			}
		})
	}
	if got := e.revision(t); got != rev {
		t.Errorf("etcd revision moved from %d to %d: bad input wrote something", rev, got)
	}
	if diff := cmp.Diff([]authz.Rule{{Identity: edgeIdentity, Nodes: []string{"edge-*"}}}, h.rules()); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
}

// TestAuthzMigrate: rules stored without their identity's kind are
// listed with a warning and rewritten by migrate (a dry run first), the
// ones that cannot be named with a reason and a failing exit.
func TestAuthzMigrate(t *testing.T) {
	t.Parallel()
	e := startEnv(t, storetest.Options{})
	h := e.newHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	for _, id := range []string{"envoy-7.mesh.example.org", "Legacy Envoy"} {
		if _, err := e.client.Put(ctx, authz.Key(h.prefix, id), `{"identity":"`+id+`","nodes":["n"]}`); err != nil {
			t.Fatal(err)
		}
	}
	r := h.run("authz", "list")
	if r.code != 0 || !strings.Contains(r.stderr, "2 rule(s) name an identity without its kind") || !strings.Contains(r.stderr, "xdsadmin authz migrate --as dns") {
		t.Errorf("list: %s", r)
	}

	out := h.mustRun("authz", "migrate", "--as", "dns", "--dry-run", "envoy-7.mesh.example.org")
	want := `would rewrite "envoy-7.mesh.example.org" to "dns:envoy-7.mesh.example.org" (` + authz.Key(h.prefix, "dns:envoy-7.mesh.example.org") + ")\n"
	if out != want {
		t.Errorf("dry run:\n%s\nwant:\n%s", out, want)
	}
	if len(h.rules()) != 0 {
		t.Fatal("a dry run wrote rules")
	}
	r = h.run("authz", "migrate", "--as", "dns")
	if r.code == 0 || !strings.Contains(r.stdout, `rewrote "envoy-7.mesh.example.org" to "dns:envoy-7.mesh.example.org"`) ||
		!strings.Contains(r.stdout, `not rewritten "Legacy Envoy"`) || !strings.Contains(r.stderr, "1 of 2 rules stored without their kind not rewritten") {
		t.Errorf("migrate --as dns: %s", r)
	}
	out = h.mustRun("authz", "migrate", "--as", "cn", "-o", "json")
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 || rows[0]["to"] != "cn:Legacy Envoy" || rows[0]["done"] != true {
		t.Errorf("migrate --as cn -o json: %v\n%s", err, out)
	}
	wantRules := []authz.Rule{
		{Identity: "cn:Legacy Envoy", Nodes: []string{"n"}},
		{Identity: "dns:envoy-7.mesh.example.org", Nodes: []string{"n"}},
	}
	if diff := cmp.Diff(wantRules, h.rules()); diff != "" {
		t.Errorf("rules after migrating (-want +got):\n%s", diff)
	}
	if out := h.mustRun("authz", "migrate", "--as", "dns"); !strings.Contains(out, "no rules without their kind") {
		t.Errorf("migrate with nothing left: %q", out)
	}
	// An old rule can also be deleted as it is.
	if _, err := e.client.Put(ctx, authz.Key(h.prefix, "old"), `{"identity":"old","nodes":["n"]}`); err != nil {
		t.Fatal(err)
	}
	if out := h.mustRun("authz", "revoke", "--untyped", "old"); out != "revoked old\n" {
		t.Errorf("revoke --untyped: %q", out)
	}
}
