package adminctl

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/legation-io/legation/internal/resource"
	"github.com/legation-io/legation/internal/store"
)

type applyFlags struct {
	files   []string
	scope   string
	ttl     time.Duration
	dryRun  bool
	prune   bool
	chunked bool
	// checkRefs and strict: see checkReferences.
	checkRefs bool
	strict    bool
}

func (a *app) applyCommand() *cobra.Command {
	var f applyFlags
	cmd := &cobra.Command{
		Use:   "apply -f FILE|DIR|- [-f ...]",
		Short: "Write resources from YAML or JSON files, in one transaction",
		Long: `apply writes Envoy resources to etcd in one transaction, so Envoy sees all of
them at one revision or none of them.

Each -f names a file, a directory (its *.yaml, *.yml and *.json files, in
name order, not recursive) or - for standard input. A file holds one or more
YAML or JSON documents separated by "---" lines. A document is one Envoy v3
resource in proto3 JSON form with an "@type", or a whole DiscoveryResponse
(the format of Envoy's filesystem subscriptions, and what "get -o json"
prints).

Every resource is checked before anything is written: strict decoding
(unknown fields are errors), the Envoy protos' validation rules, also on
what every Any holds (typed_config: an unknown type is an error), an
HttpConnectionManager's router filter last, and non-empty names unique per
type across all the files. An error names the file, the document, the
resource, the field (its path through typed_config) and the rule.

--prune also deletes the resources of the scope that the files do not name:
the scope then holds exactly the files. It refuses to run with no resource
at all. --ttl puts every resource written under one new etcd lease: they
expire together unless written again. An apply larger than etcd's limits
(--max-txn-ops, --max-request-bytes) fails, unless --chunked splits it into
several transactions in make-before-break order (clusters and endpoints
first, deletions last), at the price of clients seeing it in parts.

--check-references warns (on standard error) about references that resolve
neither in the input nor in etcd (the scope, and for a node group the default
scope too): a route naming a missing cluster, a listener naming a missing
route configuration over RDS, an EDS cluster without endpoints. With
--strict they are errors and nothing is written.

The output lists every resource as created, changed, unchanged or deleted,
then the etcd revision the apply made.`,
		Example: `  xdsadmin apply -f examples/
  xdsadmin apply -f clusters.yaml -f endpoints.yaml --scope edge --dry-run
  xdsadmin get cluster -o yaml | xdsadmin apply -f -`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runApply(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVarP(&f.files, "filename", "f", nil, "file, directory or - (standard input) to read; repeatable")
	fl.StringVar(&f.scope, "scope", store.DefaultScope, "scope (node group) to write to")
	fl.DurationVar(&f.ttl, "ttl", 0, "time to live of the resources written, at least 1s (0: none)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print what would change, write nothing")
	fl.BoolVar(&f.prune, "prune", false, "delete the resources of the scope that the files do not name")
	fl.BoolVar(&f.chunked, "chunked", false, "split an apply beyond etcd's limits into several transactions")
	fl.BoolVar(&f.checkRefs, "check-references", false, "warn about routes naming missing clusters, listeners naming missing route configurations (RDS) and EDS clusters without endpoints, in the input and the scope")
	fl.BoolVar(&f.strict, "strict", false, "with --check-references: a missing reference is an error, and nothing is written")
	_ = cmd.MarkFlagFilename("filename", "yaml", "yml", "json")
	return cmd
}

func (a *app) runApply(ctx context.Context, f applyFlags) error {
	if err := resource.ValidateScope(f.scope); err != nil {
		return fmt.Errorf("--scope: %w", err)
	}
	if f.ttl < 0 || (f.ttl > 0 && f.ttl < time.Second) {
		return fmt.Errorf("--ttl %s: must be at least 1s (0: no TTL)", f.ttl)
	}
	if f.strict && !f.checkRefs {
		return errors.New("--strict needs --check-references")
	}
	docs, err := readDocs(f.files, a.in)
	if err != nil {
		return err
	}
	if len(docs) == 0 {
		msg := fmt.Sprintf("no resources in %s", strings.Join(f.files, ", "))
		if f.prune {
			msg += fmt.Sprintf(": refusing to --prune, which would delete every resource of scope %q (use delete for that)", f.scope)
		}
		return errors.New(msg)
	}
	req := store.PlanRequest{Prune: f.prune, PruneScope: f.scope, TTL: f.ttl}
	for _, d := range docs {
		req.Puts = append(req.Puts, store.Put{Key: store.Key{Type: d.Type, Scope: f.scope, Name: d.Name}, Body: d.Body})
	}
	ctx, cancel := a.commandContext(ctx)
	defer cancel()
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if f.checkRefs {
		if err := a.checkReferences(ctx, c, f.scope, docs, f.strict); err != nil {
			return err
		}
	}
	return a.execute(ctx, c, req, f.dryRun, store.ApplyOptions{Chunked: f.chunked})
}

// execute plans and applies req, planning once more if etcd changed in
// between, and prints the outcome. With dryRun it prints the plan and
// writes nothing.
func (a *app) execute(ctx context.Context, c *conn, req store.PlanRequest, dryRun bool, opts store.ApplyOptions) error {
	for attempt := 1; ; attempt++ {
		plan, err := c.store.MakePlan(ctx, req)
		if err != nil {
			return err
		}
		if dryRun {
			if err := a.printApply(plan, nil); err != nil {
				return err
			}
			return a.dryRunLimits(plan, opts)
		}
		res, err := c.store.Apply(ctx, plan, opts)
		if errors.Is(err, store.ErrConflict) && attempt < 2 {
			continue
		}
		if errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("%w (twice: another writer is busy with the same resources; nothing was written)", err)
		}
		if err != nil {
			return err
		}
		return a.printApply(plan, res)
	}
}

// dryRunLimits fails a dry run that the real apply would fail for its
// number of operations. (The byte size is estimated by Apply itself.)
func (a *app) dryRunLimits(plan *store.Plan, opts store.ApplyOptions) error {
	n := 0
	for _, c := range plan.Changes {
		if c.Action != store.Unchanged {
			n++
		}
	}
	if !opts.Chunked && n > a.opts.MaxTxnOps {
		return fmt.Errorf("%w: (dry run) the apply would fail: it needs %d operations in one transaction, more than etcd's --max-txn-ops (%d): use --chunked to split it",
			store.ErrLimit, n, a.opts.MaxTxnOps)
	}
	return nil
}

// applyOutput is the yaml/json form of an apply's or a delete's outcome.
type applyOutput struct {
	// Revision is the revision written at; for a dry run or an apply that
	// changed nothing, the revision the plan was read at.
	Revision int64 `json:"revision"`
	// Revisions are the revisions of the transactions: one, several when
	// chunked, none when nothing was written.
	Revisions []int64 `json:"revisions"`
	// Lease is the etcd lease the resources were written under, 0 for none.
	Lease   int64    `json:"lease"`
	DryRun  bool     `json:"dryRun"`
	Summary counts   `json:"summary"`
	Changes []change `json:"changes"`
}

// printApply prints a plan and, unless it was a dry run (res nil), what
// applying it wrote.
func (a *app) printApply(plan *store.Plan, res *store.ApplyResult) error {
	out := applyOutput{Revision: plan.Revision, Revisions: []int64{}, DryRun: res == nil, Changes: []change{}}
	if res != nil {
		out.Revision, out.Lease = res.Revision, res.Lease
		out.Revisions = append(out.Revisions, res.Revisions...)
	}
	for _, c := range plan.Changes {
		out.Summary.add(c.Action)
		out.Changes = append(out.Changes, changeOf(c))
	}
	if a.opts.Output != outputTable {
		return a.printStructured(out)
	}
	w := newTable(a.out)
	for _, c := range out.Changes {
		row(w, c.Action, c.Type, c.Scope, c.Name)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if out.DryRun {
		_, err := fmt.Fprintf(a.out, "(dry run) would be %s; planned at revision %d, nothing written\n", out.Summary, out.Revision)
		return err
	}
	line := fmt.Sprintf("%s at revision %d", out.Summary, out.Revision)
	if len(out.Revisions) > 1 {
		revs := make([]string, len(out.Revisions))
		for i, r := range out.Revisions {
			revs[i] = fmt.Sprint(r)
		}
		line += fmt.Sprintf(" (in %d transactions, at revisions %s)", len(revs), strings.Join(revs, ", "))
	}
	if out.Lease != 0 {
		line += fmt.Sprintf(", under lease %016x (ttl %s)", out.Lease, plan.TTL)
	}
	_, err := fmt.Fprintln(a.out, line)
	return err
}

func (a *app) deleteCommand() *cobra.Command {
	var scope string
	cmd := &cobra.Command{
		Use:   "delete TYPE NAME...",
		Short: "Delete resources, in one transaction",
		Long: `delete removes the named resources of one type and scope in one transaction.
If any of them does not exist, nothing is deleted.

TYPE is a short name (cluster, endpoint, listener, route, scoped-route,
virtual-host, secret, runtime, extension-config), an alias (cds, eds, ...)
or a type URL.`,
		Example:           `  xdsadmin delete cluster backend-a backend-b --scope edge`,
		Args:              minArgs(2),
		ValidArgsFunction: completeType,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runDelete(cmd.Context(), args[0], args[1:], scope)
		},
	}
	cmd.Flags().StringVar(&scope, "scope", store.DefaultScope, "scope (node group) to delete from")
	return cmd
}

func (a *app) runDelete(ctx context.Context, typeArg string, names []string, scope string) error {
	typ, err := resource.Lookup(typeArg)
	if err != nil {
		return err
	}
	if err := resource.ValidateScope(scope); err != nil {
		return fmt.Errorf("--scope: %w", err)
	}
	req := store.PlanRequest{}
	seen := map[string]bool{}
	for _, n := range names {
		if err := resource.ValidateName(n); err != nil {
			return err
		}
		if seen[n] {
			return fmt.Errorf("%s %q is named twice", typ.Name, n)
		}
		seen[n] = true
		req.Deletes = append(req.Deletes, store.Key{Type: typ, Scope: scope, Name: n})
	}
	ctx, cancel := a.commandContext(ctx)
	defer cancel()
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	err = a.execute(ctx, c, req, false, store.ApplyOptions{})
	if errors.Is(err, store.ErrNotFound) {
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
