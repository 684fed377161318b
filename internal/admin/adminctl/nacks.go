package adminctl

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/legation-io/legation/internal/cluster/status"
	"github.com/legation-io/legation/internal/state/store"
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

// nackApply is an apply a group of rejections is traced to.
type nackApply struct {
	ID        string    `json:"id"`
	Revision  int64     `json:"revision"`
	By        string    `json:"by"`
	At        time.Time `json:"at"`
	Message   string    `json:"message,omitempty"`
	Resources []string  `json:"resources"`
}

// nackGroup is the nodes that reject the same type from the same applies
// with the same message.
type nackGroup struct {
	Applies  []nackApply `json:"applies"`
	Type     string      `json:"type"`
	Nack     string      `json:"nack"`
	Nodes    int         `json:"nodes"`
	NodeIDs  []string    `json:"node_ids"`
	Replicas []string    `json:"replicas"`
}

// maxNackNodeIDs is how many node ids a group names.
const maxNackNodeIDs = 5

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
	records, err := c.store.History(ctx, 0)
	if err != nil {
		return err
	}
	groups := nackGroups(recs, records)
	if since > 0 {
		groups = recentNacks(groups, time.Now().Add(-since))
	}
	if a.opts.Output != outputTable {
		return a.printStructured(groups)
	}
	return a.printNacks(groups)
}

// nackGroups groups the rejections of recs by the applies of records
// they trace to, type and message, most nodes first.
func nackGroups(recs []status.NodeStatus, records []store.HistoryRecord) []nackGroup {
	byKey := map[string]*nackGroup{}
	var order []string
	for _, ns := range recs {
		for _, t := range typeNames(ns.Types) {
			ts := ns.Types[t]
			if !ts.Nacked() {
				continue
			}
			applies := traceNack(records, ns.Group, t, ts)
			ids := make([]string, len(applies))
			for i, ap := range applies {
				ids[i] = ap.ID
			}
			key := strings.Join(ids, ",") + "\x00" + t + "\x00" + ts.LastNack
			g, ok := byKey[key]
			if !ok {
				g = &nackGroup{Applies: applies, Type: t, Nack: ts.LastNack, NodeIDs: []string{}, Replicas: []string{}}
				byKey[key] = g
				order = append(order, key)
			}
			g.Nodes++
			if len(g.NodeIDs) < maxNackNodeIDs {
				g.NodeIDs = append(g.NodeIDs, ns.NodeID)
			}
			if !slices.Contains(g.Replicas, ns.Home) {
				g.Replicas = append(g.Replicas, ns.Home)
			}
		}
	}
	out := make([]nackGroup, 0, len(order))
	for _, k := range order {
		slices.Sort(byKey[k].Replicas)
		out = append(out, *byKey[k])
	}
	slices.SortStableFunc(out, func(x, y nackGroup) int { return y.Nodes - x.Nodes })
	return out
}

// traceNack is the applies of records, oldest first, that wrote what a
// node of group rejects in ts: after the version it acknowledged, up to
// the one it rejects, resources of type t in its group or the default
// scope.
func traceNack(records []store.HistoryRecord, group, t string, ts status.TypeStatus) []nackApply {
	nacked, err := strconv.ParseInt(ts.NackVersion, 10, 64)
	if err != nil {
		return []nackApply{}
	}
	acked, _ := strconv.ParseInt(ts.VersionAcked, 10, 64) // "": none yet
	out := []nackApply{}
	for i := len(records) - 1; i >= 0; i-- { // oldest first
		r := records[i]
		if r.Revision <= acked || r.Revision > nacked {
			continue
		}
		var res []string
		for _, c := range r.Changes {
			if c.Type == t && (c.Scope == store.DefaultScope || c.Scope == group) {
				res = append(res, c.Type+"/"+c.Scope+"/"+c.Name)
			}
		}
		if len(res) == 0 {
			continue
		}
		if n := len(out); n > 0 && out[n-1].ID == r.ID {
			out[n-1].Resources = append(out[n-1].Resources, res...)
			out[n-1].Revision = r.Revision
			continue
		}
		out = append(out, nackApply{ID: r.ID, Revision: r.Revision, By: r.By, At: r.At, Message: r.Message, Resources: res})
	}
	return out
}

// recentNacks keeps the groups traced to an apply written after from.
func recentNacks(groups []nackGroup, from time.Time) []nackGroup {
	var out []nackGroup
	for _, g := range groups {
		if slices.ContainsFunc(g.Applies, func(ap nackApply) bool { return ap.At.After(from) }) {
			out = append(out, g)
		}
	}
	return out
}

func (a *app) printNacks(groups []nackGroup) error {
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
