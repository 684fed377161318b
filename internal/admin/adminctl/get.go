package adminctl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/state/xdstp"
)

type getFlags struct {
	scope    string
	revision int64
	// authority, when byAuthority, keeps the resources named
	// xdstp://authority/... only.
	authority   string
	byAuthority bool
}

func (a *app) getCommand() *cobra.Command {
	var f getFlags
	cmd := &cobra.Command{
		Use:   "get TYPE [NAME]",
		Short: "Show the stored resources of a type, now or at a past revision",
		Long: `get shows the resources of one type as stored in etcd, in every scope unless
--scope is given, now or at a past --revision (as long as etcd has not
compacted it). With NAME, only that resource; it is an error if it does not
exist. --authority keeps the resources named xdstp://AUTHORITY/... only
(--authority "" those of the empty authority, xdstp:///...).

TYPE is a short name (cluster, endpoint, listener, route, scoped-route,
virtual-host, secret, runtime, extension-config), an alias (cds, eds, ...)
or a type URL.

Output:
  table  TYPE, SCOPE, NAME, MOD_REVISION, LEASE and TTL columns, then the
         revision read at.
  yaml   one document per resource, in the form apply reads ("@type" plus
         the proto fields), with the revision and each resource's scope and
         mod_revision as comments.
  json   one DiscoveryResponse document holding the resources, with the
         revision as its version_info: the format of Envoy's filesystem
         subscriptions, and one that apply reads.
Both yaml and json can be given back to apply ("get -o yaml | apply -f -").
They do not carry the scope: apply writes to its own --scope, so read one
scope at a time to copy it.

Values in etcd that do not decode (written by another tool) are skipped
with a warning on standard error naming their key.`,
		Example: `  xdsadmin get clusters
  xdsadmin get cluster backend-a --scope default -o yaml
  xdsadmin get endpoint --revision 42`,
		Args:              rangeArgs(1, 2),
		ValidArgsFunction: completeType,
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 2 {
				name = args[1]
			}
			f.byAuthority = cmd.Flags().Changed("authority")
			return a.runGet(cmd.Context(), args[0], name, f)
		},
	}
	cmd.Flags().StringVar(&f.scope, "scope", "", "only this scope (default: every scope)")
	cmd.Flags().Int64Var(&f.revision, "revision", 0, "read at this past etcd revision (0: now)")
	cmd.Flags().StringVar(&f.authority, "authority", "", "only the resources named xdstp://AUTHORITY/... (\"\": xdstp:///...)")
	return cmd
}

func (a *app) runGet(ctx context.Context, typeArg, name string, f getFlags) error {
	typ, err := resource.Lookup(typeArg)
	if err != nil {
		return err
	}
	if f.scope != "" {
		if err := resource.ValidateScope(f.scope); err != nil {
			return fmt.Errorf("--scope: %w", err)
		}
	}
	if f.revision < 0 {
		return fmt.Errorf("--revision %d: must not be negative (0: now)", f.revision)
	}
	if name != "" {
		if name, err = typ.CheckName(name); err != nil {
			return err
		}
	}
	ctx, cancel := a.commandContext(ctx)
	defer cancel()
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()

	var found []*store.Resource
	var at int64
	if name != "" && f.scope != "" {
		found, at, err = getOne(ctx, c, typ, f.scope, name, f.revision)
	} else {
		found, at, err = a.getList(ctx, c, typ, f.scope, name, f.revision)
	}
	if err != nil {
		return err
	}
	if f.byAuthority {
		found = ofAuthority(found, f.authority)
	}

	switch a.opts.Output {
	case outputYAML:
		return a.printGetYAML(typ, found, at)
	case outputJSON:
		return a.printGetJSON(typ, found, at)
	}
	return a.printGetTable(ctx, c, typ, f.scope, found, at)
}

// ofAuthority keeps the resources of rs named xdstp://auth/...
func ofAuthority(rs []*store.Resource, auth string) []*store.Resource {
	out := rs[:0:0]
	for _, r := range rs {
		if a, ok := xdstp.AuthorityOf(r.Name); ok && a == auth {
			out = append(out, r)
		}
	}
	return out
}

// getOne reads the resource name of typ in scope at revision rev (0:
// now), and the revision read at; not found is an error.
func getOne(ctx context.Context, c *conn, typ *resource.Type, scope, name string, rev int64) ([]*store.Resource, int64, error) {
	r, cur, err := c.store.Get(ctx, store.Key{Type: typ, Scope: scope, Name: name}, rev)
	at := rev
	if at == 0 {
		at = cur
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, at, fmt.Errorf("%s %q not found in scope %q at revision %d", typ.Name, name, scope, at)
	case errors.Is(err, store.ErrMalformed):
		return nil, at, fmt.Errorf("%s %q in scope %q at revision %d cannot be shown: %w", typ.Name, name, scope, at, err)
	case err != nil:
		return nil, at, err
	}
	return []*store.Resource{r}, at, nil
}

// getList reads the resources of typ in scope ("": every scope), only
// those called name if not empty, at revision rev (0: now), and the
// revision read at. It warns about the values that do not decode; a name
// found in no scope is an error.
func (a *app) getList(ctx context.Context, c *conn, typ *resource.Type, scope, name string, rev int64) ([]*store.Resource, int64, error) {
	lr, err := c.store.List(ctx, store.ListOptions{Type: typ, Scope: scope, Revision: rev})
	if err != nil {
		return nil, 0, err
	}
	var found []*store.Resource
	for _, r := range lr.Resources {
		if name == "" || r.Name == name {
			found = append(found, r)
		}
	}
	var bad []store.Malformed
	for _, m := range lr.Malformed {
		if name == "" || strings.HasSuffix(m.EtcdKey, "/"+name) {
			bad = append(bad, m)
		}
	}
	a.warnMalformed(bad)
	if name != "" && len(found) == 0 {
		return nil, lr.Revision, fmt.Errorf("%s %q not found in any scope at revision %d", typ.Name, name, lr.Revision)
	}
	return found, lr.Revision, nil
}

func (a *app) printGetTable(ctx context.Context, c *conn, typ *resource.Type, scope string, rs []*store.Resource, at int64) error {
	if len(rs) == 0 {
		where := ""
		if scope != "" {
			where = fmt.Sprintf(" in scope %q", scope)
		}
		_, err := fmt.Fprintf(a.out, "no %s resources%s at revision %d\n", typ.Name, where, at)
		return err
	}
	// What is left of each lease, asked once per lease: one apply puts
	// all its resources under one.
	type left struct {
		ttl   int64
		known bool
	}
	leases := map[int64]left{}
	for _, r := range rs {
		if r.Lease == 0 {
			continue
		}
		if _, ok := leases[r.Lease]; ok {
			continue
		}
		resp, err := c.client.TimeToLive(ctx, clientv3.LeaseID(r.Lease))
		if err != nil {
			leases[r.Lease] = left{}
			continue
		}
		leases[r.Lease] = left{ttl: resp.TTL, known: true}
	}
	w := newTable(a.out)
	row(w, "TYPE", "SCOPE", "NAME", "MOD_REVISION", "LEASE", "TTL")
	for _, r := range rs {
		lease, ttl := "-", "-"
		if r.Lease != 0 {
			l := leases[r.Lease]
			lease = fmt.Sprintf("%016x", r.Lease)
			ttl = formatTTL(r.Envelope.GetTtl().AsDuration(), l.ttl, l.known)
		}
		row(w, r.Type.Name, r.Scope, r.Name, r.ModRevision, lease, ttl)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(a.out, "revision %d\n", at)
	return err
}

// printGetYAML prints one YAML document per resource. A resource that
// cannot be shown (an Any inside it names a type this binary does not
// know) is skipped with a warning.
func (a *app) printGetYAML(typ *resource.Type, rs []*store.Resource, at int64) error {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# %d %s resources at revision %d\n", len(rs), typ.Name, at)
	for _, r := range rs {
		js, err := marshalResource(shown(r))
		if err != nil {
			fmt.Fprintf(a.errOut, "warning: skipped %s: %v\n", r.Key, err)
			continue
		}
		y, err := yaml.JSONToYAML(js)
		if err != nil {
			fmt.Fprintf(a.errOut, "warning: skipped %s: %v\n", r.Key, err)
			continue
		}
		fmt.Fprintf(&buf, "---\n# %s %q, scope %q, mod_revision %d", r.Type.Name, r.Name, r.Scope, r.ModRevision)
		if r.Lease != 0 {
			fmt.Fprintf(&buf, ", lease %016x (ttl %s)", r.Lease, r.Envelope.GetTtl().AsDuration())
		}
		buf.WriteString("\n")
		buf.Write(y)
	}
	_, err := a.out.Write(buf.Bytes())
	return err
}

// shown is r's body as get prints it: as stored, or for a type whose
// message holds no name (LbEndpoint) in the discovery.v3.Resource that
// names it, the form apply takes back.
func shown(r *store.Resource) *anypb.Any {
	if !r.Type.Unnamed {
		return r.Envelope.GetBody()
	}
	w, err := anypb.New(&discoveryv3.Resource{Name: r.Name, Resource: r.Envelope.GetBody()})
	if err != nil {
		return r.Envelope.GetBody() // a Resource always marshals
	}
	return w
}

// printGetJSON prints the resources as one DiscoveryResponse document.
func (a *app) printGetJSON(typ *resource.Type, rs []*store.Resource, at int64) error {
	dr := &discoveryv3.DiscoveryResponse{VersionInfo: fmt.Sprint(at), TypeUrl: typ.URL}
	for _, r := range rs {
		// Check each one alone, so that one bad body is skipped rather than
		// failing the whole response.
		body := shown(r)
		if _, err := marshalResource(body); err != nil {
			fmt.Fprintf(a.errOut, "warning: skipped %s: %v\n", r.Key, err)
			continue
		}
		dr.Resources = append(dr.Resources, body)
	}
	doc, err := anypb.New(dr)
	if err != nil {
		return err
	}
	js, err := marshalResource(doc)
	if err != nil {
		return err
	}
	_, err = a.out.Write(append(js, '\n'))
	return err
}
