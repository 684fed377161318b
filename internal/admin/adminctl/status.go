package adminctl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/legation-io/legation/internal/cluster/status"
	"github.com/legation-io/legation/internal/state/resource"
)

func (a *app) statusCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status [NODE]",
		Short: "Show the connected nodes and, per type, the versions sent, ACKed and NACKed",
		Long: `status shows the Envoy (and gRPC) nodes connected to the cluster, as the
replicas record them in etcd: each node's group, its home replica (the one
serving its streams), the kinds of its streams and since when it is
connected, and per resource type the version last sent, the version the
node ACKed, and its last NACK with the node's error message. Versions are
etcd revisions (see get --revision and diff).

A replica rewrites a node's record about once a second when it changes, so
what is shown may be a second behind. The records of a replica that stopped
cleanly are gone; those of one that crashed remain until its lease expires
(10s by default).

With NODE, only that node; it is an error if no replica records it.

Output:
  table  one row per node and type: NODE, GROUP, HOME, PROTOCOL,
         CONNECTED (how long ago), TYPE, SENT, ACKED, NACK (the NACKed
         version and the message, shortened); "-" where there is nothing.
  yaml   the full records (a list, or the one record with NODE).
  json   the same as JSON.

Records in etcd that do not decode (written by another tool) are skipped
with a warning on standard error naming their key.`,
		Example: `  xdsadmin status
  xdsadmin status envoy-ingress-7d9c -o yaml
  xdsadmin status -o json | jq '.[] | select(.types.listener.nack_version != null)'`,
		Args: rangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			node := ""
			if len(args) == 1 {
				node = args[0]
			}
			return a.runStatus(cmd.Context(), node)
		},
	}
	return cmd
}

func (a *app) runStatus(ctx context.Context, node string) error {
	ctx, cancel := a.commandContext(ctx)
	defer cancel()
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()

	var recs []status.NodeStatus
	if node != "" {
		ns, err := status.Get(ctx, c.client, a.opts.Prefix, node)
		switch {
		case errors.Is(err, status.ErrNotFound):
			return fmt.Errorf("node %q is not connected: no replica has a status record for it at %s", node, status.Key(a.opts.Prefix, node))
		case err != nil:
			return err
		}
		if a.opts.Output != outputTable {
			return a.printStructured(ns)
		}
		recs = []status.NodeStatus{ns}
	} else {
		var bad []status.BadRecord
		recs, bad, err = status.Read(ctx, c.client, a.opts.Prefix)
		if err != nil {
			return err
		}
		a.warnBadStatus(bad)
		if a.opts.Output != outputTable {
			if recs == nil {
				recs = []status.NodeStatus{} // "[]", not "null"
			}
			return a.printStructured(recs)
		}
	}
	if len(recs) == 0 {
		_, err := fmt.Fprintln(a.out, "no nodes are connected")
		return err
	}
	now := time.Now()
	w := newTable(a.out)
	row(w, "NODE", "GROUP", "HOME", "PROTOCOL", "CONNECTED", "TYPE", "SENT", "ACKED", "NACK")
	for _, ns := range recs {
		group := orDash(ns.Group)
		proto := orDash(strings.Join(ns.Protocols, ","))
		age := formatAge(now.Sub(ns.ConnectedSince))
		types := typeNames(ns.Types)
		if len(types) == 0 {
			row(w, ns.NodeID, group, ns.Home, proto, age, "-", "-", "-", "-")
			continue
		}
		for _, t := range types {
			ts := ns.Types[t]
			row(w, ns.NodeID, group, ns.Home, proto, age, t, orDash(ts.VersionSent), orDash(ts.VersionAcked), formatNack(ts))
		}
	}
	return w.Flush()
}

// warnBadStatus tells the operator about status records that do not
// decode: they are skipped, not fatal.
func (a *app) warnBadStatus(bad []status.BadRecord) {
	for _, b := range bad {
		fmt.Fprintf(a.errOut, "warning: skipped malformed status record at key %q: %v\n", b.Key, b.Err)
	}
}

// typeNames returns the type short names of a record in push order, the
// ones this binary does not know after, by name.
func typeNames(types map[string]status.TypeStatus) []string {
	order := func(name string) int {
		if t, ok := resource.ByName(name); ok && t.Name == name {
			return t.Order
		}
		return len(resource.All())
	}
	out := make([]string, 0, len(types))
	for name := range types {
		out = append(out, name)
	}
	slices.SortFunc(out, func(x, y string) int {
		if d := order(x) - order(y); d != 0 {
			return d
		}
		return strings.Compare(x, y)
	})
	return out
}

// maxNackColumn bounds the NACK message in the table; -o yaml shows it
// whole.
const maxNackColumn = 60

// formatNack shows a NACK as "<version>: <message>", on one line and
// shortened; "-" when there is none.
func formatNack(ts status.TypeStatus) string {
	if !ts.Nacked() {
		return "-"
	}
	msg := shortNack(ts.LastNack)
	v := orDash(ts.NackVersion)
	if msg == "" {
		return v
	}
	return v + ": " + msg
}

// shortNack is a NACK message on one line, shortened to maxNackColumn.
func shortNack(m string) string {
	msg := strings.Join(strings.Fields(m), " ")
	if r := []rune(msg); len(r) > maxNackColumn {
		msg = string(r[:maxNackColumn-3]) + "..."
	}
	return msg
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// formatAge shows a duration as kubectl shows ages: "42s", "5m3s", "3h4m",
// "2d3h".
func formatAge(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int64(d / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%dh", s/86400, s%86400/3600)
}
