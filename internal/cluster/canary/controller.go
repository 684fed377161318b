package canary

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/legation-io/legation/internal/cluster/status"
	"github.com/legation-io/legation/internal/state/keyspace"
	"github.com/legation-io/legation/internal/state/rollout"
	"github.com/legation-io/legation/internal/state/store"
)

// sessionTTL is the lease of a replica's candidacy, in seconds: a leader
// that dies without resigning is replaced this long after.
const sessionTTL = 5

// ControllerConfig is what a Controller is built from.
type ControllerConfig struct {
	// Client, Prefix: the cluster's etcd and key prefix.
	Client *clientv3.Client
	Prefix string
	// Store writes the promotions and aborts, as the replica.
	Store *store.Store
	// Replica is the replica's name, its candidacy's value.
	Replica string
	// Running gives the running rollouts the replica knows.
	Running func() *rollout.Set
	// Records gives the connected nodes' status records; nil reads them
	// from etcd each time (status.List). A replica passes its CSDS
	// cache's, kept current by one watch.
	Records func(ctx context.Context) ([]status.NodeStatus, error)
	// Every is how often the leader judges the running rollouts; zero:
	// 1s.
	Every time.Duration
	Log   *slog.Logger
}

// A Controller runs on every replica: one of them, elected in etcd,
// judges the running rollouts (Measure, Decide) from the nodes' status
// records and promotes or aborts them. Another takes over within
// sessionTTL when the leader is gone. The replicas stand for election
// only while a rollout runs: with none, the controller holds no session
// and writes nothing.
type Controller struct {
	cfg ControllerConfig
	rs  *rollout.Store
}

// NewController returns a Controller of cfg.
func NewController(cfg ControllerConfig) *Controller {
	if cfg.Every <= 0 {
		cfg.Every = time.Second
	}
	if cfg.Records == nil {
		cfg.Records = func(ctx context.Context) ([]status.NodeStatus, error) {
			return status.List(ctx, cfg.Client, cfg.Prefix)
		}
	}
	return &Controller{cfg: cfg, rs: rollout.NewStore(cfg.Store, cfg.Client, cfg.Store.Writer())}
}

// Run waits for a running rollout, campaigns, leads while elected and a
// rollout runs, and starts again, until ctx ends; it returns nil then.
func (c *Controller) Run(ctx context.Context) error {
	for c.waitRunning(ctx) {
		if err := c.term(ctx); err != nil && ctx.Err() == nil {
			c.cfg.Log.Warn("rollout controller: campaigning again", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	return nil
}

// waitRunning waits until a rollout runs; false when ctx ended first.
func (c *Controller) waitRunning(ctx context.Context) bool {
	for ctx.Err() == nil {
		set := c.cfg.Running()
		if len(set.Running()) > 0 {
			return true
		}
		select {
		case <-set.Changed():
		case <-ctx.Done():
		}
	}
	return false
}

// term is one candidacy: campaign, then lead until no rollout runs, the
// session is lost or ctx ends, then resign.
func (c *Controller) term(ctx context.Context) error {
	sess, err := concurrency.NewSession(c.cfg.Client, concurrency.WithTTL(sessionTTL), concurrency.WithContext(ctx))
	if err != nil {
		return err
	}
	defer sess.Close() // revokes the lease: best effort
	e := concurrency.NewElection(sess, keyspace.RolloutElection(c.cfg.Prefix))
	if err := e.Campaign(ctx, c.cfg.Replica); err != nil {
		return err
	}
	c.cfg.Log.Info("rollout controller: leading")
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sess.Done():
			cancel() // the lease is lost: another replica may lead
		case <-lctx.Done():
		}
	}()
	c.lead(lctx)
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer rcancel()
	e.Resign(rctx) //nolint:errcheck // the lease ends anyway
	select {
	case <-sess.Done():
		if ctx.Err() == nil {
			return errors.New("lost the election's lease")
		}
	default:
	}
	return nil
}

// lead judges the running rollouts every c.cfg.Every until none runs
// or ctx ends.
func (c *Controller) lead(ctx context.Context) {
	t := time.NewTicker(c.cfg.Every)
	defer t.Stop()
	for {
		if len(c.cfg.Running().Running()) == 0 {
			return
		}
		if err := c.judge(ctx, time.Now()); err != nil && ctx.Err() == nil {
			c.cfg.Log.Warn("rollout controller", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// judge promotes or aborts each running rollout Decide says to.
func (c *Controller) judge(ctx context.Context, now time.Time) error {
	running := c.cfg.Running().Running()
	recs, err := c.cfg.Records(ctx)
	if err != nil {
		return fmt.Errorf("read the nodes' status: %w", err)
	}
	var errs []error
	for _, r := range running {
		v := Decide(r, Measure(r, recs), now)
		if v.Action == "" {
			continue
		}
		errs = append(errs, c.end(ctx, r, v))
	}
	return errors.Join(errs...)
}

// end carries out verdict v on r; a promotion refused because r's
// resources changed since it began aborts it instead.
func (c *Controller) end(ctx context.Context, r *rollout.Rollout, v Verdict) error {
	var err error
	if v.Action == "promote" {
		_, err = c.rs.Promote(ctx, r.ID, v.Reason)
		if errors.Is(err, rollout.ErrChanged) {
			v = Verdict{Action: "abort", Reason: err.Error()}
		}
	}
	if v.Action == "abort" {
		_, err = c.rs.Abort(ctx, r.ID, v.Reason)
	}
	if errors.Is(err, rollout.ErrEnded) {
		return nil // ended meanwhile, by an operator
	}
	if err != nil {
		return err
	}
	c.cfg.Log.Info("rollout controller: "+v.Action+"d a rollout", "rollout", r.ID, "reason", v.Reason)
	return nil
}
