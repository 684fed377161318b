package adminctl

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
)

// checkReferences looks for the references of docs (resource.Refs) that
// resolve neither in docs nor in etcd, in scope or, for a node group, in
// the default scope its nodes see too. It prints each as a warning on
// errOut; with strict, it returns them as one error instead, and the
// apply writes nothing.
func (a *app) checkReferences(ctx context.Context, c *conn, scope string, docs []resource.Doc, strict bool) error {
	known := map[*resource.Type]map[string]bool{}
	add := func(t *resource.Type, name string) {
		if known[t] == nil {
			known[t] = map[string]bool{}
		}
		known[t][name] = true
	}
	for _, d := range docs {
		add(d.Type, d.Name)
	}
	scopes := []string{scope}
	if scope != store.DefaultScope {
		scopes = append(scopes, store.DefaultScope)
	}
	for _, t := range []*resource.Type{resource.Cluster, resource.Route, resource.Endpoint} {
		for _, s := range scopes {
			res, err := c.store.List(ctx, store.ListOptions{Type: t, Scope: s})
			if err != nil {
				return fmt.Errorf("--check-references: %w", err)
			}
			for _, r := range res.Resources {
				add(t, r.Key.Name)
			}
		}
	}
	where := fmt.Sprintf("scope %q", scope)
	if scope != store.DefaultScope {
		where = fmt.Sprintf("scope %q or %q", scope, store.DefaultScope)
	}
	var missing []string
	for _, d := range docs {
		for _, r := range resource.Refs(d.Message) {
			name, err := r.Type.CheckName(r.Name)
			if err != nil {
				missing = append(missing, fmt.Sprintf("%s (%s %q): %s: %v", d.Where(), d.Type.Name, d.Name, r.Path, err))
				continue
			}
			if known[r.Type][name] {
				continue
			}
			missing = append(missing, fmt.Sprintf("%s (%s %q): %s: %s %q is neither in the input nor in %s",
				d.Where(), d.Type.Name, d.Name, r.Path, r.Type.Name, r.Name, where))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if strict {
		return fmt.Errorf("--strict: %d missing reference(s), nothing written:\n  %s", len(missing), strings.Join(missing, "\n  "))
	}
	var errs []error
	for _, m := range missing {
		_, err := fmt.Fprintf(a.errOut, "warning: %s\n", m)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
