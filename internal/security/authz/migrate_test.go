package authz

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testbase"
)

// TestMigrate: rules stored with untyped identities are rewritten to the
// kind asked for, each under its new key, the old key gone; a dry run
// writes nothing; a name not valid for the kind, or an identity that
// already has a typed rule, is left as it is with the reason.
func TestMigrate(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	ctx := testbase.Context(t)
	prefix := newPrefix()
	if err := Grant(ctx, c, prefix, Rule{Identity: edgeID, Nodes: []string{"edge-*"}}); err != nil {
		t.Fatal(err)
	}
	if err := Grant(ctx, c, prefix, Rule{Identity: "dns:taken.example.org", Nodes: []string{"t"}}); err != nil {
		t.Fatal(err)
	}
	putRaw(t, c, Key(prefix, "Envoy-7.Mesh.example.org"), `{"identity":"Envoy-7.Mesh.example.org","nodes":["envoy-7"],"groups":["g"]}`)
	putRaw(t, c, Key(prefix, "Legacy Envoy"), `{"identity":"Legacy Envoy","nodes":["legacy-*"]}`)
	putRaw(t, c, Key(prefix, "taken.example.org"), `{"identity":"taken.example.org","admin":true}`)

	dry, err := Migrate(ctx, c, prefix, MigrateOptions{Kind: KindDNS, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(dry) != 3 || dry[0].From != "Envoy-7.Mesh.example.org" || dry[0].To != "dns:envoy-7.mesh.example.org" || dry[0].Done || dry[0].Err != nil {
		t.Fatalf("dry run: %+v", dry)
	}
	if dry[1].From != "Legacy Envoy" || dry[1].Err == nil || !strings.Contains(dry[1].Err.Error(), "not valid as a dns identity") {
		t.Errorf("dry run of a CommonName as DNS: %+v", dry[1])
	}
	if _, bad, _, err := Read(ctx, c, prefix); err != nil || len(bad) != 3 {
		t.Fatalf("after a dry run: %d bad rules, %v; want the 3 untyped ones left", len(bad), err)
	}

	got, err := Migrate(ctx, c, prefix, MigrateOptions{Kind: KindDNS, Identities: []string{"Envoy-7.Mesh.example.org", "taken.example.org"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !got[0].Done || got[0].Err != nil || got[0].NewKey != Key(prefix, "dns:envoy-7.mesh.example.org") {
		t.Fatalf("migrate: %+v", got)
	}
	if got[1].Done || got[1].Err == nil || !strings.Contains(got[1].Err.Error(), `identity "dns:taken.example.org" already has a rule`) {
		t.Errorf("migrate onto a typed rule: %+v", got[1])
	}
	got, err = Migrate(ctx, c, prefix, MigrateOptions{Kind: KindCN, Identities: []string{"Legacy Envoy"}})
	if err != nil || len(got) != 1 || !got[0].Done || got[0].To != "cn:Legacy Envoy" {
		t.Fatalf("migrate as cn: %+v, %v", got, err)
	}

	rules, bad, _, err := Read(ctx, c, prefix)
	if err != nil {
		t.Fatal(err)
	}
	want := []Rule{
		{Identity: "cn:Legacy Envoy", Nodes: []string{"legacy-*"}},
		{Identity: "dns:envoy-7.mesh.example.org", Nodes: []string{"envoy-7"}, Groups: []string{"g"}},
		{Identity: "dns:taken.example.org", Nodes: []string{"t"}},
		{Identity: edgeID, Nodes: []string{"edge-*"}},
	}
	if diff := cmp.Diff(want, rules); diff != "" {
		t.Errorf("rules after migrating (-want +got):\n%s", diff)
	}
	if len(bad) != 1 || bad[0].Key != Key(prefix, "taken.example.org") {
		t.Errorf("bad rules after migrating: %+v, want the one left", bad)
	}
	if _, err := Migrate(ctx, c, prefix, MigrateOptions{Kind: "spiffe"}); err == nil || !strings.Contains(err.Error(), `kind "spiffe"`) {
		t.Errorf("Migrate with kind spiffe: %v", err)
	}
}
