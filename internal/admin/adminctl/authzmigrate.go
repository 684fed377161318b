package adminctl

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/legation-io/legation/internal/security/authz"
)

type authzMigrateFlags struct {
	as     string
	dryRun bool
}

func (a *app) authzMigrateCommand() *cobra.Command {
	var f authzMigrateFlags
	cmd := &cobra.Command{
		Use:   "migrate --as dns|cn [IDENTITY...] [--dry-run]",
		Short: "Rewrite rules stored without their identity's kind to dns:NAME or cn:NAME",
		Long: `migrate rewrites the rules stored before identities said their kind: a
bare name, such as envoy-7.mesh.example.org, that the replicas now skip
(it could be taken for a SPIFFE ID by a certificate whose CommonName reads
like one). With --as dns each becomes dns:NAME (the name in lower case),
the identity of a certificate whose first DNS SAN is NAME and that has no
SPIFFE URI SAN; with --as cn each becomes cn:NAME, that of a certificate
with no SAN but CommonName NAME. Say which by how your certificates are
made; if some are of each kind, name the identities to rewrite as
arguments and run migrate once per kind.

Each rule moves to its new key in one etcd transaction that deletes the
old key and writes the new one, only if the old key is unchanged since it
was read and the new identity has no rule yet. A rule that is not
rewritten is shown with the reason, and the command then fails; run it
again once fixed. --dry-run shows what would be rewritten and writes
nothing.`,
		Example: `  xdsadmin authz migrate --as dns --dry-run
  xdsadmin authz migrate --as dns
  xdsadmin authz migrate --as cn 'Legacy Envoy 7'`,
		Args: cobra.ArbitraryArgs, // any identities
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runAuthzMigrate(cmd.Context(), args, f)
		},
	}
	cmd.Flags().StringVar(&f.as, "as", "", "the kind the untyped identities are given: dns (DNS SANs) or cn (CommonNames); required")
	cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, "show what would be rewritten, write nothing")
	return cmd
}

// migrationRow is a migration as -o json and yaml show it.
type migrationRow struct {
	authz.Migration
	Error string `json:"error,omitempty"`
}

func (a *app) runAuthzMigrate(ctx context.Context, identities []string, f authzMigrateFlags) error {
	if f.as != authz.KindDNS && f.as != authz.KindCN {
		return fmt.Errorf("--as %q: give --as dns (the identities are DNS SANs) or --as cn (CommonNames)", f.as)
	}
	ctx, cancel := a.commandContext(ctx)
	defer cancel()
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	ms, err := authz.Migrate(ctx, c.client, a.opts.Prefix, authz.MigrateOptions{Kind: f.as, Identities: identities, DryRun: f.dryRun})
	if err != nil {
		return err
	}
	failed := 0
	rows := make([]migrationRow, 0, len(ms))
	for _, m := range ms {
		row := migrationRow{Migration: m}
		if m.Err != nil {
			row.Error = m.Err.Error()
			failed++
		}
		rows = append(rows, row)
	}
	if a.opts.Output != outputTable {
		if err := a.printStructured(rows); err != nil {
			return err
		}
	} else {
		a.printMigrations(ms, f.dryRun)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d rules stored without their kind not rewritten (see above)", failed, len(ms))
	}
	return nil
}

func (a *app) printMigrations(ms []authz.Migration, dryRun bool) {
	if len(ms) == 0 {
		fmt.Fprintf(a.out, "no rules without their kind under %s\n", authz.Dir(a.opts.Prefix))
		return
	}
	for _, m := range ms {
		switch {
		case m.Err != nil:
			fmt.Fprintf(a.out, "not rewritten %q (%s): %v\n", m.From, m.Key, m.Err)
		case dryRun:
			fmt.Fprintf(a.out, "would rewrite %q to %q (%s)\n", m.From, m.To, m.NewKey)
		default:
			fmt.Fprintf(a.out, "rewrote %q to %q (%s)\n", m.From, m.To, m.NewKey)
		}
	}
}
