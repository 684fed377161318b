package adminctl

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/spf13/cobra"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
)

func (a *app) ttlCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ttl",
		Short: "Manage TTL'd resources (written with apply --ttl)",
		Example: `  xdsadmin apply -f incident-override.yaml --ttl 10m
  xdsadmin ttl refresh runtime incident-override`,
	}
	cmd.AddCommand(a.ttlRefreshCommand())
	return cmd
}

type ttlRefreshFlags struct {
	scope string
	all   bool
}

func (a *app) ttlRefreshCommand() *cobra.Command {
	var f ttlRefreshFlags
	cmd := &cobra.Command{
		Use:   "refresh TYPE NAME... | refresh --all [TYPE]",
		Short: "Keep TTL'd resources alive for one more period",
		Long: `refresh keeps TTL'd resources alive for one more period: their etcd lease
starts its TTL (the one apply --ttl gave) over. The replicas then send each
client that reads TTLs a heartbeat with the new TTL, at the same version.

A lease is shared by every resource of the apply that created it, so
refreshing one resource refreshes all of them; the output lists each lease
once with the resources named. With --all, every TTL'd resource of the
scope (of TYPE, if given) is refreshed.

It fails, before refreshing anything, if a named resource does not exist or
has no TTL; and for a lease that expired meanwhile (its resources are gone).`,
		Example: `  xdsadmin ttl refresh runtime incident-override
  xdsadmin ttl refresh route canary --scope edge
  xdsadmin ttl refresh --all --scope edge`,
		ValidArgsFunction: completeType,
		Args: func(c *cobra.Command, args []string) error {
			switch {
			case f.all && len(args) > 1:
				return usageError(c, errors.New("--all refreshes every TTL'd resource of the scope (of TYPE, if given): give no NAME with it, or drop --all"))
			case !f.all && len(args) < 2:
				return usageError(c, errors.New("give TYPE and the NAMEs to refresh, or --all [TYPE] for every TTL'd resource of the scope"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runTTLRefresh(cmd.Context(), args, f)
		},
	}
	cmd.Flags().StringVar(&f.scope, "scope", store.DefaultScope, "scope (node group) of the resources")
	cmd.Flags().BoolVar(&f.all, "all", false, "refresh every TTL'd resource of the scope (of TYPE, if given)")
	return cmd
}

// refreshedLease is one line of ttl refresh's output.
type refreshedLease struct {
	Lease     string   `json:"lease"`
	TTL       string   `json:"ttl"`
	Resources []string `json:"resources"` // type/name
}

func (a *app) runTTLRefresh(ctx context.Context, args []string, f ttlRefreshFlags) error {
	if err := resource.ValidateScope(f.scope); err != nil {
		return fmt.Errorf("--scope: %w", err)
	}
	var typ *resource.Type
	if len(args) > 0 {
		var err error
		if typ, err = resource.Lookup(args[0]); err != nil {
			return err
		}
	}
	var names []string
	if !f.all {
		names = make([]string, 0, len(args)-1)
		for _, n := range args[1:] {
			norm, err := typ.CheckName(n)
			if err != nil {
				return fmt.Errorf("%s %q: %w", typ.Name, n, err)
			}
			names = append(names, norm)
		}
	}
	ctx, cancel := a.commandContext(ctx)
	defer cancel()
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()

	// Every resource is found and checked before any lease is refreshed.
	var byLease map[int64][]string
	if f.all {
		byLease, err = ttlLeasesOfScope(ctx, c, typ, f.scope)
	} else {
		byLease, err = ttlLeasesOf(ctx, c, typ, f.scope, names)
	}
	if err != nil {
		return err
	}
	out, err := refreshLeases(ctx, c, byLease)
	if err != nil {
		return err
	}
	return a.printRefreshed(out)
}

// ttlLeasesOfScope finds the leases of every TTL'd resource of scope, of
// typ if not nil, each with the resources (type/name) it holds; none is
// an error.
func ttlLeasesOfScope(ctx context.Context, c *conn, typ *resource.Type, scope string) (map[int64][]string, error) {
	byLease := map[int64][]string{}
	types := resource.All()
	if typ != nil {
		types = []*resource.Type{typ}
	}
	for _, t := range types {
		lr, err := c.store.List(ctx, store.ListOptions{Type: t, Scope: scope})
		if err != nil {
			return nil, err
		}
		for _, r := range lr.Resources {
			if r.Lease != 0 {
				byLease[r.Lease] = append(byLease[r.Lease], t.Name+"/"+r.Name)
			}
		}
	}
	if len(byLease) == 0 {
		what := "resource"
		if typ != nil {
			what = typ.Name
		}
		return nil, fmt.Errorf("no TTL'd %s in scope %q", what, scope)
	}
	return byLease, nil
}

// ttlLeasesOf finds the leases of the resources names of typ in scope,
// each with the resources (type/name) named that it holds; a resource
// missing or without a TTL is an error.
func ttlLeasesOf(ctx context.Context, c *conn, typ *resource.Type, scope string, names []string) (map[int64][]string, error) {
	byLease := map[int64][]string{}
	for _, n := range names {
		r, _, err := c.store.Get(ctx, store.Key{Type: typ, Scope: scope, Name: n}, 0)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return nil, fmt.Errorf("%s %q not found in scope %q (nothing was refreshed)", typ.Name, n, scope)
		case err != nil:
			return nil, err
		case r.Lease == 0:
			return nil, fmt.Errorf("%s %q in scope %q has no TTL: it was applied without --ttl (nothing was refreshed)", typ.Name, n, scope)
		}
		byLease[r.Lease] = append(byLease[r.Lease], typ.Name+"/"+n)
	}
	return byLease, nil
}

// refreshLeases refreshes the leases of byLease in the order of their
// ids, stopping at the first that fails.
func refreshLeases(ctx context.Context, c *conn, byLease map[int64][]string) ([]refreshedLease, error) {
	ids := make([]int64, 0, len(byLease))
	for id := range byLease {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	out := make([]refreshedLease, 0, len(ids))
	for i, id := range ids {
		ttl, err := c.store.RefreshLease(ctx, id)
		if err != nil {
			done := ""
			if i > 0 {
				done = fmt.Sprintf(" (%d lease(s) before it were refreshed)", i)
			}
			return nil, fmt.Errorf("refresh %v: %w%s", byLease[id], err, done)
		}
		out = append(out, refreshedLease{Lease: fmt.Sprintf("%016x", id), TTL: ttl.String(), Resources: byLease[id]})
	}
	return out, nil
}

// printRefreshed prints the leases refreshed in the output format.
func (a *app) printRefreshed(out []refreshedLease) error {
	if a.opts.Output != outputTable {
		return a.printStructured(out)
	}
	w := newTable(a.out)
	row(w, "LEASE", "TTL", "RESOURCES")
	for _, l := range out {
		for i, r := range l.Resources {
			if i == 0 {
				row(w, l.Lease, l.TTL, r)
			} else {
				row(w, "", "", r)
			}
		}
	}
	return w.Flush()
}
