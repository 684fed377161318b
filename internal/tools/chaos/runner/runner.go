// Package runner runs one seed of the chaos run: a local cluster of 3
// etcd members and 3 replicas behind fault proxies, the load tool's
// clients (SotW and delta, resuming as Envoy does, spread over the
// replicas) recording every response, a steady rate of multi-resource
// applies, the seed's fault schedule, then heal, a wait for the clients
// to settle, and the history checker over the recording (docs/development/chaos.md).
package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/legation-io/legation/internal/testkit/fixture"
	"github.com/legation-io/legation/internal/tools/chaos"
	"github.com/legation-io/legation/internal/tools/chaos/faults"
	"github.com/legation-io/legation/internal/tools/chaos/record"
	"github.com/legation-io/legation/internal/tools/loadgen"
	"github.com/legation-io/legation/internal/tools/localcluster"
)

// Config is one seed's run. DefaultConfig fills all but Seed, Dir and
// Binaries.
type Config struct {
	// Seed draws the fault schedule and the applies.
	Seed uint64
	// Duration is how long faults are injected; Every the mean time
	// between two (faults.Schedule).
	Duration, Every time.Duration
	// Kinds, if set, are the only fault kinds drawn. Empty: all.
	Kinds []faults.Kind
	// Clients is the simulated Envoys: half SotW, half delta, each on a
	// connection of its own to one of three fronts (front k prefers
	// replica k and fails over to the others).
	Clients int
	// ApplyEvery is the time between two applies.
	ApplyEvery time.Duration
	// Rollouts has the applier begin one write-only change in five as a
	// canary rollout to 30% of the nodes, promoted or aborted 2 to 5
	// applies later, and the checker hold the nodes to their side (on in
	// DefaultConfig).
	Rollouts bool
	// Clusters, Endpoints and Listeners size the fixture.
	Clusters, Endpoints, Listeners int
	// ConvergeWithin bounds the time from the heal to a client's last
	// response; Quiet is how long no client may receive anything before
	// the run ends once healed.
	ConvergeWithin, Quiet time.Duration
	// Dir is where the run keeps its cluster's state, the recording and
	// etcd's history. Its path must be short (the cluster's Unix
	// sockets live there). Removed after a clean seed unless Keep.
	Dir  string
	Keep bool
	// Binaries are etcd and xds-node (localcluster.Build).
	Binaries localcluster.Binaries
	// Env is the processes' environment (localcluster.Config.Env).
	Env []string
	// Logger gets the run's lines: faults applied and healed, processes
	// started and stopped. Nil: discard.
	Logger *slog.Logger
}

// DefaultConfig is the run of `make chaos`: 5 minutes, a fault every 4 s
// on average, 300 clients, an apply every 500 ms, canary rollouts.
func DefaultConfig() Config {
	return Config{
		Duration:       5 * time.Minute,
		Every:          4 * time.Second,
		Clients:        300,
		ApplyEvery:     500 * time.Millisecond,
		Rollouts:       true,
		Clusters:       20,
		Endpoints:      3,
		Listeners:      4,
		ConvergeWithin: 30 * time.Second,
		Quiet:          5 * time.Second,
	}
}

// Validate checks the fields.
func (c *Config) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.Every <= 0 || c.Duration < c.Every {
		add("--duration %s, --every %s: want 0 < every <= duration", c.Duration, c.Every)
	}
	if c.Clients < 2 {
		add("--clients %d: want 2 or more (half SotW, half delta)", c.Clients)
	}
	if c.ApplyEvery <= 0 {
		add("--apply-every %s: want more than 0", c.ApplyEvery)
	}
	if c.Clusters < 4 {
		add("--clusters %d: want 4 or more", c.Clusters)
	}
	if c.Endpoints < 1 {
		add("--endpoints %d: want 1 or more", c.Endpoints)
	}
	if c.Listeners < 0 {
		add("--listeners %d: must not be negative", c.Listeners)
	}
	if c.ConvergeWithin <= 0 {
		add("--converge-within %s: want more than 0", c.ConvergeWithin)
	}
	if c.Quiet <= 0 {
		add("--quiet %s: want more than 0", c.Quiet)
	}
	if c.Dir == "" {
		add("Dir: empty")
	}
	if c.Binaries.Etcd == "" || c.Binaries.XDSNode == "" {
		add("Binaries: etcd and xds-node needed")
	}
	return errors.Join(errs...)
}

// Summary is what one seed's run did and found.
type Summary struct {
	Seed uint64 `json:"seed"`
	// Faults is the schedule's length, FaultsApplied those applied (a
	// fault on a process still starting after an earlier one fails and
	// is logged), FaultErrors their errors.
	Faults        int      `json:"faults"`
	FaultsApplied int      `json:"faults_applied"`
	FaultErrors   []string `json:"fault_errors,omitempty"`
	// Applies are the applies made, ApplyFailures those that failed (etcd
	// unreachable through a fault, a timeout).
	Applies       int `json:"applies"`
	ApplyFailures int `json:"apply_failures"`
	// Rollouts are the ids of the canary rollouts the applier began (to
	// canaryShare of the nodes), Promoted and Aborted how many it ended
	// each way: the checker holds the nodes they pick to their overlays.
	Rollouts []string `json:"rollouts,omitempty"`
	Promoted int      `json:"promoted,omitempty"`
	Aborted  int      `json:"aborted,omitempty"`
	// Streams is the streams the clients opened, Responses those checked
	// and Unknown those of them at revisions the history lacks.
	Streams   int `json:"streams"`
	Responses int `json:"responses"`
	Unknown   int `json:"unknown"`
	// Violations are the checker's findings.
	Violations []chaos.Violation `json:"violations,omitempty"`
	// HealTook is how long healing took (every process back and ready);
	// Converge the time from the start of the heal to the last response
	// a client needed.
	HealTook time.Duration `json:"heal_took"`
	// HealAt is when the heal started: the checker's Options.Heal.
	HealAt   time.Time     `json:"heal_at"`
	Converge time.Duration `json:"converge"`
	// Effects is what each fault class did to the clients (by kind, and
	// NoFault for the applies made with no fault's window open).
	Effects map[string]Effect `json:"effects,omitempty"`
	// Crashes are processes that ended on their own (not a fault's kill)
	// and replicas whose logs show a panic or a data race.
	Crashes []string `json:"crashes,omitempty"`
	// HealError is why the heal failed, if it did.
	HealError string        `json:"heal_error,omitempty"`
	Elapsed   time.Duration `json:"elapsed"`
	// Kept is where the run's files are when they were kept.
	Kept string `json:"kept,omitempty"`
}

// OK reports whether the seed passed: no violation, no crash, healed.
func (s Summary) OK() bool {
	return len(s.Violations) == 0 && len(s.Crashes) == 0 && s.HealError == ""
}

// Line is the summary in one line.
func (s Summary) Line() string {
	verdict := "ok"
	if !s.OK() {
		verdict = "FAIL"
	}
	return fmt.Sprintf("seed %d: %d/%d faults applied, %d applies (%d failed), %d rollouts (%d promoted, %d aborted), %d streams, %d responses checked (%d at unknown revisions), %d violations, converged %s after heal (heal took %s), %d crashes, %s: %s",
		s.Seed, s.FaultsApplied, s.Faults, s.Applies, s.ApplyFailures, len(s.Rollouts), s.Promoted, s.Aborted, s.Streams, s.Responses, s.Unknown, len(s.Violations),
		s.Converge.Round(10*time.Millisecond), s.HealTook.Round(10*time.Millisecond), len(s.Crashes), s.Elapsed.Round(time.Second), verdict)
}

// Run runs one seed and returns its summary; the error is for a run that
// could not be made (the cluster did not start, the clients did not
// sync), not for what the checker found.
func Run(ctx context.Context, cfg Config) (sum Summary, err error) {
	if err := cfg.Validate(); err != nil {
		return Summary{}, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("seed", cfg.Seed)
	start := time.Now()
	sum.Seed = cfg.Seed
	shape := faults.Shape{EtcdMembers: 3, Replicas: 3, Kinds: cfg.Kinds}
	sched, err := faults.Schedule(cfg.Seed, cfg.Duration, cfg.Every, shape)
	if err != nil {
		return sum, err
	}
	sum.Faults = len(sched)
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return sum, fmt.Errorf("chaos: %w", err)
	}
	defer func() { keepOrRemove(&sum, cfg, err, start) }()
	s := &seedRun{cfg: cfg, logger: logger, sum: &sum}
	defer s.close()
	if err := s.start(ctx); err != nil {
		return sum, err
	}
	// Not `return sum, s.exercise(...)`: exercise fills sum, and a
	// return statement reads sum in no set order with the call.
	err = s.exercise(ctx, sched)
	return sum, err
}

// The files of a seed's directory.
const (
	historyFile   = "history.jsonl"
	recordingFile = "recording.jsonl"
	summaryFile   = "summary.json"
)

// check runs the checker over a seed's history and recording into sum.
func (sum *Summary) check(h *chaos.History, events []record.Event, within time.Duration) {
	sum.Streams = 0
	for _, e := range events {
		if e.Kind == record.KindStart {
			sum.Streams++
		}
	}
	opts := chaos.DocumentedExceptions()
	opts.Overlays = overlays(sum.Rollouts)
	opts.Heal = sum.HealAt
	opts.ConvergeWithin = within
	rep := chaos.CheckRun(h, events, opts)
	sum.Responses, sum.Unknown, sum.Violations, sum.Converge = rep.Responses, rep.Unknown, rep.Violations, rep.Converge
}

// Recheck checks again the files a failed seed kept in dir (after a fix
// of the checker, say): its summary's heal time, etcd's history and the
// recording. The summary's other figures are the run's.
func Recheck(dir string, within time.Duration) (Summary, error) {
	var sum Summary
	b, err := os.ReadFile(filepath.Join(dir, summaryFile))
	if err != nil {
		return sum, fmt.Errorf("chaos: %w", err)
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		return sum, fmt.Errorf("chaos: %s: %w", filepath.Join(dir, summaryFile), err)
	}
	h, err := chaos.ReadHistoryFile(filepath.Join(dir, historyFile))
	if err != nil {
		return sum, err
	}
	events, err := record.ReadEventsFile(filepath.Join(dir, recordingFile))
	if err != nil {
		return sum, err
	}
	sum.check(h, events, within)
	sum.Kept = dir
	return sum, nil
}

// liveReplicas is the xDS addresses of the cluster's replicas that run,
// from the kth on: what a load balancer that health-checks would pick
// from (a frozen replica is left out, as failing its checks).
func liveReplicas(c *localcluster.Cluster, k int) []string {
	reps := c.Replicas()
	var out []string
	for j := range reps {
		r := reps[(k+j)%len(reps)]
		if r.State == localcluster.Running {
			out = append(out, r.XDSAddr)
		}
	}
	return out
}

// seededTarget is a fixture already written: the load tool's runs start
// from it without writing.
type seededTarget struct{ c loadgen.Commit }

func (t seededTarget) Seed(context.Context, fixture.Set) (loadgen.Commit, error) { return t.c, nil }

func (t seededTarget) SetEndpoints(context.Context, fixture.EndpointSet) (loadgen.Commit, error) {
	return loadgen.Commit{}, errors.New("chaos: the clients' runs make no updates")
}

// lastRecorder records to w and keeps when the last event came.
type lastRecorder struct {
	w  *record.Writer
	at atomic.Int64 // unix nanoseconds
}

func (r *lastRecorder) Record(e *record.Event) {
	r.at.Store(e.Time.UnixNano())
	r.w.Record(e)
}

func (r *lastRecorder) last() time.Time { return time.Unix(0, r.at.Load()) }

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// unjoin is the errors of errors.Join's result, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
