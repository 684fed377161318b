package etcdauth

import (
	"slices"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/state/keyspace"
)

// TestGrants: the roles of docs/operations/etcd.md, on the
// prefix given.
func TestGrants(t *testing.T) {
	read, rw := clientv3.PermissionType(clientv3.PermRead), clientv3.PermissionType(clientv3.PermReadWrite)
	want := []Grant{
		{RoleReplica, "/p/", read},
		{RoleReplica, "/p/status/", rw},
		{RoleReplica, "/p/members/", rw},
		{RoleReplica, "/p/elections/", rw},
		{RoleReplica, "/p/load/", rw},
		{RoleRollouts, "/p/resources/", rw},
		{RoleRollouts, "/p/applies/", rw},
		{RoleRollouts, "/p/history/", rw},
		{RoleRollouts, "/p/rollouts/", rw},
		{RoleAdmin, "/p/", rw},
	}
	got := Grants("/p/")
	if len(got) != len(want) {
		t.Fatalf("Grants = %v; want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("grant %d = %v; want %v", i, got[i], want[i])
		}
	}
}

func TestValidate(t *testing.T) {
	ok := Config{Prefix: "/legation/", ReplicaUsers: []string{RoleReplica}, AdminUsers: []string{RoleAdmin}}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v", ok, err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"bad prefix", func(c *Config) { c.Prefix = "legation" }, `prefix "legation"`},
		{"root as a replica", func(c *Config) { c.ReplicaUsers = []string{Root} }, `user "root"`},
		{"empty user", func(c *Config) { c.AdminUsers = []string{""} }, `user ""`},
		{"no admin", func(c *Config) { c.AdminUsers = nil }, "one admin user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate: %v; want %q", err, tc.want)
			}
		})
	}
}

// TestGrantsCoverLayout: every directory of the key layout is writable by
// the role of its writer, and the replicas' role writes none of the
// directories the admin tools write; RoleRollouts writes exactly those
// the rollout controller writes (keyspace.ControllerDirs).
func TestGrantsCoverLayout(t *testing.T) {
	const prefix = "/p/"
	role := map[keyspace.Writer]string{keyspace.Admin: RoleAdmin, keyspace.Replica: RoleReplica}
	rw := clientv3.PermissionType(clientv3.PermReadWrite)
	writes := func(r string, d keyspace.Dir) bool {
		for _, g := range Grants(prefix) {
			if g.Role == r && g.Perm == rw && strings.HasPrefix(d.Prefix(prefix), g.Key) {
				return true
			}
		}
		return false
	}
	for _, d := range keyspace.Dirs() {
		w := d.Writer()
		if !writes(role[w], d) {
			t.Errorf("%s, written by the %s, is not writable by %s", d, w, role[w])
		}
		if w != keyspace.Replica && writes(RoleReplica, d) {
			t.Errorf("%s, written by the %s, is writable by %s", d, w, RoleReplica)
		}
		if got, want := writes(RoleRollouts, d), slices.Contains(keyspace.ControllerDirs(), d); got != want {
			t.Errorf("%s writable by %s: %v, want %v", d, RoleRollouts, got, want)
		}
	}
}
