package adminctl

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
)

func (a *app) deleteCommand() *cobra.Command {
	var scope, message string
	var lockTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "delete TYPE NAME...",
		Short: "Delete resources, in one transaction",
		Long: `delete removes the named resources of one type and scope in one transaction.
If any of them does not exist, nothing is deleted. Like apply, it holds the
scope's apply lock while it plans and commits, waiting up to --lock-timeout.

TYPE is a short name (cluster, endpoint, listener, route, scoped-route,
virtual-host, secret, runtime, extension-config), an alias (cds, eds, ...)
or a type URL.`,
		Example:           `  xdsadmin delete cluster backend-a backend-b --scope edge`,
		Args:              minArgs(2),
		ValidArgsFunction: completeType,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkMessage(message); err != nil {
				return err
			}
			return a.runDelete(cmd.Context(), args[0], args[1:], lockSpec{scope: scope, timeout: lockTimeout}, message)
		},
	}
	cmd.Flags().StringVar(&scope, "scope", store.DefaultScope, "scope (node group) to delete from")
	cmd.Flags().StringVarP(&message, "message", "m", "", "what the deletion is for, kept in the history with it (one line, at most 1024 bytes)")
	cmd.Flags().DurationVar(&lockTimeout, "lock-timeout", defaultLockTimeout, "how long to wait for the scope's apply lock, held by another apply or delete; then fail, deleting nothing")
	return cmd
}

func (a *app) runDelete(ctx context.Context, typeArg string, names []string, l lockSpec, message string) error {
	scope := l.scope
	typ, err := resource.Lookup(typeArg)
	if err != nil {
		return err
	}
	if err := checkLockTimeout(l.timeout); err != nil {
		return err
	}
	if err := resource.ValidateScope(scope); err != nil {
		return fmt.Errorf("--scope: %w", err)
	}
	req := store.PlanRequest{}
	seen := map[string]bool{}
	for _, n := range names {
		n, err := typ.CheckName(n)
		if err != nil {
			return err
		}
		if seen[n] {
			return fmt.Errorf("%s %q is named twice", typ.Name, n)
		}
		seen[n] = true
		req.Deletes = append(req.Deletes, store.Key{Type: typ, Scope: scope, Name: n})
	}
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	err = a.execute(ctx, c, req, l, false, store.ApplyOptions{Kind: store.KindDelete, Message: message}, nil)
	if errors.Is(err, store.ErrNotFound) {
		ctx, cancel := a.commandContext(ctx)
		defer cancel()
		return a.notFound(ctx, c, typ, scope, names, err)
	}
	return err
}

// notFound explains which of names are missing, reading the scope again:
// the plan's error names only the first.
func (a *app) notFound(ctx context.Context, c *conn, typ *resource.Type, scope string, names []string, planErr error) error {
	lr, err := c.store.List(ctx, store.ListOptions{Type: typ, Scope: scope})
	if err != nil {
		return fmt.Errorf("%w; nothing deleted", planErr)
	}
	have := map[string]bool{}
	for _, r := range lr.Resources {
		have[r.Name] = true
	}
	dir := c.store.EtcdKey(store.Key{Type: typ, Scope: scope})
	for _, m := range lr.Malformed {
		// A malformed value still names its key, and can be deleted.
		if n, ok := strings.CutPrefix(m.EtcdKey, dir); ok {
			have[n] = true
		}
	}
	var missing []string
	for _, n := range names {
		if !have[n] {
			missing = append(missing, fmt.Sprintf("%q", n))
		}
	}
	if len(missing) == 0 {
		return fmt.Errorf("%w; nothing deleted", planErr)
	}
	return fmt.Errorf("%s %s not found in scope %q at revision %d; nothing deleted", typ.Name, strings.Join(missing, ", "), scope, lr.Revision)
}
