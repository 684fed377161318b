package adminctl

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
)

type rollbackFlags struct {
	yes, force  bool
	message     string
	lockTimeout time.Duration
	// to and scope: rollback --to.
	to, scope string
}

func (a *app) rollbackCommand() *cobra.Command {
	var f rollbackFlags
	cmd := &cobra.Command{
		Use:   "rollback APPLY_ID | --to REVISION [--scope S]",
		Short: "Undo one apply, or return a scope to a past revision, as a new apply",
		Long: `rollback undoes one apply (or delete) of the history (see history): every
resource it changed or deleted goes back to the body it had before, every
one it created is deleted. It does so as a new apply, in one transaction:
a new revision, so versions only move forward and no client is sent a
version older than one it holds. The bodies come from the apply's history
record, so an apply can be undone after etcd compacted its revisions.
Resources go back without a TTL.

It refuses, writing nothing, when a later write changed, deleted or
created again one of those resources, naming each and the apply that did;
--force undoes the apply anyway, over the later changes. It shows what it
would write and asks before writing; --yes writes without asking. Like
apply, it holds the scope's apply lock from its plan to its commit.

--to REVISION returns the scope (--scope, default "default") to what it
held at REVISION (or at the revision an apply id of the history wrote):
every resource of the scope as it was then, those created since deleted.
While etcd holds REVISION it is read from etcd; once compacted, it is
rebuilt from what the scope holds now by undoing every apply since, from
the history, which must reach back to REVISION. Writes that bypass
Legation's store (etcdctl) and TTL expiries are not in the history.

The output is apply's: what it changed, and the revision it made. Its
history record has kind rollback and the message "rollback of APPLY_ID"
(or "rollback of scope S to revision R"), or -m's.`,
		Example: `  xdsadmin history
  xdsadmin rollback 20261128-140312.512345-3f2a9c
  xdsadmin rollback 20261128-140312.512345-3f2a9c --yes -m "the new weights broke checkout"
  xdsadmin rollback --to 41 --scope edge`,
		Args: rangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(args, cmd.Flags().Changed("scope")); err != nil {
				return err
			}
			if f.to != "" {
				return a.runRollbackTo(cmd.Context(), f)
			}
			return a.runRollback(cmd.Context(), args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.BoolVarP(&f.yes, "yes", "y", false, "write without asking")
	fl.BoolVar(&f.force, "force", false, "undo the apply even over later changes to the same resources")
	fl.StringVarP(&f.message, "message", "m", "", "what the rollback is for, kept in the history (default: \"rollback of APPLY_ID\")")
	fl.DurationVar(&f.lockTimeout, "lock-timeout", defaultLockTimeout, "how long to wait for the scope's apply lock; then fail, writing nothing")
	fl.StringVar(&f.to, "to", "", "return the scope to what it held at this revision, or at the revision this apply id wrote")
	fl.StringVar(&f.scope, "scope", store.DefaultScope, "with --to: the scope to return")
	return cmd
}

// check refuses bad combinations of rollback's arguments and flags;
// scopeSet says whether --scope was given.
func (f *rollbackFlags) check(args []string, scopeSet bool) error {
	switch {
	case f.to == "" && len(args) == 0:
		return errors.New("give the apply id to undo, or --to REVISION")
	case f.to != "" && len(args) > 0:
		return fmt.Errorf("give the apply id %q or --to %s, not both", args[0], f.to)
	case f.to == "" && scopeSet:
		return errors.New("--scope goes with --to: undoing an apply undoes it in the scope it wrote")
	case f.to != "" && f.force:
		return errors.New("--force goes with an apply id: --to returns the scope whatever came after")
	}
	if err := resource.ValidateScope(f.scope); err != nil {
		return fmt.Errorf("--scope: %w", err)
	}
	if err := checkMessage(f.message); err != nil {
		return err
	}
	return checkLockTimeout(f.lockTimeout)
}

// runRollbackTo returns f.scope to what it held at revision (or apply)
// f.to, as a new apply.
func (a *app) runRollbackTo(ctx context.Context, f rollbackFlags) error {
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	rctx, cancel := a.commandContext(ctx)
	records, err := a.readHistory(rctx, c)
	var rev int64
	var req store.PlanRequest
	if err == nil {
		rev, err = toRevision(records, f.to, c.revision)
	}
	if err == nil {
		req, err = scopeRequest(rctx, c, records, f.scope, rev)
	}
	cancel()
	if err != nil {
		return err
	}
	msg := f.message
	if msg == "" {
		msg = fmt.Sprintf("rollback of scope %s to revision %d", f.scope, rev)
	}
	check := func(plan *store.Plan) error {
		return a.confirm(plan, fmt.Sprintf("of scope %s to revision %d", f.scope, rev), f.yes)
	}
	return a.execute(ctx, c, req, lockSpec{scope: f.scope, timeout: f.lockTimeout}, false,
		store.ApplyOptions{Kind: store.KindRollback, Message: msg}, check)
}

// toRevision reads --to: a revision up to now, or an apply id of records.
func toRevision(records []store.HistoryRecord, to string, now int64) (int64, error) {
	if _, err := strconv.ParseInt(to, 10, 64); err != nil {
		rev := applyRevision(records, to)
		if rev == 0 {
			return 0, fmt.Errorf("--to %q: neither a revision nor an apply id of the history (see xdsadmin history)", to)
		}
		return rev, nil
	}
	rev, err := parseRevision(to)
	if err != nil {
		return 0, fmt.Errorf("--to: %w", err)
	}
	if rev > now {
		return 0, fmt.Errorf("--to %d: newer than etcd's current revision %d", rev, now)
	}
	return rev, nil
}

// scopeRequest is the apply that returns scope to what it held at rev:
// each resource then, and the deletion of each created since.
func scopeRequest(ctx context.Context, c *conn, records []store.HistoryRecord, scope string, rev int64) (store.PlanRequest, error) {
	var req store.PlanRequest
	then, err := c.store.ScopeAt(ctx, records, scope, rev)
	if err != nil {
		return req, err
	}
	now, err := c.store.ScopeAt(ctx, nil, scope, 0)
	if err != nil {
		return req, err
	}
	for k, body := range then {
		req.Puts = append(req.Puts, store.Put{Key: k, Body: body})
	}
	for k := range now {
		if _, ok := then[k]; !ok {
			req.Deletes = append(req.Deletes, k)
		}
	}
	if len(req.Puts)+len(req.Deletes) == 0 {
		return req, fmt.Errorf("scope %q held nothing at revision %d and holds nothing now: nothing to return", scope, rev)
	}
	return req, nil
}

func (a *app) runRollback(ctx context.Context, id string, f rollbackFlags) error {
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	rctx, cancel := a.commandContext(ctx)
	records, err := a.readHistory(rctx, c)
	var u *store.Undo
	if err == nil {
		u, err = c.store.UndoOf(rctx, records, id)
	}
	if err == nil {
		err = a.dropGone(rctx, c, u, records, f.force)
	}
	cancel()
	if err != nil {
		return err
	}
	if len(u.Request.Puts)+len(u.Request.Deletes) == 0 {
		return fmt.Errorf("apply %s: nothing left to undo", id)
	}
	msg := f.message
	if msg == "" {
		msg = "rollback of " + id
	}
	check := func(plan *store.Plan) error {
		if err := undoConflicts(plan, u, records); err != nil && !f.force {
			return err
		}
		return a.confirm(plan, "of apply "+id, f.yes)
	}
	return a.execute(ctx, c, u.Request, lockSpec{scope: u.Scope, timeout: f.lockTimeout}, false,
		store.ApplyOptions{Kind: store.KindRollback, Message: msg}, check)
}

// dropGone takes out of u the deletions of resources the apply created
// that no longer exist: a conflict, unless force.
func (a *app) dropGone(ctx context.Context, c *conn, u *store.Undo, records []store.HistoryRecord, force bool) error {
	var kept []store.Key
	var gone []string
	for _, k := range u.Request.Deletes {
		_, _, err := c.store.Get(ctx, k, 0)
		switch {
		case errors.Is(err, store.ErrNotFound):
			gone = append(gone, k.String()+": deleted since"+laterApply(records, k, u.Revision))
		case err != nil:
			return err
		default:
			kept = append(kept, k)
		}
	}
	u.Request.Deletes = kept
	if len(gone) > 0 && !force {
		return conflictError(u.ID, gone)
	}
	return nil
}

// undoConflicts names the resources of plan that a write after apply u
// changed, deleted or created again.
func undoConflicts(plan *store.Plan, u *store.Undo, records []store.HistoryRecord) error {
	var moved []string
	for _, ch := range plan.Changes {
		want, ok := u.Expect[ch.Key]
		if !ok {
			continue
		}
		var got int64
		if ch.Old != nil {
			got = ch.Old.ModRevision
		}
		if got == want {
			continue
		}
		what := fmt.Sprintf("changed at revision %d", got)
		switch {
		case got == 0:
			what = "deleted since"
		case want == 0:
			what = fmt.Sprintf("created again at revision %d", got)
		}
		moved = append(moved, ch.Key.String()+": "+what+laterApply(records, ch.Key, u.Revision))
	}
	if len(moved) > 0 {
		return conflictError(u.ID, moved)
	}
	return nil
}

// conflictError says which resources a later write moved.
func conflictError(id string, moved []string) error {
	const most = 5
	more := ""
	if len(moved) > most {
		more = fmt.Sprintf("; and %d more", len(moved)-most)
		moved = moved[:most]
	}
	return fmt.Errorf("a later write changed what apply %s wrote: %s%s; nothing was written (--force undoes it anyway)", id, strings.Join(moved, "; "), more)
}

// laterApply names the newest apply of the history after revision rev
// that wrote k, as " by apply ID (BY: MESSAGE)"; "" if the history has
// none (another writer, or pruned).
func laterApply(records []store.HistoryRecord, k store.Key, rev int64) string {
	for _, r := range records { // newest first
		if r.Revision <= rev {
			break
		}
		for _, c := range r.Changes {
			if c.Type == k.Type.Name && c.Scope == k.Scope && c.Name == k.Name {
				s := fmt.Sprintf(" by apply %s (%s", r.ID, r.By)
				if r.Message != "" {
					s += ": " + r.Message
				}
				return s + ")"
			}
		}
	}
	return ""
}

// confirm shows what the rollback (of what) writes and asks, on the
// command's input, whether to write it; yes: it does not ask.
func (a *app) confirm(plan *store.Plan, what string, yes bool) error {
	if yes {
		return nil
	}
	fmt.Fprintf(a.errOut, "rollback %s, planned at revision %d, would write:\n", what, plan.Revision)
	w := newTable(a.errOut)
	for _, c := range plan.Changes {
		if c.Action != store.Unchanged {
			ch := changeOf(c)
			row(w, "  "+ch.Action, ch.Type, ch.Scope, ch.Name)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprint(a.errOut, "write it? [y/N] ")
	line, _ := bufio.NewReader(a.in).ReadString('\n')
	if ans := strings.ToLower(strings.TrimSpace(line)); ans == "y" || ans == "yes" {
		return nil
	}
	return errors.New("rollback not confirmed; nothing was written (--yes writes without asking)")
}
