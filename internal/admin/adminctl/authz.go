package adminctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/legation-io/legation/internal/security/authz"
)

func (a *app) authzCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "authz",
		Short: "Manage the rules that say which node ids and groups a client identity may claim",
		Long: `authz manages the authorization rules the replicas enforce on clients that
present a certificate. A client's identity says where it comes from:

  spiffe://TRUST_DOMAIN/PATH  the certificate's SPIFFE URI SAN
  dns:NAME                    else its first DNS SAN, in lower case
  cn:NAME                     else its Subject CommonName

Only a URI SAN makes a SPIFFE ID: a CommonName that reads
"spiffe://example.org/x" is the identity "cn:spiffe://example.org/x".
Each identity has at most one rule, stored in etcd at
<prefix>authz/<identity, URL-path-escaped>, that says:

  nodes   patterns of the node ids it may claim
  groups  patterns of the groups its nodes may be in; a node with no group
          (the default scope only) is always allowed; no groups: only that
  admin   whether it may use the administrative APIs

Patterns are globs: '*' matches any run of characters, '/' included, '?'
exactly one character, '\' makes the next character literal. An identity
is compared exactly, never as a pattern.

An identity without a rule is denied, unless xds-node runs with
--authz-default-trust-domain TD and the identity is a SPIFFE id
spiffe://TD/...: it may then claim any node id and group (never admin). A
rule always wins over that default. Every replica sees a change within a
second or two.

Rules written before identities said their kind (a bare name such as
envoy-7.mesh.example.org) match no client: the replicas skip them and log
why, list warns about them, and migrate rewrites them.`,
		Example: `  xdsadmin authz grant spiffe://example.org/ns/edge/sa/envoy --nodes 'edge-*' --groups edge
  xdsadmin authz list`,
	}
	cmd.AddCommand(a.authzGrantCommand(), a.authzRevokeCommand(), a.authzListCommand(), a.authzMigrateCommand())
	return cmd
}

type authzGrantFlags struct {
	nodes  []string
	groups []string
	admin  bool
}

func (a *app) authzGrantCommand() *cobra.Command {
	var f authzGrantFlags
	cmd := &cobra.Command{
		Use:   "grant IDENTITY --nodes PATTERN[,PATTERN...] [--groups PATTERN,...] [--admin]",
		Short: "Set the rule of an identity (replacing its rule, if it has one)",
		Long: `grant sets what IDENTITY may claim: the node ids matching --nodes, in
the default scope or in a group matching --groups; --admin makes it an
administrator. The rule replaces the identity's rule, if it had one, as a
whole: give every pattern it should keep.

IDENTITY names its kind: a SPIFFE id, spiffe://TRUST_DOMAIN/PATH (checked:
lowercase trust domain, path segments of letters, digits, '.', '-', '_');
dns:NAME, a DNS SAN (a lowercase DNS name); or cn:NAME, a certificate's
CommonName. A bare name is refused. Nothing is written when the identity
or a pattern is invalid, or when the rule grants nothing (no --nodes and
no --admin).`,
		Example: `  xdsadmin authz grant spiffe://example.org/ns/edge/sa/envoy --nodes 'edge-*' --groups edge,canary
  xdsadmin authz grant dns:envoy-7.mesh.example.org --nodes envoy-7
  xdsadmin authz grant 'cn:Legacy Envoy 7' --nodes legacy-7
  xdsadmin authz grant spiffe://example.org/ns/ops/sa/deployer --admin`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runAuthzGrant(cmd.Context(), args[0], f)
		},
	}
	cmd.Flags().StringSliceVar(&f.nodes, "nodes", nil, "patterns of the node ids the identity may claim, comma-separated")
	cmd.Flags().StringSliceVar(&f.groups, "groups", nil, "patterns of the groups its nodes may be in, comma-separated (none: the default scope only)")
	cmd.Flags().BoolVar(&f.admin, "admin", false, "let the identity use the administrative APIs")
	return cmd
}

func (a *app) runAuthzGrant(ctx context.Context, identity string, f authzGrantFlags) error {
	r := authz.Rule{Identity: identity, Nodes: f.nodes, Groups: f.groups, Admin: f.admin}
	// Check everything before touching etcd, naming the flag at fault.
	if err := authz.ValidateIdentity(identity); err != nil {
		return err
	}
	for _, fl := range []struct {
		name     string
		patterns []string
	}{{"--nodes", f.nodes}, {"--groups", f.groups}} {
		for _, p := range fl.patterns {
			if _, err := authz.ParsePattern(p); err != nil {
				return fmt.Errorf("%s: %w", fl.name, err)
			}
		}
	}
	if len(f.nodes) == 0 && !f.admin {
		return fmt.Errorf("nothing to grant to %q: give --nodes, or --admin", identity)
	}
	if err := r.Validate(); err != nil {
		return err
	}

	ctx, cancel := a.commandContext(ctx)
	defer cancel()
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	prev, replaced, err := authz.Replace(ctx, c.client, a.opts.Prefix, r)
	if err != nil {
		return err
	}
	if a.opts.Output != outputTable {
		return a.printStructured(r)
	}
	fmt.Fprintf(a.out, "granted %s\n", r.Identity)
	printRule(a.out, r)
	if replaced {
		if prev.Identity == "" {
			fmt.Fprintln(a.out, "replacing a malformed rule")
		} else {
			fmt.Fprintln(a.out, "replacing:")
			printRule(a.out, prev)
		}
	}
	return nil
}

// printRule writes a rule's grants, indented, one per line.
func printRule(w io.Writer, r authz.Rule) {
	nodes := "none"
	if len(r.Nodes) > 0 {
		nodes = strings.Join(r.Nodes, ", ")
	}
	groups := "none (the default scope only)"
	if len(r.Groups) > 0 {
		groups = strings.Join(r.Groups, ", ") + " (and the default scope)"
	}
	admin := "no"
	if r.Admin {
		admin = "yes"
	}
	fmt.Fprintf(w, "  nodes   %s\n  groups  %s\n  admin   %s\n", nodes, groups, admin)
}

func (a *app) authzRevokeCommand() *cobra.Command {
	var untyped bool
	cmd := &cobra.Command{
		Use:   "revoke IDENTITY",
		Short: "Delete the rule of an identity",
		Long: `revoke deletes IDENTITY's rule; every replica sees it within a second or
two. The identity is then denied, unless it is a SPIFFE id of the trust
domain given to xds-node as --authz-default-trust-domain: without a rule,
it falls back to that default (to confine such an identity, grant it a
narrower rule instead). It fails if the identity has no rule.

IDENTITY names its kind, as in grant. --untyped deletes a rule stored
before identities said their kind, named as it is stored (see list and
migrate).`,
		Example: `  xdsadmin authz revoke spiffe://example.org/ns/edge/sa/envoy
  xdsadmin authz revoke dns:envoy-7.mesh.example.org
  xdsadmin authz revoke --untyped envoy-7.mesh.example.org`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runAuthzRevoke(cmd.Context(), args[0], untyped)
		},
	}
	cmd.Flags().BoolVar(&untyped, "untyped", false, "IDENTITY is the bare name of a rule stored without its kind")
	return cmd
}

func (a *app) runAuthzRevoke(ctx context.Context, identity string, untyped bool) error {
	if identity == "" {
		return errors.New("identity: empty")
	}
	err := authz.ValidateIdentity(identity)
	switch {
	case untyped && err == nil:
		return fmt.Errorf("--untyped: identity %q says its kind: revoke it without --untyped", identity)
	case untyped && !errors.Is(err, authz.ErrUntyped):
		return err
	case !untyped && errors.Is(err, authz.ErrUntyped):
		return fmt.Errorf("%w (to delete a rule stored without its kind, give --untyped)", err)
	}
	ctx, cancel := a.commandContext(ctx)
	defer cancel()
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	existed, err := authz.Revoke(ctx, c.client, a.opts.Prefix, identity)
	if err != nil {
		return err
	}
	if !existed {
		return fmt.Errorf("no rule for identity %q at %s (see xdsadmin authz list)", identity, authz.Key(a.opts.Prefix, identity))
	}
	_, err = fmt.Fprintf(a.out, "revoked %s\n", identity)
	return err
}

func (a *app) authzListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the authorization rules",
		Long: `list shows every rule, sorted by identity.

Output:
  table  IDENTITY, NODES, GROUPS (patterns, comma-separated; "-" for none)
         and ADMIN.
  yaml   the rules as stored: identity, nodes, groups, admin.
  json   the same as JSON.

Values under <prefix>authz/ that are not valid rules (the replicas skip
them) are reported in warnings on standard error, rules stored without
their identity's kind among them (see migrate).`,
		Example: `  xdsadmin authz list
  xdsadmin authz list -o json | jq -r '.[] | select(.admin) | .identity'`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runAuthzList(cmd.Context())
		},
	}
}

func (a *app) runAuthzList(ctx context.Context) error {
	ctx, cancel := a.commandContext(ctx)
	defer cancel()
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	rules, bad, _, err := authz.Read(ctx, c.client, a.opts.Prefix)
	if err != nil {
		return err
	}
	untyped := 0
	for _, b := range bad {
		fmt.Fprintf(a.errOut, "warning: skipped malformed rule at key %q (mod_revision %d): %v\n", b.Key, b.ModRevision, b.Err)
		if errors.Is(b.Err, authz.ErrUntyped) {
			untyped++
		}
	}
	if untyped > 0 {
		fmt.Fprintf(a.errOut, "warning: %d rule(s) name an identity without its kind and match no client: "+
			"rewrite them with xdsadmin authz migrate --as dns (DNS SANs) or --as cn (CommonNames); try --dry-run first\n", untyped)
	}
	if rules == nil {
		rules = []authz.Rule{} // [] in JSON, not null
	}
	if a.opts.Output != outputTable {
		return a.printStructured(rules)
	}
	if len(rules) == 0 {
		_, err := fmt.Fprintf(a.out, "no rules under %s\n", authz.Dir(a.opts.Prefix))
		return err
	}
	w := newTable(a.out)
	row(w, "IDENTITY", "NODES", "GROUPS", "ADMIN")
	for _, r := range rules {
		admin := "no"
		if r.Admin {
			admin = "yes"
		}
		row(w, r.Identity, joinOrDash(r.Nodes), joinOrDash(r.Groups), admin)
	}
	return w.Flush()
}

func joinOrDash(ss []string) string {
	if len(ss) == 0 {
		return "-"
	}
	return strings.Join(ss, ",")
}
