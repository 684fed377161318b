package adminctl

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/legation-io/legation/internal/state/store"
)

func (a *app) watchCommand() *cobra.Command {
	var from int64
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Stream resource changes as they happen",
		Long: `watch prints every change to the stored resources as etcd commits it, until
interrupted (Ctrl-C, which is a success). All the changes of one revision
(one apply) come together.

Output, one change per line:
  table  REVISION ACTION TYPE SCOPE NAME
  json   one JSON object per line: {"revision","action","type","scope","name"}
  yaml   one document per change

With --revision R it first replays the changes after R that etcd still holds
(an error if R is compacted).`,
		Example: `  xdsadmin watch
  xdsadmin watch --revision 41 -o json`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runWatch(cmd.Context(), from)
		},
	}
	cmd.Flags().Int64Var(&from, "revision", 0, "print the changes after this revision (0: from now)")
	return cmd
}

// watchLine is one change in json/yaml watch output.
type watchLine struct {
	Revision int64 `json:"revision"`
	change
}

// runWatch streams changes until ctx ends, which is a success.
func (a *app) runWatch(ctx context.Context, from int64) error {
	if from < 0 {
		return fmt.Errorf("--revision %d: must not be negative (0: from now)", from)
	}
	cctx, cancel := a.commandContext(ctx)
	c, err := a.connect(cctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer c.Close()
	if from == 0 {
		// Watch from the revision the connection saw, and say which.
		from = c.revision
	}
	fmt.Fprintf(a.errOut, "watching changes after revision %d\n", from)

	events, errc := c.store.Watch(ctx, from)
	for ev := range events {
		a.warnMalformed(ev.Malformed)
		if err := a.printWatchEvent(ev); err != nil {
			return err
		}
	}
	err = <-errc
	if ctx.Err() != nil {
		return nil
	}
	if err == nil {
		err = fmt.Errorf("watch ended")
	}
	return err
}

func (a *app) printWatchEvent(ev store.WatchEvent) error {
	switch a.opts.Output {
	case outputJSON:
		for _, ch := range ev.Changes {
			b, err := json.Marshal(watchLine{Revision: ev.Revision, change: changeOf(ch)})
			if err != nil {
				return err
			}
			if _, err := a.out.Write(append(b, '\n')); err != nil {
				return err
			}
		}
		return nil
	case outputYAML:
		for _, ch := range ev.Changes {
			b, err := yaml.Marshal(watchLine{Revision: ev.Revision, change: changeOf(ch)})
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(a.out, "---\n%s", b); err != nil {
				return err
			}
		}
		return nil
	}
	w := newTable(a.out)
	for _, ch := range ev.Changes {
		c := changeOf(ch)
		row(w, ev.Revision, c.Action, c.Type, c.Scope, c.Name)
	}
	return w.Flush()
}
