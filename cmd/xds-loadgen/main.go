// Command xds-loadgen simulates a fleet of Envoys on ADS against a Legation
// replica (or the go-control-plane server of bench/gcp), writes a scenario
// of endpoint changes, and reports each client's commit-to-receipt
// latency, what the clients received, and the server's CPU and RSS
// (docs/development/load-testing.md). The work is package loadgen's.
//
// Exit codes: 0 when the run completed, 1 on a runtime error (the initial
// sync did not complete, a write failed), 2 on a bad flag.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/legation-io/legation/internal/state/etcdconn"
	"github.com/legation-io/legation/internal/state/keyspace"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/tools/chaos/record"
	"github.com/legation-io/legation/internal/tools/loadgen"
)

// options are the flags beyond loadgen.Config's.
type options struct {
	target      string
	mode        string
	output      string
	controlURL  string
	etcd        etcdconn.Options
	etcdPrefix  string
	scope       string
	dialTimeout time.Duration
	cpuProfile  string
	updatesProf string
	record      string
}

// loadgenGCPercent is the garbage collector's target the load tool runs
// with unless GOGC says otherwise: 10,000 simulated clients allocate a few
// KB each per update, and at Go's default (100) a collection every 3 to 4
// seconds took CPU from the server beside it and delayed the receipts of
// the update it overlapped (at 10,000 delta streams, each of the 4 slow
// updates of 15 overlapped one: p99 0.31-0.51 s against 0.21-0.24 s for
// the others). At 400 it collects about every 10 s. Higher, the heap's
// fresh pages cost more than the collections saved (800: every update
// slower).
const loadgenGCPercent = 400

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(loadgenGCPercent)
	}
	if os.Getenv(workerEnv) == "1" {
		os.Exit(serveWorker())
	}
	cfg, opts, err := parseFlags(os.Args[1:])
	if errors.Is(err, pflag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(os.Stderr, "xds-loadgen: %s\n", line)
		}
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, opts); err != nil {
		fmt.Fprintf(os.Stderr, "xds-loadgen: %v\n", err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg loadgen.Config, opts options) (err error) {
	stopProfile, err := profile(&cfg, opts)
	if err != nil {
		return err
	}
	defer stopProfile()
	if opts.record != "" {
		w, err := record.Create(opts.record)
		if err != nil {
			return fmt.Errorf("--record: %w", err)
		}
		cfg.Recorder = w
		defer func() {
			if cerr := w.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("--record: %w", cerr)
			}
		}()
	}
	switch opts.target {
	case "legation":
		cli, st, err := connect(ctx, opts)
		if err != nil {
			return err
		}
		defer cli.Close()
		cfg.Target = &loadgen.StoreTarget{Store: st, Scope: opts.scope}
	case "gcp":
		cfg.Target = &loadgen.HTTPTarget{URL: strings.TrimSuffix(opts.controlURL, "/")}
	}
	res, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if opts.output == "json" {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	res.WriteText(os.Stdout)
	return nil
}

// profile starts the load tool's own CPU profile of the whole run
// (--cpu-profile), or has cfg start it once every client holds the
// fixture (--cpu-profile-updates). The returned func stops the profile
// and closes its file.
func profile(cfg *loadgen.Config, opts options) (stop func(), err error) {
	switch {
	case opts.updatesProf != "":
		f, err := os.Create(opts.updatesProf)
		if err != nil {
			return nil, fmt.Errorf("--cpu-profile-updates: %w", err)
		}
		during := cfg.During
		cfg.During = func(ctx context.Context) error {
			if during != nil {
				if err := during(ctx); err != nil {
					return err
				}
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				return fmt.Errorf("--cpu-profile-updates: %w", err)
			}
			return nil
		}
		return func() { pprof.StopCPUProfile(); f.Close() }, nil
	case opts.cpuProfile != "":
		f, err := os.Create(opts.cpuProfile)
		if err != nil {
			return nil, fmt.Errorf("--cpu-profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("--cpu-profile: %w", err)
		}
		return func() { pprof.StopCPUProfile(); f.Close() }, nil
	}
	return func() {}, nil
}

// connect opens the etcd client and the store, checking within
// --dial-timeout that etcd answers.
func connect(ctx context.Context, opts options) (*clientv3.Client, *store.Store, error) {
	ccfg, err := opts.etcd.ClientConfig()
	if err != nil {
		return nil, nil, err
	}
	ccfg.DialTimeout = opts.dialTimeout
	ccfg.Logger = zap.NewNop()
	cli, err := clientv3.New(ccfg)
	if err != nil {
		return nil, nil, fmt.Errorf("etcd at %s: %w", strings.Join(opts.etcd.Endpoints, ","), err)
	}
	pctx, cancel := context.WithTimeout(ctx, opts.dialTimeout)
	defer cancel()
	if _, err := cli.Get(pctx, opts.etcdPrefix, clientv3.WithCountOnly()); err != nil {
		cli.Close()
		return nil, nil, fmt.Errorf("etcd at %s is unreachable: %w (is it running? set --etcd-endpoints)", strings.Join(opts.etcd.Endpoints, ","), err)
	}
	st, err := store.New(store.Config{Client: cli, Prefix: opts.etcdPrefix, Writer: "xds-loadgen"})
	if err != nil {
		cli.Close()
		return nil, nil, fmt.Errorf("--etcd-prefix: %w", err)
	}
	return cli, st, nil
}

// parseFlags turns the command line into a checked Config; errors name
// the flag.
func parseFlags(args []string) (loadgen.Config, options, error) {
	cfg := loadgen.DefaultConfig()
	opts := defaultOptions()
	var quiet bool
	fs := flagSet(&cfg, &opts, &quiet)
	if err := fs.Parse(args); err != nil {
		if !errors.Is(err, pflag.ErrHelp) {
			err = fmt.Errorf("%w (see --help)", err)
		}
		return cfg, opts, err
	}
	if fs.NArg() > 0 {
		return cfg, opts, fmt.Errorf("unexpected argument %q (see --help)", fs.Arg(0))
	}
	errs := checkTarget(&cfg, &opts)
	errs = append(errs, checkOptions(&cfg, opts)...)
	if !quiet {
		cfg.Progress = os.Stderr
	}
	cfg.StartWorker = startWorker
	// The target is set by run; Validate checks the rest.
	cfg.Target = &loadgen.HTTPTarget{}
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	cfg.Target = nil
	return cfg, opts, errors.Join(errs...)
}

// defaultOptions are the defaults of the flags beyond loadgen.Config's.
func defaultOptions() options {
	return options{target: "legation", mode: "sotw", output: "text", etcdPrefix: keyspace.DefaultPrefix, scope: store.DefaultScope, dialTimeout: 5 * time.Second}
}

// flagSet is xds-loadgen's flags, in the order --help lists them, set
// into cfg, opts and quiet.
func flagSet(cfg *loadgen.Config, opts *options, quiet *bool) *pflag.FlagSet {
	fs := pflag.NewFlagSet("xds-loadgen", pflag.ContinueOnError)
	fs.SortFlags = false
	addTargetFlags(fs, cfg, opts)
	addScenarioFlags(fs, cfg)
	addOutputFlags(fs, cfg, opts, quiet)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: xds-loadgen [flags]\n\n"+
			"Simulates Envoys on ADS against a Legation replica (or bench/gcp's go-control-plane server),\n"+
			"writes a fixture and then one endpoint change per update, and reports commit-to-receipt\n"+
			"latencies, bytes received, stream errors and the server's CPU and RSS.\n\nFlags:\n")
		fs.PrintDefaults()
		fmt.Fprintf(os.Stderr, "\nExamples:\n%s", usageExamples)
	}
	return fs
}

// usageExamples is the "Examples:" part of --help; a test parses each
// command and docs/reference/xds-loadgen.md shows them.
const usageExamples = `  # 2,000 SotW clients on 200 connections against a dev-mode xds-node on this host, 10 updates
  xds-loadgen --streams 2000 --conns 200 --updates 10
  # the same over delta ADS, the result as JSON
  xds-loadgen --mode delta --streams 2000 --conns 200 -o json > delta.json
  # against bench/gcp's go-control-plane server, clients resuming as Envoy does
  xds-loadgen --target gcp --xds-addr 127.0.0.1:18100 --metrics-url http://127.0.0.1:18101/metrics \
    --control-url http://127.0.0.1:18101 --streams 500 --resume
`

// addTargetFlags adds the flags of the server under load: where its
// clients connect, where its metrics are read and where the fixture is
// written.
func addTargetFlags(fs *pflag.FlagSet, cfg *loadgen.Config, opts *options) {
	fs.StringVar(&opts.target, "target", opts.target, "legation (writes to etcd) or gcp (writes to bench/gcp's control endpoint)")
	fs.StringVar(&opts.mode, "mode", opts.mode, "sotw or delta ADS")
	fs.StringVar(&cfg.XDSAddr, "xds-addr", "127.0.0.1:18000", "the server's ADS address, or several separated by commas (connection i dials the (i mod n)th)")
	fs.StringVar(&cfg.MetricsURL, "metrics-url", "http://127.0.0.1:18001/metrics", "the server's /metrics, for its process CPU and RSS, or several separated by commas (a cluster's replicas: added up); empty: not read")
	fs.StringVar(&cfg.EtcdMetricsURL, "etcd-metrics-url", "", "with --target legation and etcd in a process of its own: its /metrics, for etcd's CPU beside the server's, or each member's separated by commas (added up); empty: not read")
	fs.StringVar(&opts.controlURL, "control-url", "http://127.0.0.1:18101", "with --target gcp: the server's control endpoint")
	fs.StringSliceVar(&opts.etcd.Endpoints, etcdconn.FlagEndpoints, []string{"127.0.0.1:2379"}, "with --target legation: etcd endpoints, comma separated")
	fs.StringVar(&opts.etcdPrefix, "etcd-prefix", opts.etcdPrefix, "with --target legation: the replica's etcd key prefix")
	fs.StringVar(&opts.scope, "scope", opts.scope, "with --target legation: the scope the fixture is written in: default (every node sees it) or the clients' group (--node-prefix, with the replica's default --group-by)")
	opts.etcd.AddFlags(fs)
}

// addScenarioFlags adds the flags of the scenario: the clients, the
// fixture, the updates and their bounds.
func addScenarioFlags(fs *pflag.FlagSet, cfg *loadgen.Config) {
	fs.IntVar(&cfg.Streams, "streams", cfg.Streams, "simulated Envoys, one ADS stream each")
	fs.IntVar(&cfg.Processes, "processes", cfg.Processes, "spread the streams over this many worker processes of xds-loadgen (each opens its share of the connections within its own open-file limit)")
	fs.IntVar(&cfg.Conns, "conns", cfg.Conns, "gRPC connections the streams share round robin; 0: one per stream, as a real fleet (a shared connection is a load shape no Envoy fleet has)")
	fs.DurationVar(&cfg.KeepaliveTime, "keepalive-time", cfg.KeepaliveTime, "HTTP/2 ping after this long without activity on a connection, as deploy/envoy's bootstraps (connection_keepalive interval); 0: no pings, else at least 10s")
	fs.DurationVar(&cfg.KeepaliveTimeout, "keepalive-timeout", cfg.KeepaliveTimeout, "close a connection whose ping has no answer within this")
	fs.DurationVar(&cfg.TCPKeepalive, "tcp-keepalive", cfg.TCPKeepalive, "first TCP keepalive probe after this long idle, then every 5s, 3 probes, as deploy/envoy's bootstraps (tcp_keepalive); 0: the kernel's default (on loopback, raise net.core.netdev_max_backlog for thousands of connections: probes of connections idle since the same push come in one burst)")
	fs.Float64Var(&cfg.OpenRate, "open-rate", cfg.OpenRate, "streams opened per second at the start; 0: all at once")
	fs.Float64Var(&cfg.NackRatio, "nack-ratio", cfg.NackRatio, "fraction of responses a synced client NACKs, in [0, 1)")
	fs.IntVar(&cfg.Clusters, "clusters", cfg.Clusters, "EDS clusters in the fixture")
	fs.IntVar(&cfg.Endpoints, "endpoints", cfg.Endpoints, "endpoints per cluster")
	fs.IntVar(&cfg.Listeners, "listeners", cfg.Listeners, "listeners in the fixture, each with its route configuration; with some, clients also subscribe to LDS and RDS")
	fs.IntVar(&cfg.Updates, "updates", cfg.Updates, "updates, each changing one cluster's endpoints")
	fs.DurationVar(&cfg.Interval, "interval", cfg.Interval, "least time between the starts of two updates (each also waits for every client to have the last)")
	fs.DurationVar(&cfg.Idle, "idle", cfg.Idle, "how long the server's CPU is measured with nothing changing; 0: not measured")
	fs.DurationVar(&cfg.SyncTimeout, "sync-timeout", cfg.SyncTimeout, "bound on the initial sync of every client (exceeded: exit 1)")
	fs.DurationVar(&cfg.UpdateTimeout, "update-timeout", cfg.UpdateTimeout, "bound on the wait for every client to receive one update (exceeded: recorded as missing)")
	fs.DurationVar(&cfg.BackoffBase, "backoff-base", cfg.BackoffBase, "first reconnect backoff, doubled at each failure (full jitter)")
	fs.DurationVar(&cfg.BackoffMax, "backoff-max", cfg.BackoffMax, "largest reconnect backoff")
	fs.StringVar(&cfg.NodePrefix, "node-prefix", cfg.NodePrefix, "the clients' node cluster, and the prefix of their node ids")
}

// addOutputFlags adds the flags of what the tool writes (the result, the
// progress lines, a recording, its own profiles), with --resume among
// them where --help has always listed it.
func addOutputFlags(fs *pflag.FlagSet, cfg *loadgen.Config, opts *options, quiet *bool) {
	fs.StringVarP(&opts.output, "output", "o", opts.output, "text or json (on stdout; the progress lines go to stderr)")
	fs.BoolVar(quiet, "quiet", false, "no progress lines")
	fs.BoolVar(&cfg.Resume, "resume", false, "reconnecting clients present what they hold (SotW version_info, delta initial_resource_versions) and ask for it at once, as Envoy does; default: a new stream starts afresh")
	fs.StringVar(&opts.record, "record", "", "write every response the clients receive, and each stream's start and end, to this file as JSON Lines (the chaos checker's input)")
	fs.StringVar(&opts.cpuProfile, "cpu-profile", "", "write the load tool's own CPU profile (go tool pprof) of the whole run to this file")
	fs.StringVar(&opts.updatesProf, "cpu-profile-updates", "", "write the load tool's own CPU profile of the updates only (from when every client holds the fixture) to this file")
}

// checkTarget checks the flags of the --target chosen, and sets the
// result's target name.
func checkTarget(cfg *loadgen.Config, opts *options) []error {
	var errs []error
	switch opts.target {
	case "legation":
		cfg.TargetName = "legation"
		// The password, as xdsadmin takes it: LEGATION_ETCD_PASSWORD or
		// --etcd-password-file, never the command line.
		if err := opts.etcd.LoadPassword(os.LookupEnv); err != nil {
			errs = append(errs, err)
		} else if err := opts.etcd.Validate(); err != nil {
			errs = append(errs, err)
		}
		if err := resource.ValidateScope(opts.scope); err != nil {
			errs = append(errs, fmt.Errorf("--scope: %w", err))
		}
	case "gcp":
		cfg.TargetName = "gcp"
		if opts.controlURL == "" {
			errs = append(errs, errors.New("--control-url: required with --target gcp"))
		}
		if cfg.EtcdMetricsURL != "" {
			errs = append(errs, errors.New("--etcd-metrics-url: only with --target legation"))
		}
	default:
		errs = append(errs, fmt.Errorf("--target %q: must be legation or gcp", opts.target))
	}
	return errs
}

// checkOptions checks --mode, -o and the profiles, and sets cfg.Delta.
func checkOptions(cfg *loadgen.Config, opts options) []error {
	var errs []error
	switch opts.mode {
	case "sotw":
	case "delta":
		cfg.Delta = true
	default:
		errs = append(errs, fmt.Errorf("--mode %q: must be sotw or delta", opts.mode))
	}
	if opts.output != "text" && opts.output != "json" {
		errs = append(errs, fmt.Errorf("-o %q: must be text or json", opts.output))
	}
	if opts.cpuProfile != "" && opts.updatesProf != "" {
		errs = append(errs, errors.New("--cpu-profile and --cpu-profile-updates: give one (a process has one CPU profile at a time)"))
	}
	return errs
}
