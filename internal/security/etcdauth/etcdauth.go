package etcdauth

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/state/keyspace"
)

// The roles of docs/operations/etcd.md, and etcd's root user and
// role.
const (
	RoleReplica = "legation-replica"
	RoleAdmin   = "legation-admin"
	// RoleRollouts lets the replicas' rollout controller promote and
	// abort rollouts: given to the replicas' users besides RoleReplica
	// (--rollout-user), it lets them write what a promotion writes.
	RoleRollouts = "legation-rollouts"
	Root         = "root"
)

// Grant is one permission of a role on the keys starting with Key.
type Grant struct {
	Role string
	Key  string
	Perm clientv3.PermissionType
}

// Grants are the permissions of RoleReplica and RoleAdmin on prefix, from
// the writers of the key layout (keyspace.Dir.Writer): RoleReplica reads
// all of prefix and writes the directories the replicas write (the status
// records, the membership registry, the elections and the load windows);
// RoleRollouts writes what the rollout controller writes when it promotes
// or aborts a rollout (keyspace.ControllerDirs: the resources, apply
// markers, history and rollouts); RoleAdmin reads and writes all of
// prefix, where the admin tools write the rest.
func Grants(prefix string) []Grant {
	read, readWrite := clientv3.PermissionType(clientv3.PermRead), clientv3.PermissionType(clientv3.PermReadWrite)
	grants := []Grant{{RoleReplica, prefix, read}}
	for _, d := range keyspace.WrittenBy(keyspace.Replica) {
		grants = append(grants, Grant{RoleReplica, d.Prefix(prefix), readWrite})
	}
	for _, d := range keyspace.ControllerDirs() {
		grants = append(grants, Grant{RoleRollouts, d.Prefix(prefix), readWrite})
	}
	return append(grants, Grant{RoleAdmin, prefix, readWrite})
}

// Config is what Setup makes.
type Config struct {
	// Prefix is the --etcd-prefix of the replicas and xdsadmin.
	Prefix string
	// ReplicaUsers and AdminUsers get RoleReplica and RoleAdmin. Each is
	// added without a password: with etcd's --client-cert-auth, a client
	// certificate whose CN is the user's name logs in as it. A user that
	// exists already (with a password, say) is kept as it is and granted
	// the role.
	ReplicaUsers, AdminUsers []string
	// RolloutUsers get RoleRollouts (optional): the users of the
	// replicas that run the rollout controller.
	RolloutUsers []string
}

// Validate checks the config without I/O.
func (c Config) Validate() error {
	var errs []error
	if c.Prefix == "" || c.Prefix[0] != '/' || c.Prefix[len(c.Prefix)-1] != '/' {
		errs = append(errs, fmt.Errorf("etcdauth: prefix %q: must start and end with '/'", c.Prefix))
	}
	for _, u := range slices.Concat(c.ReplicaUsers, c.AdminUsers, c.RolloutUsers) {
		if u == "" || u == Root {
			errs = append(errs, fmt.Errorf("etcdauth: user %q: want a name other than %q", u, Root))
		}
	}
	if len(c.ReplicaUsers) == 0 || len(c.AdminUsers) == 0 {
		errs = append(errs, errors.New("etcdauth: at least one replica user and one admin user"))
	}
	return errors.Join(errs...)
}

// Setup adds what is missing of the roles, their grants, the users, the
// root user (no password: a certificate with CN root logs in as it), and
// enables auth. cli must be root's client, or any client of an etcd whose
// auth is off. It returns the steps that changed something, for a log.
func Setup(ctx context.Context, cli *clientv3.Client, cfg Config) ([]string, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var done []string
	for _, role := range []string{RoleReplica, RoleAdmin, RoleRollouts} {
		_, err := cli.RoleAdd(ctx, role)
		switch {
		case err == nil:
			done = append(done, "role "+role+" added")
		case !errors.Is(err, rpctypes.ErrRoleAlreadyExist):
			return done, fmt.Errorf("etcdauth: role %s: %w", role, err)
		}
	}
	// A grant given again is a no-op; one of another kind on the same
	// range is replaced, which restores a role changed by hand.
	for _, g := range Grants(cfg.Prefix) {
		if _, err := cli.RoleGrantPermission(ctx, g.Role, g.Key, clientv3.GetPrefixRangeEnd(g.Key), g.Perm); err != nil {
			return done, fmt.Errorf("etcdauth: role %s on %s: %w", g.Role, g.Key, err)
		}
	}
	users := []struct{ name, role string }{{Root, Root}}
	for _, u := range cfg.ReplicaUsers {
		users = append(users, struct{ name, role string }{u, RoleReplica})
	}
	for _, u := range cfg.AdminUsers {
		users = append(users, struct{ name, role string }{u, RoleAdmin})
	}
	for _, u := range cfg.RolloutUsers {
		users = append(users, struct{ name, role string }{u, RoleRollouts})
	}
	for _, u := range users {
		_, err := cli.UserAddWithOptions(ctx, u.name, "", &clientv3.UserAddOptions{NoPassword: true})
		switch {
		case err == nil:
			done = append(done, "user "+u.name+" added")
		case !errors.Is(err, rpctypes.ErrUserAlreadyExist):
			return done, fmt.Errorf("etcdauth: user %s: %w", u.name, err)
		}
		// Granting a role held already is a no-op.
		if _, err := cli.UserGrantRole(ctx, u.name, u.role); err != nil {
			return done, fmt.Errorf("etcdauth: grant %s to %s: %w", u.role, u.name, err)
		}
	}
	st, err := cli.AuthStatus(ctx)
	if err != nil {
		return done, fmt.Errorf("etcdauth: auth status: %w", err)
	}
	if !st.Enabled {
		if _, err := cli.AuthEnable(ctx); err != nil {
			return done, fmt.Errorf("etcdauth: auth enable: %w", err)
		}
		done = append(done, "auth enabled")
	}
	return done, nil
}
