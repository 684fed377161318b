// Command xds-node is one Legation replica: it watches etcd and serves
// Envoy's xDS. With no flag it runs in dev mode, with an embedded etcd on
// 127.0.0.1:2379 (where xdsadmin looks by default) and data in
// ./legation-data. Every flag can also be given as an environment variable
// LEGATION_<FLAG> (--etcd-endpoints is LEGATION_ETCD_ENDPOINTS); a flag on
// the command line wins.
//
// Exit codes: 0 after a clean shutdown (SIGINT, SIGTERM) and after
// --help or --version, 1 on a runtime error, 2 on a bad flag.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/attribute"

	"github.com/legation-io/legation"
	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/state/etcdconn"
	"github.com/legation-io/legation/internal/tracing"
)

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, pflag.ErrHelp) {
		os.Exit(0)
	}
	if errors.Is(err, errVersion) {
		fmt.Println("xds-node " + legation.BuildInfo().String())
		os.Exit(0)
	}
	if err != nil {
		// One line per problem: Validate reports them all.
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(os.Stderr, "xds-node: %s\n", line)
		}
		os.Exit(2)
	}
	cfg.Registerer = replica.NewRegistry()
	tp, err := tracing.New(context.Background(), tracing.Config{Service: "xds-node",
		Attributes: []attribute.KeyValue{attribute.String("legation.replica", cfg.Name)}, Logger: cfg.Logger})
	if err != nil {
		cfg.Logger.Error("xds-node cannot start", "err", err)
		os.Exit(1)
	}
	cfg.Tracing = tp

	n, err := replica.New(cfg)
	if err != nil {
		cfg.Logger.Error("xds-node cannot start", "err", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	// Once shutdown began, a second signal kills at once.
	context.AfterFunc(ctx, stop)
	err = n.Run(ctx)
	// The spans not yet exported go out (or give up) before the exit.
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if serr := tp.Shutdown(sctx); serr != nil {
		cfg.Logger.Warn("xds-node: traces", "err", serr)
	}
	cancel()
	if err != nil {
		cfg.Logger.Error("xds-node failed", "err", err)
		os.Exit(1)
	}
}

// parseFlags turns the command line and LEGATION_* variables into a
// checked Config with its Logger set. Errors name the flag.
func parseFlags(args []string) (replica.Config, error) {
	cfg := replica.DefaultConfig()
	fs, logLevel, logFormat := newFlagSet(&cfg)
	if err := fs.Parse(args); err != nil {
		if !errors.Is(err, pflag.ErrHelp) {
			err = fmt.Errorf("%w (see --help)", err)
		}
		return cfg, err
	}
	if v, _ := fs.GetBool(flagVersion); v {
		return cfg, errVersion
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q (see --help)", fs.Arg(0))
	}
	if err := applyEnv(fs); err != nil {
		return cfg, err
	}
	if fs.Changed(flagDebugOpen) {
		return cfg, errDebugOpen
	}
	if err := cfg.EtcdSecurity.LoadPassword(os.LookupEnv); err != nil {
		return cfg, err
	}
	cfg.EtcdEndpoints = cleanList(cfg.EtcdEndpoints)
	cfg.Join = cleanList(cfg.Join)
	cfg.ReplicaIdentities = cleanList(cfg.ReplicaIdentities)
	if cfg.DevMode() {
		// Dev mode is private until the operator picks an address: its
		// listeners default to loopback, not every interface.
		for _, name := range devLoopbackFlags {
			if f := fs.Lookup(name); !f.Changed {
				if err := f.Value.Set(loopbackDefault(f.Value.String())); err != nil {
					return cfg, err
				}
			}
		}
	}
	logger, err := newLogger(*logLevel, *logFormat)
	if err != nil {
		return cfg, err
	}
	cfg.Logger = logger
	return cfg, cfg.Validate()
}

// flagEnv is the variable applyEnv sets the flag name from, or "" for
// the flags no variable sets: LEGATION_ETCD_PASSWORD is the password
// itself, which the refused --etcd-password never takes (etcdconn's
// LoadPassword reads it), and --version is an action, not a setting.
func flagEnv(name string) string {
	if name == etcdconn.FlagPassword || name == flagVersion {
		return ""
	}
	return envName(name)
}

// applyEnv sets each flag not given on the command line from its
// LEGATION_* variable (flagEnv), when that is set and not empty.
func applyEnv(fs *pflag.FlagSet) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		env := flagEnv(f.Name)
		if f.Changed || env == "" {
			return
		}
		v := os.Getenv(env)
		if v == "" {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q (--%s): %w", env, v, f.Name, err))
		}
	})
	return errors.Join(errs...)
}

// devLoopbackFlags are the listen addresses that default to loopback in
// dev mode (loopbackDefault of their default).
var devLoopbackFlags = []string{"xds-addr", "http-addr", "gossip-addr"}

// loopbackDefault is addr with an empty host replaced by 127.0.0.1.
func loopbackDefault(addr string) string {
	if host, port, err := net.SplitHostPort(addr); err == nil && host == "" {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}

// cleanList trims the items of a comma list and drops empty ones, so
// "a, b," means [a b].
func cleanList(l []string) []string {
	var out []string
	for _, s := range l {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// newLogger returns a slog logger writing to stderr.
func newLogger(level, format string) (*slog.Logger, error) {
	var lv slog.Level
	switch strings.ToLower(level) {
	case "debug":
		lv = slog.LevelDebug
	case "info":
		lv = slog.LevelInfo
	case "warn":
		lv = slog.LevelWarn
	case "error":
		lv = slog.LevelError
	default:
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}
