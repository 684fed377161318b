package adminctl

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/tracing"
)

type applyFlags struct {
	files         []string
	scope         string
	ttl           time.Duration
	dryRun        bool
	prune         bool
	pruneTypes    []string
	pruneAllTypes bool
	maxDeletions  int
	chunked       bool
	lockTimeout   time.Duration
	// checkRefs and strict: see checkReferences.
	checkRefs       bool
	strict          bool
	allowInlineKeys bool // write inline private keys outside secrets (refuseInlineKeys)
	allowUnserved   bool // write names of authorities no replica serves (checkAuthorities)
	message         string
	canary          canaryFlags
}

// defaultLockTimeout is how long apply and delete wait for the scope's
// apply lock.
const defaultLockTimeout = 30 * time.Second

// defaultMaxDeletions is how many resources --prune may delete unless
// --max-deletions raises it: enough for everyday removals, few enough that
// a file missing most of a scope is refused.
const defaultMaxDeletions = 10

// maxAttempts bounds how many times an apply plans and tries to commit
// when other writers move what it declares.
const maxAttempts = 3

func (a *app) applyCommand() *cobra.Command {
	var f applyFlags
	cmd := &cobra.Command{
		Use:   "apply -f FILE|DIR|- [-f ...]",
		Short: "Write resources from YAML or JSON files, in one transaction",
		Long:  applyLong,
		Example: `  xdsadmin apply -f examples/
  xdsadmin apply -f clusters.yaml -f endpoints.yaml --scope edge --dry-run
  xdsadmin apply -f clusters.yaml --prune --dry-run
  xdsadmin apply -f examples/ --prune-all-types --prune --max-deletions 50
  xdsadmin get cluster -o yaml | xdsadmin apply -f -
  xdsadmin apply -f routes.yaml --canary 10% --bake 5m -m "retry on 503"`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.checkPrune(cmd.Flags().Changed("max-deletions")); err != nil {
				return err
			}
			if err := checkMessage(f.message); err != nil {
				return err
			}
			if err := f.canary.check(&f, cmd.Flags().Changed); err != nil {
				return err
			}
			return a.runApply(cmd.Context(), f)
		},
	}
	f.addFlags(cmd)
	return cmd
}

// applyLong is apply's help.
const applyLong = `apply writes Envoy resources to etcd in one transaction, so Envoy sees all of
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

A private key inline (inline_bytes, inline_string) anywhere but in a secret
is refused, naming the field (a TlsCertificate's private_key, pkcs12,
password, private_key_provider; ssl_credentials): reference it over SDS or
name a file. --allow-inline-keys writes it anyway; replicas then send such
resources only to clients allowed the scope's secrets.

--prune also deletes the resources of the scope that the files do not name,
of the types the files hold: "apply -f clusters.yaml --prune" deletes only
clusters. --prune-types names the types to prune instead, and
--prune-all-types prunes every type: the scope then holds exactly the files.
A prune refuses to run with no resource at all, and to delete more than
--max-deletions resources (default 10): nothing is written and the error
says how many it would have deleted. --dry-run lists exactly what it would
delete.

An apply is serializable: it commits only if nothing it declares (written
or unchanged) and nothing in the types it prunes changed since it was
planned. If something moved, it says so on standard error and plans again,
up to 3 times, then fails naming what moved, having written nothing. Applies
and deletes to one scope take turns: each holds the scope's apply lock in
etcd from its plan to its commit, waiting up to --lock-timeout (default
30s) for it. --ttl puts every resource written under one new etcd lease:
they expire together unless written again. An apply larger than etcd's limits
(--max-txn-ops, --max-request-bytes) fails, unless --chunked splits it into
several transactions in make-before-break order (clusters and endpoints
first, deletions last), at the price of clients seeing it in parts.

--check-references warns (on standard error) about references that resolve
neither in the input nor in etcd (the scope, and for a node group the default
scope too): a route naming a missing cluster, a listener naming a missing
route configuration over RDS, an EDS cluster without endpoints. With
--strict they are errors and nothing is written.

--canary SELECTOR writes the change as a canary rollout instead (see
rollout): only the nodes SELECTOR picks are served it at first, a share of
nodes ("10%", by a hash of the node id, the same nodes on every replica),
the nodes whose id matches a pattern ("node:edge-eu-*") or a group
("group:NAME"). Once every canary node sent it ACKed and --bake passed with
at most --max-rejections of them rejecting it, the replicas promote it (one
ordinary apply); one more rejection aborts it. --promote manual leaves the
promotion to "xdsadmin rollout promote". A rollout writes resources only
(no --prune, --ttl or --chunked), and refuses a resource another running
rollout changes.

The output lists every resource as created, changed, unchanged or deleted,
then the etcd revision the apply made.`

// addFlags defines apply's flags on cmd, bound to f.
func (f *applyFlags) addFlags(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringArrayVarP(&f.files, "filename", "f", nil, "file, directory or - (standard input) to read; repeatable")
	fl.StringVar(&f.scope, "scope", store.DefaultScope, "scope (node group) to write to, and to prune")
	fl.StringVarP(&f.message, "message", "m", "", "what the change is for, kept in the history with it (one line, at most 1024 bytes)")
	fl.DurationVar(&f.ttl, "ttl", 0, "time to live of the resources written, under one new etcd lease: unless written again, they expire together; at least 1s (0: none)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print what would change, every prune deletion included, and write nothing; fails, after printing, if the apply would fail (--max-deletions, etcd's limits)")
	fl.BoolVar(&f.prune, "prune", false, "delete the resources of the scope, of the types the files hold, that the files do not name")
	fl.StringSliceVar(&f.pruneTypes, "prune-types", nil, "with --prune: the types to prune, comma-separated (cluster, cds, or a type URL), instead of those the files hold")
	fl.BoolVar(&f.pruneAllTypes, "prune-all-types", false, "with --prune: prune every type")
	fl.IntVar(&f.maxDeletions, "max-deletions", defaultMaxDeletions, "with --prune: refuse to delete more than this many resources")
	fl.BoolVar(&f.chunked, "chunked", false, "split an apply beyond etcd's limits (--max-txn-ops, --max-request-bytes) into several transactions, in make-before-break order; clients may see it in parts")
	fl.DurationVar(&f.lockTimeout, "lock-timeout", defaultLockTimeout, "how long to wait for the scope's apply lock, held by another apply or delete; then fail, writing nothing")
	fl.BoolVar(&f.checkRefs, "check-references", false, "warn about routes naming missing clusters, listeners naming missing route configurations (RDS) and EDS clusters without endpoints, in the input and the scope")
	fl.BoolVar(&f.strict, "strict", false, "with --check-references: a missing reference is an error, and nothing is written")
	fl.BoolVar(&f.allowInlineKeys, "allow-inline-keys", false, "write resources other than secrets that carry an inline private key (RISK: the key goes wherever the resource goes; replicas send such resources only to clients allowed secrets)")
	fl.BoolVar(&f.allowUnserved, "allow-unserved-authority", false, "write resources named for an xdstp:// authority that no registered replica serves (xds-node --authority), which the replicas store but do not serve")
	f.canary.add(cmd)
	_ = cmd.MarkFlagFilename("filename", "yaml", "yml", "json")
}

// checkPrune refuses the prune flags' bad combinations; maxSet says
// whether --max-deletions was given.
func (f *applyFlags) checkPrune(maxSet bool) error {
	if !f.prune {
		switch {
		case len(f.pruneTypes) > 0:
			return errors.New("--prune-types needs --prune")
		case f.pruneAllTypes:
			return errors.New("--prune-all-types needs --prune")
		case maxSet:
			return errors.New("--max-deletions limits --prune: give --prune too")
		}
	}
	if len(f.pruneTypes) > 0 && f.pruneAllTypes {
		return errors.New("--prune-types and --prune-all-types exclude each other: give one")
	}
	if f.maxDeletions < 0 {
		return fmt.Errorf("--max-deletions %d: must not be negative", f.maxDeletions)
	}
	for _, t := range f.pruneTypes {
		if _, err := resource.Lookup(t); err != nil {
			return fmt.Errorf("--prune-types: %w", err)
		}
	}
	return nil
}

// pruneTypesOf returns the types an apply of docs prunes, in resource
// order.
func (f *applyFlags) pruneTypesOf(docs []resource.Doc) []*resource.Type {
	want := map[*resource.Type]bool{}
	switch {
	case f.pruneAllTypes:
		return resource.All()
	case len(f.pruneTypes) > 0:
		for _, n := range f.pruneTypes {
			t, _ := resource.Lookup(n) // checked by checkPrune
			want[t] = true
		}
	default:
		for _, d := range docs {
			want[d.Type] = true
		}
	}
	var out []*resource.Type
	for _, t := range resource.All() {
		if want[t] {
			out = append(out, t)
		}
	}
	return out
}

func (a *app) runApply(ctx context.Context, f applyFlags) error {
	if err := resource.ValidateScope(f.scope); err != nil {
		return fmt.Errorf("--scope: %w", err)
	}
	if f.ttl < 0 || (f.ttl > 0 && f.ttl < time.Second) {
		return fmt.Errorf("--ttl %s: must be at least 1s (0: no TTL)", f.ttl)
	}
	if err := checkLockTimeout(f.lockTimeout); err != nil {
		return err
	}
	if f.strict && !f.checkRefs {
		return errors.New("--strict needs --check-references")
	}
	docs, err := readDocs(f.files, a.in)
	if err != nil {
		return err
	}
	if !f.allowInlineKeys {
		if err := refuseInlineKeys(docs); err != nil {
			return err
		}
	}
	if len(docs) == 0 {
		msg := fmt.Sprintf("no resources in %s", strings.Join(f.files, ", "))
		if f.prune {
			msg += fmt.Sprintf(": refusing to --prune, which would delete every resource of scope %q (use delete for that)", f.scope)
		}
		return errors.New(msg)
	}
	req := store.PlanRequest{Prune: f.prune, PruneScope: f.scope, TTL: f.ttl}
	var check func(*store.Plan) error
	if f.prune {
		req.PruneTypes = f.pruneTypesOf(docs)
		check = func(p *store.Plan) error { return maxDeletions(p, f.maxDeletions) }
	}
	for _, d := range docs {
		req.Puts = append(req.Puts, store.Put{Key: store.Key{Type: d.Type, Scope: f.scope, Name: d.Name}, Body: d.Body})
	}
	// --timeout bounds the work after the lock (see execute), not the
	// wait for it.
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := a.checkInput(ctx, c, f, docs); err != nil {
		return err
	}
	if f.canary.selector != "" {
		return a.runCanary(ctx, c, req, f)
	}
	return a.execute(ctx, c, req, lockSpec{scope: f.scope, timeout: f.lockTimeout}, f.dryRun, store.ApplyOptions{Chunked: f.chunked, Message: f.message}, check)
}

// checkInput runs the checks of docs that read the cluster: the
// authorities their names are for (checkAuthorities, unless
// --allow-unserved-authority) and, with --check-references, their
// references.
func (a *app) checkInput(ctx context.Context, c *conn, f applyFlags, docs []resource.Doc) error {
	if !f.allowUnserved {
		if err := a.checkAuthorities(ctx, c, docs); err != nil {
			return err
		}
	}
	if f.checkRefs {
		return a.checkReferences(ctx, c, f.scope, docs, f.strict)
	}
	return nil
}

// maxDeletions refuses a plan that deletes more than limit resources.
func maxDeletions(p *store.Plan, limit int) error {
	n := 0
	for _, c := range p.Changes {
		if c.Action == store.Delete {
			n++
		}
	}
	if n <= limit {
		return nil
	}
	names := make([]string, len(p.PruneTypes))
	for i, t := range p.PruneTypes {
		names[i] = t.Name
	}
	return fmt.Errorf("--prune would delete %d resources (%s in scope %q), more than --max-deletions %d; nothing was written: check the list with --dry-run, then give --max-deletions %d to go ahead",
		n, strings.Join(names, ", "), p.PruneScope, limit, n)
}

// lockSpec names the scope whose apply lock execute takes, and how long
// it waits for it.
type lockSpec struct {
	scope   string
	timeout time.Duration
}

func checkLockTimeout(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("--lock-timeout %s: must be positive", d)
	}
	return nil
}

// lock takes the scope's apply lock, unless the context says not to (see
// noLockKey).
func (a *app) lock(ctx context.Context, c *conn, l lockSpec) (release func(), err error) {
	if skip, _ := ctx.Value(noLockKey{}).(bool); skip {
		return func() {}, nil
	}
	held, err := c.store.LockScope(ctx, l.scope, l.timeout)
	var lte *store.LockTimeoutError
	if errors.As(err, &lte) {
		holder := "another apply or delete"
		if lte.Holder != "" {
			holder += " (" + lte.Holder + ")"
		}
		return nil, fmt.Errorf("--lock-timeout %s expired waiting for the apply lock of scope %q, held by %s; nothing was written: try again, or raise --lock-timeout (the lock of an xdsadmin that died is free within %ds)",
			l.timeout, l.scope, holder, store.LockSessionTTL)
	}
	if err != nil {
		return nil, err
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := held.Unlock(ctx); err != nil {
			fmt.Fprintf(a.errOut, "xdsadmin: warning: %v (it is released when its lease expires, within %ds)\n", err, store.LockSessionTTL)
		}
	}, nil
}

// execute plans and applies req, and prints the outcome. Unless dryRun,
// it holds the apply lock of l.scope from the first plan to the commit, so
// that applies and deletes in a scope serialize: waiting for it is bounded
// by l.timeout (--lock-timeout), the work after it by --timeout. If etcd moved what the
// plan declares before the commit anyway (a writer that does not lock), it
// says so on errOut and plans again, up to maxAttempts times in all.
// check, if not nil, may refuse a plan before anything is written. With
// dryRun it prints the plan and writes nothing.
//
// With traces on, the whole is one span, legation.apply, whose trace
// context is stored with the change (store.ApplyOptions.Traceparent):
// the replicas' view and push spans join its trace.
func (a *app) execute(ctx context.Context, c *conn, req store.PlanRequest, l lockSpec, dryRun bool, opts store.ApplyOptions, check func(*store.Plan) error) (err error) {
	ctx, span := a.tracing.Tracer().Start(ctx, "legation.apply", trace.WithAttributes(
		attribute.String("legation.scope", l.scope), attribute.Bool("legation.dry_run", dryRun)))
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	opts.Traceparent = tracing.Traceparent(ctx)
	if !dryRun {
		release, err := a.lock(ctx, c, l)
		if err != nil {
			return err
		}
		defer release()
	}
	ctx, cancel := a.commandContext(ctx)
	defer cancel()
	return a.planAndApply(ctx, c, req, dryRun, opts, check, span)
}

// planAndApply is execute's work once it holds the lock: it plans req
// and, unless dryRun, checks and commits the plan, planning again while
// etcd moves what it declares, up to maxAttempts times in all. It records
// the outcome on span.
func (a *app) planAndApply(ctx context.Context, c *conn, req store.PlanRequest, dryRun bool, opts store.ApplyOptions, check func(*store.Plan) error, span trace.Span) error {
	var prev *store.Plan
	for attempt := 1; ; attempt++ {
		plan, err := c.store.MakePlan(ctx, req)
		if err != nil {
			return err
		}
		if prev != nil {
			fmt.Fprintf(a.errOut, "xdsadmin: planned at revision %d, but before the commit %s; planned again at revision %d (attempt %d of %d)\n",
				prev.Revision, describeMoved(prev, plan), plan.Revision, attempt, maxAttempts)
		}
		if dryRun {
			return a.dryRunApply(c, plan, opts, check)
		}
		if check != nil {
			if err := check(plan); err != nil {
				return err
			}
		}
		if hook, ok := ctx.Value(afterPlanKey{}).(func(attempt int)); ok {
			hook(attempt)
		}
		res, err := c.store.Apply(ctx, plan, opts)
		if errors.Is(err, store.ErrConflict) && attempt < maxAttempts {
			prev = plan
			continue
		}
		if errors.Is(err, store.ErrConflict) {
			moved := "another writer kept changing them"
			if now, perr := c.store.MakePlan(ctx, req); perr == nil {
				moved = describeMoved(plan, now)
			}
			return fmt.Errorf("%w: %s (tried %d times; nothing was written)", err, moved, maxAttempts)
		}
		if err != nil {
			return err
		}
		span.SetAttributes(attribute.Int64("legation.revision", res.Revision), attribute.Int("legation.changes", countWork(plan)),
			attribute.Int("legation.attempts", attempt))
		return a.printApply(plan, res)
	}
}

// dryRunApply prints plan, then says whether check, if not nil, or
// etcd's limits would make the apply fail; it writes nothing.
func (a *app) dryRunApply(c *conn, plan *store.Plan, opts store.ApplyOptions, check func(*store.Plan) error) error {
	if err := a.printApply(plan, nil); err != nil {
		return err
	}
	if check != nil {
		if err := check(plan); err != nil {
			return fmt.Errorf("(dry run) the apply would fail: %w", err)
		}
	}
	return a.dryRunLimits(c, plan, opts)
}

// countWork is the number of resources plan writes or deletes.
func countWork(plan *store.Plan) int {
	n := 0
	for _, c := range plan.Changes {
		if c.Action != store.Unchanged {
			n++
		}
	}
	return n
}

// afterPlanKey keys, in a command's context, a func(attempt int) that
// execute calls between planning and committing: tests use it to race
// another writer deterministically.
type afterPlanKey struct{}

// noLockKey keys, in a command's context, true to make execute skip the
// scope's apply lock: tests use it to play a writer that does not lock.
type noLockKey struct{}

// describeMoved names what differs between two plans of one request: the
// resources whose stored state (mod_revision, existence) changed.
func describeMoved(before, after *store.Plan) string {
	type state struct {
		key store.Key
		rev int64
	}
	seen := map[string]state{}
	for _, c := range before.Changes {
		s := state{key: c.Key}
		if c.Old != nil {
			s.rev = c.Old.ModRevision
		}
		seen[c.Key.String()] = s
	}
	var moved []string
	describe := func(k store.Key, was, now int64) {
		switch {
		case was == now:
		case was == 0:
			moved = append(moved, fmt.Sprintf("%s was created (mod_revision %d)", k, now))
		case now == 0:
			moved = append(moved, fmt.Sprintf("%s was deleted (mod_revision was %d)", k, was))
		default:
			moved = append(moved, fmt.Sprintf("%s changed (mod_revision %d -> %d)", k, was, now))
		}
	}
	for _, c := range after.Changes {
		var now int64
		if c.Old != nil {
			now = c.Old.ModRevision
		}
		was := seen[c.Key.String()]
		delete(seen, c.Key.String())
		describe(c.Key, was.rev, now)
	}
	for _, s := range seen {
		// Declared before, not now: a pruned resource someone deleted.
		describe(s.key, s.rev, 0)
	}
	if len(moved) == 0 {
		// The directory and marker compares also see writes to resources
		// the plan does not name, in its types and scope.
		return "another writer wrote to its scope (resources it does not name, or ones changed and changed back)"
	}
	sort.Strings(moved)
	return strings.Join(moved, ", ")
}

// dryRunLimits fails a dry run that the real apply would fail for etcd's
// limits.
func (a *app) dryRunLimits(c *conn, plan *store.Plan, opts store.ApplyOptions) error {
	if err := c.store.CheckLimits(plan, opts); err != nil {
		return fmt.Errorf("(dry run) the apply would fail: %w", err)
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
	// ApplyID names the apply in the history; empty when nothing was
	// written.
	ApplyID string `json:"applyId,omitempty"`
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
		out.Revision, out.Lease, out.ApplyID = res.Revision, res.Lease, res.ID()
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
