package adminctl

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/legation-io/legation/internal/cluster/lrs"
)

func (a *app) loadCommand() *cobra.Command {
	var (
		by   string
		last int
	)
	cmd := &cobra.Command{
		Use:   "load [CLUSTER]",
		Short: "Show the load the nodes report (LRS), cluster-wide: requests per second, error ratio, drops",
		Long: `load shows what the Envoy and gRPC nodes report over LRS (load reporting),
summed across every replica: each replica rolls its own nodes' reports up
into windows of --lrs-interval and publishes them to etcd
("<prefix>load/<replica>/<window start>"), and load reads them all.

It sums the last --windows intervals (the replicas' windows share their
boundaries; an interval in which nothing was reported counts too), ending
at the newest window, or one interval ago if that is older (so load that
stopped shows as none, not as its last rate), per cluster, or per cluster
and locality (--by locality; drops are reported per cluster, shown under
locality "-"), or per cluster and node (--by node). With CLUSTER, only
that cluster.

Output:
  table  CLUSTER (LOCALITY or NODE), WINDOW (the seconds summed), RPS
         (requests issued per second), ERRORS (errored / finished),
         DROPS/S, ISSUED, SUCCEEDED, ERRORED, IN-PROGRESS (in the last
         window), DROPPED, REPLICAS (whose nodes reported).
  yaml   the summaries with every count, drops by category and the window's
         bounds.
  json   the same as JSON.

Windows in etcd that do not decode are skipped with a warning on standard
error naming their key.`,
		Example: `  xdsadmin load
  xdsadmin load svc-cluster --by locality
  xdsadmin load --by node -o json`,
		Args: rangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := lrs.ParseBy(by)
			if err != nil {
				return err
			}
			if last < 1 {
				return fmt.Errorf("--windows %d: must be at least 1", last)
			}
			cluster := ""
			if len(args) == 1 {
				cluster = args[0]
			}
			return a.runLoad(cmd.Context(), cluster, b, last)
		},
	}
	cmd.Flags().StringVar(&by, "by", "cluster", "group by cluster, locality (cluster and locality) or node (cluster and node)")
	cmd.Flags().IntVar(&last, "windows", 3, "how many of the last windows to sum")
	return cmd
}

func (a *app) runLoad(ctx context.Context, cluster string, by lrs.By, last int) error {
	ctx, cancel := a.commandContext(ctx)
	defer cancel()
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	ws, bad, err := lrs.Read(ctx, c.client, a.opts.Prefix)
	if err != nil {
		return err
	}
	for _, b := range bad {
		fmt.Fprintf(a.errOut, "warning: skipped malformed load window at key %q: %v\n", b.Key, b.Err)
	}
	sums := lrs.Summarize(ws, cluster, by, last, time.Now())
	if a.opts.Output != outputTable {
		if sums == nil {
			sums = []lrs.Summary{} // "[]", not "null"
		}
		return a.printStructured(sums)
	}
	if len(sums) == 0 {
		what := "no load reported"
		if cluster != "" {
			what += " for cluster " + strconv.Quote(cluster)
		}
		_, err := fmt.Fprintf(a.out, "%s in the last %d windows\n", what, last)
		return err
	}
	return a.printLoadTable(sums, by)
}

// printLoadTable prints sums, grouped by by, as a table.
func (a *app) printLoadTable(sums []lrs.Summary, by lrs.By) error {
	w := newTable(a.out)
	head := []any{"CLUSTER"}
	switch by {
	case lrs.ByLocality:
		head = append(head, "LOCALITY")
	case lrs.ByNode:
		head = append(head, "NODE", "IDENTITY")
	}
	head = append(head, "WINDOW", "RPS", "ERRORS", "DROPS/S", "ISSUED", "SUCCEEDED", "ERRORED", "IN-PROGRESS", "DROPPED", "REPLICAS")
	row(w, head...)
	for _, s := range sums {
		cols := []any{s.Cluster}
		switch by {
		case lrs.ByLocality:
			cols = append(cols, s.Locality)
		case lrs.ByNode:
			id := s.Identity
			if id == "" {
				id = "-"
			}
			cols = append(cols, s.Node, id)
		}
		cols = append(cols, fmt.Sprintf("%gs", s.Seconds),
			strconv.FormatFloat(s.RequestsPerSecond, 'f', 2, 64),
			fmt.Sprintf("%.2f%%", 100*s.ErrorRatio),
			strconv.FormatFloat(s.DropsPerSecond, 'f', 2, 64),
			s.Issued, s.Succeeded, s.Errored, s.InProgress, s.Dropped, len(s.Replicas))
		row(w, cols...)
	}
	return w.Flush()
}
