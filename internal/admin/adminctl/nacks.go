package adminctl

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/legation-io/legation/internal/cluster/status"
)

func (a *app) nacksCommand() *cobra.Command {
	var since time.Duration
	cmd := &cobra.Command{
		Use:   "nacks",
		Short: "Show the fleet's current rejections, grouped by the apply that caused them",
		Long: `nacks shows the configuration the connected nodes reject now (their latest
answer for a type was a NACK, as their home replica recorded it in their
status record; see status), grouped by the apply that brought what they
reject and by the rejection's message.

A node that acknowledged version A of a type and rejects version V
rejects something an apply wrote after A, up to V: the applies of the
history (see history) in that range that changed resources of that type
in the node's group or in the default scope. They are named with their
author and message, and the resources of that type they changed. A
rejection whose versions the history does not cover (an apply older
than --history-keep, a write that bypassed the store) is grouped under
"-".

--since keeps the rejections of applies written within that long.

Output:
  table  APPLY (ids), TYPE, NODES (how many reject), REPLICAS (their
         homes), BY, MESSAGE (the apply's), NACK (the rejection).
  yaml   one object per group: the applies (id, revision, by, at,
         message, resources), type, nack (the message), nodes, node_ids
         (the first 5), replicas.
  json   the same as JSON.`,
		Example: `  xdsadmin nacks
  xdsadmin nacks --since 10m -o json | jq '.[] | {applies, nodes}'`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if since < 0 {
				return fmt.Errorf("--since %s: must not be negative (0: every rejection)", since)
			}
			return a.runNacks(cmd.Context(), since)
		},
	}
	cmd.Flags().DurationVar(&since, "since", 0, "only rejections of applies written within this long (0: every rejection)")
	return cmd
}

func (a *app) runNacks(ctx context.Context, since time.Duration) error {
	ctx, cancel := a.commandContext(ctx)
	defer cancel()
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	recs, bad, err := status.Read(ctx, c.client, a.opts.Prefix)
	if err != nil {
		return err
	}
	a.warnBadStatus(bad)
	records, err := a.readHistory(ctx, c)
	if err != nil {
		return err
	}
	groups := status.Rejections(recs, records)
	if since > 0 {
		groups = status.RecentRejections(groups, time.Now().Add(-since))
	}
	if a.opts.Output != outputTable {
		return a.printStructured(groups)
	}
	return a.printNacks(groups)
}

func (a *app) printNacks(groups []status.Rejection) error {
	if len(groups) == 0 {
		_, err := fmt.Fprintln(a.out, "no node rejects its configuration")
		return err
	}
	w := newTable(a.out)
	row(w, "APPLY", "TYPE", "NODES", "REPLICAS", "BY", "MESSAGE", "NACK")
	for _, g := range groups {
		ids, by, msg := "-", "-", "-"
		if n := len(g.Applies); n > 0 {
			var list []string
			for _, ap := range g.Applies {
				list = append(list, ap.ID)
			}
			ids = strings.Join(list, ",")
			last := g.Applies[n-1]
			by, msg = last.By, orDash(last.Message)
		}
		row(w, ids, g.Type, g.Nodes, strings.Join(g.Replicas, ","), by, msg, orDash(shortNack(g.Nack)))
	}
	return w.Flush()
}
