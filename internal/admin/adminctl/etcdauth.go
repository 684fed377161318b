package adminctl

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/legation-io/legation/internal/security/etcdauth"
)

type etcdAuthFlags struct {
	replicaUsers, adminUsers []string
}

func (a *app) etcdAuthCommand() *cobra.Command {
	var f etcdAuthFlags
	cmd := &cobra.Command{
		Use:   "etcd-auth",
		Short: "Set up etcd's least-privilege roles and users, and enable auth",
		Long: `etcd-auth sets up etcd's authentication as docs/operations/etcd.md
describes it, on --etcd-prefix: the roles legation-replica (read the
prefix; write status records, the membership registry and load windows)
and legation-admin (read and write the prefix), the users of
--replica-user and --admin-user holding them, the root user, and auth
enabled. The users get no password: with etcd's --client-cert-auth a
client certificate whose CN is a user's name logs in as that user.

It is idempotent: run again, it adds only what is missing (and restores a
grant of the two roles changed by hand). Run it as root (a client
certificate with CN root) or before auth is enabled. The Helm chart's
bundled etcd runs it in a Job at each install and upgrade.`,
		Example: `  xdsadmin --etcd-endpoints https://etcd-0:2379 --etcd-cacert ca.crt \
    --etcd-cert root.crt --etcd-key root.key etcd-auth \
    --replica-user legation-replica --admin-user legation-admin`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runEtcdAuth(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&f.replicaUsers, "replica-user", []string{etcdauth.RoleReplica},
		"users (client certificate CNs) given the role legation-replica, comma separated")
	fl.StringSliceVar(&f.adminUsers, "admin-user", []string{etcdauth.RoleAdmin},
		"users (client certificate CNs) given the role legation-admin, comma separated")
	return cmd
}

func (a *app) runEtcdAuth(ctx context.Context, f etcdAuthFlags) error {
	cfg := etcdauth.Config{Prefix: a.opts.Prefix, ReplicaUsers: f.replicaUsers, AdminUsers: f.adminUsers}
	if err := cfg.Validate(); err != nil {
		return err
	}
	ctx, cancel := a.commandContext(ctx)
	defer cancel()
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	done, err := etcdauth.Setup(ctx, c.client, cfg)
	for _, d := range done {
		fmt.Fprintln(a.out, d)
	}
	if err != nil {
		return err
	}
	if len(done) == 0 {
		fmt.Fprintln(a.out, "etcd auth: already set up, nothing changed")
	}
	return nil
}
