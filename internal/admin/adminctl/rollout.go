package adminctl

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/legation-io/legation/internal/cluster/canary"
	"github.com/legation-io/legation/internal/cluster/status"
	"github.com/legation-io/legation/internal/state/rollout"
)

func (a *app) rolloutCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "List, watch, promote and abort canary rollouts (apply --canary)",
		Long: `A canary rollout is a change written once (apply --canary SELECTOR) that
only the nodes SELECTOR picks are served at first, as an overlay over their
group's resources with ordinary versions; every other node keeps the
current resources. It is promoted (the change becomes one ordinary apply,
for everyone) or aborted (the canary nodes return to the current resources,
at a newer version); either is recorded in the history with its reason.

A rollout's state is running, promoted or aborted. While it runs, status
counts the connected canary nodes: those sent the change that ACKed it,
those still pending, those that reject it (NACK), with a few ids and
messages.`,
		Example: `  xdsadmin apply -f routes.yaml --canary 10% --bake 5m -m "retry on 503"
  xdsadmin rollout list
  xdsadmin rollout status 20261128-140312.512345-3f2a9c`,
		Args: exactArgs(0),
	}
	cmd.AddCommand(a.rolloutListCommand(), a.rolloutStatusCommand(), a.rolloutEndCommand("promote"), a.rolloutEndCommand("abort"))
	return cmd
}

func (a *app) rolloutListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the rollouts, running and ended, oldest first",
		Long: `list shows every rollout kept in etcd, oldest first.

Output:
  table  ID, STATE, SELECTOR, SCOPE, RESOURCES, BAKE, PROMOTE, BY, AGE,
         MESSAGE (apply -m), REASON (why it ended).
  yaml   one object per rollout: its record (id, scope, selector, bake,
         maxRejections, promote, state, reason, by, at, message,
         revision, resources with the revision each had when it began,
         endedAt, promotedBy).
  json   the same as JSON.`,
		Example: `  xdsadmin rollout list
  xdsadmin rollout list -o json | jq '.[] | select(.state == "running") | .id'`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := a.commandContext(cmd.Context())
			defer cancel()
			c, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			all, _, err := c.rollouts().List(ctx)
			if err != nil {
				return err
			}
			if a.opts.Output != outputTable {
				return a.printStructured(all)
			}
			return a.printRolloutTable(all)
		},
	}
}

func (a *app) printRolloutTable(all []*rollout.Rollout) error {
	if len(all) == 0 {
		_, err := fmt.Fprintln(a.out, "no rollouts")
		return err
	}
	w := newTable(a.out)
	row(w, "ID", "STATE", "SELECTOR", "SCOPE", "RESOURCES", "BAKE", "PROMOTE", "BY", "AGE", "MESSAGE", "REASON")
	for _, r := range all {
		row(w, r.ID, r.State, r.Selector, r.Scope, len(r.Resources), time.Duration(r.Bake), r.Promote, r.By,
			time.Since(r.At).Round(time.Second), r.Message, r.Reason)
	}
	return w.Flush()
}

func (a *app) rolloutStatusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "status ID",
		Short: "Show a rollout and where its canary stands among the connected nodes",
		Long: `status shows a rollout's record and, from the connected nodes' status
records, its progress: the canary nodes (connected nodes the selector picks
that see the rollout's scope), how many were sent the change and ACKed it,
how many are pending, how many reject it, with a few ids and messages, and
the other nodes, which never receive it.

Output:
  table  the record, then the progress.
  yaml   {rollout: the record (see list), progress: {canary, others,
         acked, pending, rejecting, pendingNodes, rejectingNodes,
         messages}}.
  json   the same as JSON.`,
		Example: `  xdsadmin rollout status 20261128-140312.512345-3f2a9c
  xdsadmin rollout status 20261128-140312.512345-3f2a9c -o json | jq .progress`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := a.commandContext(cmd.Context())
			defer cancel()
			c, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			r, _, err := c.rollouts().Get(ctx, args[0])
			if err != nil {
				return err
			}
			p, err := c.progress(ctx, r)
			if err != nil {
				return err
			}
			return a.printRollout(r, &p)
		},
	}
}

// rolloutStatus is status's structured output.
type rolloutStatus struct {
	Rollout  *rollout.Rollout `json:"rollout"`
	Progress *canary.Progress `json:"progress,omitempty"`
}

// printRollout prints rollout r and, if not nil, its progress p.
func (a *app) printRollout(r *rollout.Rollout, p *canary.Progress) error {
	if a.opts.Output != outputTable {
		return a.printStructured(rolloutStatus{Rollout: r, Progress: p})
	}
	w := newTable(a.out)
	row(w, "rollout:", r.ID)
	row(w, "state:", r.State+reasonSuffix(r.Reason))
	row(w, "selector:", r.Selector)
	row(w, "scope:", r.Scope)
	row(w, "began:", fmt.Sprintf("%s at revision %d, by %s", r.At.UTC().Format(time.RFC3339), r.Revision, r.By))
	row(w, "bake:", fmt.Sprintf("%s, at most %d rejections, promote %s", time.Duration(r.Bake), r.MaxRejections, r.Promote))
	if r.Message != "" {
		row(w, "message:", r.Message)
	}
	names := make([]string, 0, len(r.Resources))
	for _, t := range r.Resources {
		names = append(names, t.Type+" "+t.Name)
	}
	row(w, "resources:", strings.Join(names, ", "))
	if r.PromotedBy != "" {
		row(w, "promoted by:", "apply "+r.PromotedBy)
	}
	if p != nil {
		row(w, "canary nodes:", fmt.Sprintf("%d connected: %d ACKed, %d pending, %d rejecting; %d other nodes never receive it",
			p.Canary, p.Acked, p.Pending, p.Rejecting, p.Others))
		for i, n := range p.RejectingNodes {
			row(w, "rejecting:", n+": "+p.Messages[i])
		}
		if len(p.PendingNodes) > 0 {
			row(w, "pending:", strings.Join(p.PendingNodes, ", "))
		}
	}
	return w.Flush()
}

func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return " (" + reason + ")"
}

// rolloutEndCommand is "rollout promote" or "rollout abort".
func (a *app) rolloutEndCommand(action string) *cobra.Command {
	var reason string
	short, long := "Promote a running rollout now: its change becomes one apply, for every node",
		`promote ends a running rollout by applying its change to its scope for
every node, in one transaction that also removes its overlay: an ordinary
apply in the history (kind promote), which rollback can undo. It is
refused, writing nothing, when a resource of the rollout changed in its
scope since the rollout began: abort it, and roll out again from there.`
	if action == "abort" {
		short, long = "Abort a running rollout: its canary nodes return to the current resources",
			`abort ends a running rollout without applying it: its overlay is removed in
one transaction, so its canary nodes return to their scope's resources at a
newer version, and the history records the abort with its reason.`
	}
	cmd := &cobra.Command{
		Use:     action + " ID",
		Short:   short,
		Long:    long,
		Example: "  xdsadmin rollout " + action + " 20261128-140312.512345-3f2a9c --reason \"checked the canary's dashboards\"",
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkMessage(reason); err != nil {
				return err
			}
			return a.endRollout(cmd.Context(), action, args[0], reason)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, kept in the rollout's record and the history (one line, at most 1024 bytes)")
	return cmd
}

// endRollout promotes or aborts rollout id, holding its scope's apply
// lock, and prints it.
func (a *app) endRollout(ctx context.Context, action, id, reason string) error {
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	rs := c.rollouts()
	cur, _, err := rs.Get(ctx, id)
	if err != nil {
		return err
	}
	release, err := a.lock(ctx, c, lockSpec{scope: cur.Scope, timeout: defaultLockTimeout})
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := a.commandContext(ctx)
	defer cancel()
	if reason == "" {
		reason = action + "d by " + c.store.Writer()
	}
	end := rs.Abort
	if action == "promote" {
		end = rs.Promote
	}
	r, err := end(ctx, id, reason)
	if err != nil {
		return err
	}
	return a.printRollout(r, nil)
}

// rollouts is the rollouts of c's etcd, written as c's store writes.
func (c *conn) rollouts() *rollout.Store {
	return rollout.NewStore(c.store, c.client, c.store.Writer())
}

// progress is where r's canary stands among the connected nodes, from
// their status records.
func (c *conn) progress(ctx context.Context, r *rollout.Rollout) (canary.Progress, error) {
	recs, err := status.List(ctx, c.client, c.store.Prefix())
	if err != nil {
		return canary.Progress{}, err
	}
	return canary.Measure(r, recs), nil
}
