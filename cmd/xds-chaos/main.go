// Command xds-chaos runs the chaos run of docs/development/chaos.md: for each
// seed, a local cluster of 3 etcd members and 3 replicas, 300 recording
// clients, applies at a steady rate and the seed's random faults, then
// heal, and the history checker over what every client received. It
// prints one summary line per seed (and each violation), and a total.
// The work is package runner's.
//
// Exit codes: 0 when every seed passed, 1 when one failed (a violation, a
// crash, a heal that failed) or could not run, 2 on a bad flag.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/legation-io/legation/internal/tools/chaos/faults"
	"github.com/legation-io/legation/internal/tools/chaos/runner"
	"github.com/legation-io/legation/internal/tools/localcluster"
)

// options are the flags beyond runner.Config's.
type options struct {
	seeds     int
	firstSeed uint64
	only      string
	parallel  int
	dir       string
	etcdBin   string
	xdsBin    string
	kinds     string
	output    string
	verbose   bool
	recheck   []string
	regress   bool
}

func main() {
	cfg, o, seeds, err := parseFlags(os.Args[1:])
	if errors.Is(err, pflag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "xds-chaos:", err)
		os.Exit(2)
	}
	if len(o.recheck) > 0 {
		if !recheck(o, cfg.ConvergeWithin, os.Stdout) {
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	bins, cleanup, err := binaries(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "xds-chaos:", err)
		os.Exit(1)
	}
	defer cleanup()
	cfg.Binaries = bins
	if !run(ctx, o, jobs(cfg, o, seeds), os.Stdout) {
		cleanup()
		os.Exit(1)
	}
}

// parseFlags turns the command line into the runs' Config, the options
// and the seeds to run; errors name the flag.
func parseFlags(args []string) (runner.Config, options, []uint64, error) {
	cfg := runner.DefaultConfig()
	var o options
	fs := flagSet(&cfg, &o)
	if err := fs.Parse(args); err != nil {
		return cfg, o, nil, err
	}
	seeds, serr := o.seedList()
	var kerr error
	cfg.Kinds, kerr = parseKinds(o.kinds)
	// The fields the runner fills per seed are set, so that Validate
	// judges the rest.
	probe := cfg
	probe.Dir, probe.Binaries = "x", localcluster.Binaries{Etcd: "x", XDSNode: "x"}
	return cfg, o, seeds, errors.Join(serr, kerr, o.validate(), probe.Validate())
}

// flagSet is xds-chaos's flags, in the order --help lists them, set into
// cfg and o.
func flagSet(cfg *runner.Config, o *options) *pflag.FlagSet {
	fs := pflag.NewFlagSet("xds-chaos", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: xds-chaos [flags]\n\n"+
			"Runs the chaos run: per seed, a local cluster of 3 etcd members and 3 replicas, recording clients,\n"+
			"applies and the seed's random faults, then heal, and the check of what every client received.\n"+
			"Exit status 0 when every seed passed, 1 when one failed, 2 on a bad flag.\n\nFlags:\n")
		fs.PrintDefaults()
		fmt.Fprintf(os.Stderr, "\nExamples:\n%s", usageExamples)
	}
	fs.IntVar(&o.seeds, "seeds", 1, "how many seeds to run: --first-seed and the ones after it")
	fs.Uint64Var(&o.firstSeed, "first-seed", 1, "the first seed")
	fs.StringVar(&o.only, "seed-list", "", "comma-separated seeds to run instead of --seeds and --first-seed (the named regression seeds: docs/development/chaos.md)")
	fs.IntVar(&o.parallel, "parallel", 1, "seeds run at once, each on a cluster of its own")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long faults are injected, per seed")
	fs.DurationVar(&cfg.Every, "every", cfg.Every, "the mean time between two faults")
	fs.StringVar(&o.kinds, "kinds", "", "comma-separated fault kinds to draw from; empty: all (kill-replica, freeze-replica, restart-replica, kill-etcd, freeze-etcd, delay-etcd, drop-etcd, blackhole-etcd, partition-gossip, compact-etcd, add-replica, remove-replica)")
	fs.IntVar(&cfg.Clients, "clients", cfg.Clients, "simulated Envoys: half SotW, half delta, each on a connection of its own")
	fs.DurationVar(&cfg.ApplyEvery, "apply-every", cfg.ApplyEvery, "the time between two applies (each changes several resources in one transaction)")
	fs.BoolVar(&cfg.Rollouts, "rollouts", cfg.Rollouts, "begin one write-only change in five as a canary rollout to 30% of the nodes, promoted or aborted a few applies later, and check that each node holds its side (--rollouts=false: none)")
	fs.IntVar(&cfg.Clusters, "clusters", cfg.Clusters, "clusters (each with its endpoints) in the fixture")
	fs.IntVar(&cfg.Endpoints, "endpoints", cfg.Endpoints, "endpoints per cluster")
	fs.IntVar(&cfg.Listeners, "listeners", cfg.Listeners, "listeners (each with its route configuration) in the fixture")
	fs.DurationVar(&cfg.ConvergeWithin, "converge-within", cfg.ConvergeWithin, "bound on the time from the heal to a client's last response")
	fs.DurationVar(&cfg.Quiet, "quiet", cfg.Quiet, "once healed, the run ends when no client received anything for this long")
	fs.StringVar(&o.dir, "dir", os.TempDir(), "where each seed's files go (DIR/legation-chaos-SEED-*: the cluster's logs, the recording, etcd's history, the run's log); kept for a seed that failed")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep every seed's files, not only those of failed seeds")
	fs.StringVar(&o.etcdBin, "etcd-bin", "", "the etcd binary; empty: built from the pinned module (with --xds-node-bin) into a temporary directory")
	fs.StringVar(&o.xdsBin, "xds-node-bin", "", "the xds-node binary; empty: built from this module")
	fs.StringVarP(&o.output, "output", "o", "text", "text (one line per seed) or json (one object per seed, a line each)")
	fs.BoolVarP(&o.verbose, "verbose", "v", false, "also print each seed's log (faults, processes) on stderr")
	fs.BoolVar(&o.regress, "regressions", false, "run the named regression seeds instead, each with the shape it found its bug with (docs/development/chaos.md); --duration, --every, --clients and --apply-every are theirs")
	fs.StringSliceVar(&o.recheck, "recheck", nil, "run nothing: check again the files a failed seed kept in these directories (its summary.json, history.jsonl and recording.jsonl), as after a change of the checker")
	return fs
}

// usageExamples is the "Examples:" part of --help; a test parses each
// command and docs/reference/xds-chaos.md shows them.
const usageExamples = `  # one seed: 5 minutes of faults; etcd and xds-node built from this module
  xds-chaos
  # 20 seeds, 3 at once, each on a cluster of its own
  xds-chaos --seeds 20 --parallel 3
  # the named regression seeds, each with the shape it found its bug with
  xds-chaos --regressions
  # seed 348 again, with replica faults only, keeping its files
  xds-chaos --seed-list 348 --kinds kill-replica,freeze-replica,restart-replica --keep
  # check again the files a failed seed kept, as after a change of the checker
  xds-chaos --recheck /tmp/legation-chaos-348-1234567
`

// recheck checks again the files of each --recheck directory, printing
// each outcome; it reports whether every seed passed.
func recheck(o options, within time.Duration, out io.Writer) bool {
	ok := true
	for _, dir := range o.recheck {
		sum, err := runner.Recheck(dir, within)
		report(out, o.output, sum, err)
		ok = ok && err == nil && sum.OK()
	}
	return ok
}

// jobs is the runs to make: the regression seeds with --regressions, or
// cfg for each seed.
func jobs(cfg runner.Config, o options, seeds []uint64) []runner.Config {
	jobs := make([]runner.Config, 0, len(seeds))
	if o.regress {
		for _, r := range runner.Regressions {
			jobs = append(jobs, r.Config(cfg))
		}
		return jobs
	}
	for _, seed := range seeds {
		c := cfg
		c.Seed = seed
		jobs = append(jobs, c)
	}
	return jobs
}

func (o *options) validate() error {
	var errs []error
	if o.parallel < 1 {
		errs = append(errs, fmt.Errorf("--parallel %d: want 1 or more", o.parallel))
	}
	if o.output != "text" && o.output != "json" {
		errs = append(errs, fmt.Errorf("--output %q: want text or json", o.output))
	}
	if (o.etcdBin == "") != (o.xdsBin == "") {
		errs = append(errs, errors.New("--etcd-bin and --xds-node-bin: both or neither"))
	}
	return errors.Join(errs...)
}

// maxSeeds bounds --seeds: a seed runs for minutes, so more is a typo,
// and the list of seeds is made before the first runs.
const maxSeeds = 100000

// seedList is the seeds to run, in order.
func (o *options) seedList() ([]uint64, error) {
	if o.only != "" {
		var out []uint64
		for _, s := range strings.Split(o.only, ",") {
			n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("--seed-list: %q is not a seed (a number)", s)
			}
			out = append(out, n)
		}
		return out, nil
	}
	if o.seeds < 1 || o.seeds > maxSeeds {
		return nil, fmt.Errorf("--seeds %d: want 1 to %d", o.seeds, maxSeeds)
	}
	out := make([]uint64, o.seeds)
	for i := range out {
		out[i] = o.firstSeed + uint64(i)
	}
	return out, nil
}

func parseKinds(s string) ([]faults.Kind, error) {
	if s == "" {
		return nil, nil
	}
	var out []faults.Kind
	for _, k := range strings.Split(s, ",") {
		out = append(out, faults.Kind(strings.TrimSpace(k)))
	}
	if err := (faults.Shape{EtcdMembers: 3, Replicas: 3, Kinds: out}).Validate(); err != nil {
		return nil, fmt.Errorf("--kinds: %w", err)
	}
	return out, nil
}

// binaries are the flags' binaries, or etcd and xds-node built into a
// temporary directory that cleanup removes.
func binaries(ctx context.Context, o options) (localcluster.Binaries, func(), error) {
	if o.etcdBin != "" {
		return localcluster.Binaries{Etcd: o.etcdBin, XDSNode: o.xdsBin}, func() {}, nil
	}
	root, err := localcluster.ModuleRoot()
	if err != nil {
		return localcluster.Binaries{}, nil, fmt.Errorf("%w (or give --etcd-bin and --xds-node-bin)", err)
	}
	dir, err := os.MkdirTemp("", "legation-chaos-bin-")
	if err != nil {
		return localcluster.Binaries{}, nil, err
	}
	cleanup := sync.OnceFunc(func() { os.RemoveAll(dir) })
	fmt.Fprintln(os.Stderr, "xds-chaos: building etcd and xds-node")
	bins, err := localcluster.Build(ctx, root, dir, false)
	if err != nil {
		cleanup()
		return localcluster.Binaries{}, nil, err
	}
	return bins, cleanup, nil
}

// run runs the seeds' jobs, o.parallel at a time, printing each seed's
// outcome as it ends and a total; it reports whether every seed passed.
func run(ctx context.Context, o options, jobs []runner.Config, out io.Writer) bool {
	t := &totals{out: out, format: o.output, passed: true, effects: map[string]runner.Effect{}}
	sem := make(chan struct{}, o.parallel)
	var wg sync.WaitGroup
	for _, job := range jobs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			sum, err := runSeed(ctx, job, o)
			t.add(sum, err)
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		fmt.Fprintln(out, "xds-chaos: interrupted")
		return false
	}
	if o.output == "text" {
		t.write(len(jobs))
	}
	return t.passed
}

// totals is the seeds' outcomes added up, and where each is reported.
type totals struct {
	mu      sync.Mutex // guards out and the fields below
	out     io.Writer
	format  string
	passed  bool
	sum     runner.Summary // faults applied, responses and violations, summed
	worst   time.Duration  // the slowest convergence
	effects map[string]runner.Effect
}

// add reports a seed's outcome and adds it to the totals.
func (t *totals) add(sum runner.Summary, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil || !sum.OK() {
		t.passed = false
	}
	t.sum.Faults += sum.FaultsApplied
	t.sum.Responses += sum.Responses
	t.sum.Violations = append(t.sum.Violations, sum.Violations...)
	t.worst = max(t.worst, sum.Converge)
	addEffects(t.effects, sum.Effects)
	report(t.out, t.format, sum, err)
}

// write prints the totals of n seeds, and the effects table.
func (t *totals) write(n int) {
	verdict := "ok"
	if !t.passed {
		verdict = "FAIL"
	}
	fmt.Fprintf(t.out, "%d seeds: %d faults, %d responses checked, %d violations, slowest convergence %s: %s\n",
		n, t.sum.Faults, t.sum.Responses, len(t.sum.Violations), t.worst.Round(10*time.Millisecond), verdict)
	writeEffects(t.out, t.effects)
}

// addEffects adds a seed's effects to the totals: counts summed, lags
// the worst seed's.
func addEffects(total, seed map[string]runner.Effect) {
	for k, e := range seed {
		t := total[k]
		t.Faults += e.Faults
		t.Seconds += e.Seconds
		t.StreamEnds += e.StreamEnds
		t.Applies += e.Applies
		t.LagP50 = max(t.LagP50, e.LagP50)
		t.LagP99 = max(t.LagP99, e.LagP99)
		t.LagMax = max(t.LagMax, e.LagMax)
		total[k] = t
	}
}

// writeEffects prints what each fault class did to the clients, over the
// seeds: the table of docs/reliability.md.
func writeEffects(out io.Writer, effects map[string]runner.Effect) {
	if len(effects) == 0 {
		return
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "fault class\tfaults\tseconds\tstream ends\tapplies\tdelivery p50\tp99 (worst seed)\tmax\t")
	for _, k := range slices.Sorted(maps.Keys(effects)) {
		e := effects[k]
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%d\t%d\t%s\t%s\t%s\t\n", k, e.Faults, e.Seconds, e.StreamEnds, e.Applies,
			e.LagP50.Round(time.Millisecond), e.LagP99.Round(time.Millisecond), e.LagMax.Round(time.Millisecond))
	}
	tw.Flush()
}

// maxViolationsShown bounds the violations printed per seed (all are in
// the JSON output).
const maxViolationsShown = 20

func report(out io.Writer, format string, sum runner.Summary, err error) {
	if format == "json" {
		line := struct {
			runner.Summary
			Error string `json:"error,omitempty"`
		}{Summary: sum}
		if err != nil {
			line.Error = err.Error()
		}
		b, _ := json.Marshal(line)
		fmt.Fprintln(out, string(b))
		return
	}
	if err != nil {
		fmt.Fprintf(out, "seed %d: could not run: %v (files in %s)\n", sum.Seed, err, sum.Kept)
		return
	}
	fmt.Fprintln(out, sum.Line())
	for i, v := range sum.Violations {
		if i == maxViolationsShown {
			fmt.Fprintf(out, "  ... and %d more\n", len(sum.Violations)-i)
			break
		}
		fmt.Fprintln(out, "  violation:", v)
	}
	for _, c := range sum.Crashes {
		fmt.Fprintln(out, "  crash:", c)
	}
	for _, e := range sum.FaultErrors {
		fmt.Fprintln(out, "  fault not applied:", e)
	}
	if sum.HealError != "" {
		fmt.Fprintln(out, "  heal failed:", sum.HealError)
	}
	if sum.Kept != "" {
		fmt.Fprintln(out, "  files kept in", sum.Kept)
	}
}

// runSeed runs one seed in a directory of its own under o.dir, with its
// log in that directory (and on stderr with --verbose).
func runSeed(ctx context.Context, cfg runner.Config, o options) (runner.Summary, error) {
	seed := cfg.Seed
	dir, err := os.MkdirTemp(o.dir, fmt.Sprintf("legation-chaos-%d-", seed))
	if err != nil {
		return runner.Summary{Seed: seed}, err
	}
	cfg.Dir = dir
	logf, err := os.Create(filepath.Join(dir, "run.log"))
	if err != nil {
		return runner.Summary{Seed: seed, Kept: dir}, err
	}
	defer logf.Close()
	var w io.Writer = logf
	if o.verbose {
		w = io.MultiWriter(logf, os.Stderr)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(w, nil))
	return runner.Run(ctx, cfg)
}
