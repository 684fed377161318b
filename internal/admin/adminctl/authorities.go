package adminctl

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/legation-io/legation/internal/cluster/shard"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/xdstp"
)

// checkAuthorities refuses, before anything is written, docs named for
// an xdstp:// authority that no registered replica serves: the replicas
// would store such a resource and never serve it (they serve the
// authorities of their --authority, the empty one and old-style names,
// and say so in the registry record). An operator staging resources
// ahead of the replicas' flags gives --allow-unserved-authority. With no
// replica registered (none running, or standalone ones, which keep no
// record) the authorities served are unknown: apply says so and writes.
func (a *app) checkAuthorities(ctx context.Context, c *conn, docs []resource.Doc) error {
	byAuth := map[string]string{} // authority -> the first resource named for it
	for _, d := range docs {
		if auth, ok := xdstp.AuthorityOf(d.Name); ok && auth != "" {
			if _, seen := byAuth[auth]; !seen {
				byAuth[auth] = fmt.Sprintf("%s: %s %q", d.Where(), d.Type.Name, d.Name)
			}
		}
	}
	if len(byAuth) == 0 {
		return nil
	}
	members, err := shard.ListRegistry(ctx, c.client, a.opts.Prefix)
	if err != nil {
		return err
	}
	auths := make([]string, 0, len(byAuth))
	for auth := range byAuth {
		auths = append(auths, auth)
	}
	slices.Sort(auths)
	if len(members) == 0 {
		fmt.Fprintf(a.errOut, "warning: no replica is registered, so which xdstp authorities the cluster serves is unknown; %s not checked\n", strings.Join(auths, ", "))
		return nil
	}
	served := map[string]bool{}
	for _, m := range members {
		for _, auth := range m.Authorities {
			served[auth] = true
		}
	}
	var bad []string
	for _, auth := range auths {
		if !served[auth] {
			bad = append(bad, fmt.Sprintf("%s: authority %q", byAuth[auth], auth))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("no registered replica serves %s (the replicas serve %s, by xds-node --authority); nothing written; --allow-unserved-authority writes it anyway",
		strings.Join(bad, "; "), servedList(served))
}

// servedList names the authorities served, for messages.
func servedList(served map[string]bool) string {
	if len(served) == 0 {
		return "no authority: only old-style and xdstp:/// names"
	}
	names := make([]string, 0, len(served))
	for auth := range served {
		names = append(names, fmt.Sprintf("%q", auth))
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
