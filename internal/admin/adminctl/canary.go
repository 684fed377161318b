package adminctl

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/legation-io/legation/internal/state/rollout"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/tracing"
)

// canaryFlags are apply's flags that make it a canary rollout.
type canaryFlags struct {
	selector      string
	bake          time.Duration
	maxRejections int
	promote       string
}

// addCanaryFlags defines them on cmd.
func (f *canaryFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.selector, "canary", "", "roll the change out as a canary first: to a share of nodes (10%), the nodes whose id matches a pattern (node:edge-eu-*) or a group (group:NAME); see xdsadmin rollout")
	fl.DurationVar(&f.bake, "bake", time.Minute, "with --canary: how long the canary nodes run the change before it may be promoted")
	fl.IntVar(&f.maxRejections, "max-rejections", 0, "with --canary: how many canary nodes may reject (NACK) the change; one more aborts the rollout")
	fl.StringVar(&f.promote, "promote", rollout.PromoteAuto, "with --canary: auto (the replicas promote it once baked) or manual (xdsadmin rollout promote)")
}

// check refuses the canary flags' bad combinations with apply's others;
// changed says whether a flag was given.
func (f *canaryFlags) check(af *applyFlags, changed func(string) bool) error {
	if f.selector == "" {
		for _, n := range []string{"bake", "max-rejections", "promote"} {
			if changed(n) {
				return fmt.Errorf("--%s needs --canary", n)
			}
		}
		return nil
	}
	if _, err := rollout.ParseSelector(f.selector); err != nil {
		return fmt.Errorf("--canary: %w", err)
	}
	switch {
	case af.prune:
		return errors.New("--canary and --prune exclude each other: a rollout writes resources, it deletes none")
	case af.ttl != 0:
		return errors.New("--canary and --ttl exclude each other: a rollout's resources have no TTL")
	case af.chunked:
		return errors.New("--canary and --chunked exclude each other: a rollout is written in one transaction")
	case f.bake < 0:
		return fmt.Errorf("--bake %s: must not be negative", f.bake)
	case f.maxRejections < 0:
		return fmt.Errorf("--max-rejections %d: must not be negative", f.maxRejections)
	case f.promote != rollout.PromoteAuto && f.promote != rollout.PromoteManual:
		return fmt.Errorf("--promote %q: want auto or manual", f.promote)
	}
	return nil
}

// runCanary begins a rollout of req's puts, holding the scope's apply
// lock, and prints it; it warns when the selector picks no connected
// node. With dryRun it prints what the rollout would change.
func (a *app) runCanary(ctx context.Context, c *conn, req store.PlanRequest, f applyFlags) error {
	ctx, span := a.tracing.Tracer().Start(ctx, "legation.apply")
	defer span.End()
	if f.dryRun {
		ctx, cancel := a.commandContext(ctx)
		defer cancel()
		plan, err := c.store.MakePlan(ctx, req)
		if err != nil {
			return err
		}
		fmt.Fprintf(a.errOut, "(dry run) a rollout to %s would change:\n", f.canary.selector)
		return a.printApply(plan, nil)
	}
	release, err := a.lock(ctx, c, lockSpec{scope: f.scope, timeout: f.lockTimeout})
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := a.commandContext(ctx)
	defer cancel()
	r, err := c.rollouts().Begin(ctx, rollout.Start{Scope: f.scope, Puts: req.Puts, Selector: f.canary.selector, Bake: f.canary.bake,
		MaxRejections: f.canary.maxRejections, Promote: f.canary.promote, Message: f.message, Traceparent: tracing.Traceparent(ctx)})
	if err != nil {
		return err
	}
	p, err := c.progress(ctx, r)
	if err != nil {
		return err
	}
	if p.Canary == 0 {
		fmt.Fprintf(a.errOut, "xdsadmin: warning: --canary %s picks none of the %d connected nodes that see scope %q: the rollout runs, and nodes that connect and match get it\n",
			f.canary.selector, p.Others, f.scope)
	}
	return a.printRollout(r, &p)
}
