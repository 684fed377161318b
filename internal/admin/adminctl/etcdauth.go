package adminctl

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/legation-io/legation/internal/security/etcdauth"
)

type etcdAuthFlags struct {
	replicaUsers, adminUsers, rolloutUsers []string
}

func (a *app) etcdAuthCommand() *cobra.Command {
	var f etcdAuthFlags
	cmd := &cobra.Command{
		Use:   "etcd-auth",
		Short: "Set up etcd's least-privilege roles and users, and enable auth",
		Long: `etcd-auth sets up etcd's authentication as docs/operations/etcd.md
describes it, on --etcd-prefix: the roles legation-replica (read the
prefix; write status records, the membership registry and load windows)
legation-admin (read and write the prefix) and legation-rollouts (write
what the rollout controller writes when it promotes or aborts a rollout:
resources, apply markers, history, rollouts), the users of --replica-user,
--admin-user and --rollout-user holding them, the root user, and auth
enabled. Give legation-rollouts to the replicas' users (--rollout-user) to
let the replicas promote and abort rollouts themselves; without it, their
rollout controller cannot, and rollouts wait for xdsadmin rollout promote
or abort. The users get no password: with etcd's --client-cert-auth a
client certificate whose CN is a user's name logs in as that user.

It is idempotent: run again, it adds only what is missing (and restores a
grant of the roles changed by hand). Run it as root (a client
certificate with CN root) or before auth is enabled. The Helm chart's
bundled etcd runs it in a Job at each install and upgrade.`,
		Example: `  xdsadmin --etcd-endpoints https://etcd-0:2379 --etcd-cacert ca.crt \
    --etcd-cert root.crt --etcd-key root.key etcd-auth \
    --replica-user legation-replica --admin-user legation-admin \
    --rollout-user legation-replica`,
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
	fl.StringSliceVar(&f.rolloutUsers, "rollout-user", nil,
		"users given the role legation-rollouts besides their own, comma separated: the replicas' users, for their rollout controller to promote and abort rollouts (none: rollouts wait for xdsadmin rollout promote or abort)")
	return cmd
}

func (a *app) runEtcdAuth(ctx context.Context, f etcdAuthFlags) error {
	cfg := etcdauth.Config{Prefix: a.opts.Prefix, ReplicaUsers: f.replicaUsers, AdminUsers: f.adminUsers, RolloutUsers: f.rolloutUsers}
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
