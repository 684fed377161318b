package adminctl

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/legation-io/legation/internal/state/store"
)

func (a *app) diffCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "diff R1 [R2]",
		Short: "Show what changed between two revisions or applies",
		Long: `diff lists the resources created, changed and deleted between etcd revision
R1 and revision R2 (default: now), with their mod_revisions. Revisions are
the versions Envoy sees (a SotW version_info is one) and what apply prints.
R1 and R2 may also be apply ids of the history (see history), each
standing for the revision its apply wrote (the last, for a --chunked
apply). etcd keeps history only until it is compacted: an older revision
is an error.`,
		Example: `  xdsadmin diff 41
  xdsadmin diff 41 57 -o json
  xdsadmin diff 20261128-140312.512345-3f2a9c`,
		Args: rangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runDiff(cmd.Context(), args)
		},
	}
}

func parseRevision(s string) (int64, error) {
	r, err := strconv.ParseInt(s, 10, 64)
	if err != nil || r <= 0 {
		return 0, fmt.Errorf("revision %q: want a positive integer", s)
	}
	return r, nil
}

// diffRevisions reads diff's arguments: revisions, or apply ids looked up
// in the history (read only if one is given).
func (a *app) diffRevisions(ctx context.Context, c *conn, args []string) (r1, r2 int64, err error) {
	var records []store.HistoryRecord
	revs := make([]int64, len(args))
	for i, arg := range args {
		if _, nerr := strconv.ParseInt(arg, 10, 64); nerr == nil {
			if revs[i], err = parseRevision(arg); err != nil {
				return 0, 0, err
			}
			continue
		}
		if records == nil {
			if records, err = a.readHistory(ctx, c); err != nil {
				return 0, 0, err
			}
		}
		if revs[i] = applyRevision(records, arg); revs[i] == 0 {
			return 0, 0, fmt.Errorf("%q: neither a revision nor an apply id of the history (see xdsadmin history)", arg)
		}
	}
	r1 = revs[0]
	if len(revs) == 2 {
		r2 = revs[1]
		if r2 < r1 {
			return 0, 0, fmt.Errorf("revision %d is before %d: give the older one first", r2, r1)
		}
	}
	return r1, r2, nil
}

// applyRevision is the last revision apply id wrote, 0 if the history
// does not hold it.
func applyRevision(records []store.HistoryRecord, id string) int64 {
	var rev int64
	for _, r := range records {
		if r.ID == id {
			rev = max(rev, r.Revision)
		}
	}
	return rev
}

// diffChange is one line of a diff in yaml/json output.
type diffChange struct {
	change
	// OldModRevision is the mod_revision before (changed, deleted).
	OldModRevision int64 `json:"oldModRevision,omitempty"`
	// ModRevision is the mod_revision after (created, changed).
	ModRevision int64 `json:"modRevision,omitempty"`
}

type diffSummary struct {
	Created int `json:"created"`
	Changed int `json:"changed"`
	Deleted int `json:"deleted"`
}

type diffOutput struct {
	From    int64        `json:"from"`
	To      int64        `json:"to"`
	Summary diffSummary  `json:"summary"`
	Changes []diffChange `json:"changes"`
}

func (a *app) runDiff(ctx context.Context, args []string) error {
	ctx, cancel := a.commandContext(ctx)
	defer cancel()
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	r1, r2, err := a.diffRevisions(ctx, c, args)
	if err != nil {
		return err
	}
	if r1 > c.revision || r2 > c.revision {
		return fmt.Errorf("revision %d is newer than etcd's current revision %d", max(r1, r2), c.revision)
	}
	changes, to, err := c.store.Diff(ctx, r1, r2)
	if errors.Is(err, rpctypes.ErrCompacted) {
		return fmt.Errorf("revision %d is compacted: etcd no longer holds its history (%w)", r1, err)
	}
	if err != nil {
		return err
	}
	out := diffOutput{From: r1, To: to, Changes: []diffChange{}}
	for _, ch := range changes {
		d := diffChange{change: changeOf(ch)}
		if ch.Old != nil {
			d.OldModRevision = ch.Old.ModRevision
		}
		if ch.NewResource != nil {
			d.ModRevision = ch.NewResource.ModRevision
		}
		switch ch.Action {
		case store.Create:
			out.Summary.Created++
		case store.Update:
			out.Summary.Changed++
		case store.Delete:
			out.Summary.Deleted++
		}
		out.Changes = append(out.Changes, d)
	}
	if a.opts.Output != outputTable {
		return a.printStructured(out)
	}
	w := newTable(a.out)
	for _, d := range out.Changes {
		var revs string
		switch d.Action {
		case store.Create.String():
			revs = fmt.Sprintf("(mod_revision %d)", d.ModRevision)
		case store.Update.String():
			revs = fmt.Sprintf("(mod_revision %d -> %d)", d.OldModRevision, d.ModRevision)
		default:
			revs = fmt.Sprintf("(mod_revision %d -> deleted)", d.OldModRevision)
		}
		row(w, d.Action, d.Type, d.Scope, d.Name, revs)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(a.out, "%d created, %d changed, %d deleted from revision %d to %d\n",
		out.Summary.Created, out.Summary.Changed, out.Summary.Deleted, out.From, out.To)
	return err
}
