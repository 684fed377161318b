package adminctl

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/legation-io/legation/internal/state/etcdconn"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/tracing"
)

// Output formats.
const (
	outputTable = "table"
	outputYAML  = "yaml"
	outputJSON  = "json"
)

var outputFormats = []string{outputTable, outputYAML, outputJSON}

// EnvPrefix is the prefix of the environment variables that set the global
// flags: --etcd-endpoints is also LEGATION_ETCD_ENDPOINTS.
const EnvPrefix = "LEGATION_"

// Options are the global flags, shared by every command.
type Options struct {
	// Endpoints are the etcd endpoints (host:port, http://host:port or
	// https://host:port, all http:// or all https://). At least one.
	Endpoints []string
	// Security is TLS and authentication to etcd: --etcd-cacert,
	// --etcd-cert, --etcd-key, --etcd-username, --etcd-password (or
	// LEGATION_ETCD_PASSWORD). Zero: neither, unless an endpoint is
	// https://.
	Security etcdconn.Security
	// Replica is how xdsadmin talks to the replicas' HTTP port (members):
	// --tls-ca-file, --tls-cert-file, --tls-key-file. Zero: plain HTTP.
	// Validate does not check it: only the commands that talk to replicas
	// do (ReplicaTLS.TLSConfig), so that xds-node's own
	// LEGATION_TLS_CERT_FILE and LEGATION_TLS_KEY_FILE (its serving
	// certificate), left in the environment on a replica's host, do not
	// fail every command.
	Replica ReplicaTLS
	// Prefix is the etcd key prefix; it starts and ends with '/'.
	Prefix string
	// DialTimeout bounds the connection to etcd: a command against an
	// unreachable etcd fails after it. Must be positive.
	DialTimeout time.Duration
	// Timeout bounds each command's work with etcd once connected (for
	// watch, only the connection). Zero means no bound.
	Timeout time.Duration
	// MaxTxnOps and MaxRequestBytes are the etcd servers' --max-txn-ops and
	// --max-request-bytes: an apply beyond them fails before it is sent,
	// unless chunked.
	MaxTxnOps       int
	MaxRequestBytes int
	// HistoryKeep is how many history records the applies keep (see
	// history): each write deletes those older than the newest this many.
	HistoryKeep int
	// Output is the output format: "table", "yaml" or "json".
	Output string
}

// DefaultOptions returns the defaults of the global flags.
func DefaultOptions() Options {
	d := store.DefaultConfig()
	return Options{
		Endpoints:       []string{"127.0.0.1:2379"}, // what xds-node's dev mode serves
		Prefix:          d.Prefix,                   // "/legation/"
		DialTimeout:     3 * time.Second,
		Timeout:         10 * time.Second,
		MaxTxnOps:       d.MaxTxnOps,       // etcd's default, 128
		MaxRequestBytes: d.MaxRequestBytes, // etcd's default, 1.5 MiB
		HistoryKeep:     d.HistoryKeep,     // 100
		Output:          outputTable,
	}
}

// Validate checks the options.
func (o *Options) Validate() error {
	if len(o.Endpoints) == 0 {
		return errors.New("--etcd-endpoints: at least one endpoint is needed")
	}
	eo := o.etcdOptions()
	if err := eo.Validate(); err != nil {
		return err
	}
	switch {
	case !strings.HasPrefix(o.Prefix, "/") || !strings.HasSuffix(o.Prefix, "/"):
		return fmt.Errorf("--etcd-prefix %q: must start and end with '/'", o.Prefix)
	case o.DialTimeout <= 0:
		return fmt.Errorf("--dial-timeout %s: must be positive", o.DialTimeout)
	case o.Timeout < 0:
		return fmt.Errorf("--timeout %s: must not be negative (0: no timeout)", o.Timeout)
	case o.MaxTxnOps < 1:
		return fmt.Errorf("--max-txn-ops %d: must be positive", o.MaxTxnOps)
	case o.MaxRequestBytes < 1024:
		return fmt.Errorf("--max-request-bytes %d: must be at least 1024", o.MaxRequestBytes)
	case o.HistoryKeep < 1:
		return fmt.Errorf("--history-keep %d: must be at least 1", o.HistoryKeep)
	}
	for _, f := range outputFormats {
		if o.Output == f {
			return nil
		}
	}
	return fmt.Errorf("-o/--output %q: want one of %s", o.Output, strings.Join(outputFormats, ", "))
}

// etcdOptions are the etcd client's endpoints and security, as package
// etcdconn takes them.
func (o *Options) etcdOptions() etcdconn.Options {
	return etcdconn.Options{Endpoints: o.Endpoints, Security: o.Security}
}

// app is the state of one command line run: the options and streams.
type app struct {
	opts   Options
	in     io.Reader
	out    io.Writer
	errOut io.Writer
	// lookupEnv reads the environment; os.LookupEnv outside tests.
	lookupEnv func(string) (string, bool)
	// tracing is on when the OTEL_* variables say so (see package
	// tracing); never nil.
	tracing *tracing.Provider
	// bounded are the contexts commandContext bounded by --timeout.
	bounded []context.Context
}

// Run runs xdsadmin with args (without the program name), reading standard
// input from in (for "apply -f -") and writing to out and errOut. It
// returns the process exit code: 0 on success, 2 after an error in the
// command line (an unknown command, flag or argument: see usageError), 1
// after any other error; it prints the error to errOut as "xdsadmin:
// <message>". Cancelling ctx (Ctrl-C)
// ends "watch" with success and any other command with an error.
func Run(ctx context.Context, args []string, in io.Reader, out, errOut io.Writer) int {
	return run(ctx, args, in, out, errOut, os.LookupEnv)
}

// run is Run reading the environment through lookupEnv.
func run(ctx context.Context, args []string, in io.Reader, out, errOut io.Writer, lookupEnv func(string) (string, bool)) int {
	a := &app{in: in, out: out, errOut: errOut, lookupEnv: lookupEnv}
	getenv := func(k string) string { v, _ := lookupEnv(k); return v }
	var log *slog.Logger // says which exporter is on; nothing when off
	if on, _ := tracing.Enabled(getenv); on {
		log = slog.New(slog.NewTextHandler(errOut, nil)).With("cmd", "xdsadmin")
	}
	tp, err := tracing.New(ctx, tracing.Config{Service: "xdsadmin", Getenv: getenv, Logger: log})
	if err != nil {
		fmt.Fprintf(errOut, "xdsadmin: %v\n", err)
		return 1
	}
	a.tracing = tp
	defer func() {
		// The spans of the command go out before the process exits.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			fmt.Fprintf(errOut, "xdsadmin: warning: %v\n", err)
		}
	}()
	cmd := a.rootCommand()
	cmd.SetArgs(args)
	cmd.SetIn(in)
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(errOut, "xdsadmin: %v\n", a.nameTimeout(err))
		if errors.As(err, new(*commandLineError)) {
			return exitUsage
		}
		return 1
	}
	return 0
}

func (a *app) rootCommand() *cobra.Command {
	a.opts = DefaultOptions()
	root := &cobra.Command{
		Use:   "xdsadmin",
		Short: "Manage the Envoy resources Legation serves",
		Long: `xdsadmin writes Envoy xDS resources to etcd, where the Legation replicas
(xds-node) read them, and reads back what is stored.

Every global flag can also be set by an environment variable named
LEGATION_ and the flag in capitals with '_' for '-', e.g.
LEGATION_ETCD_ENDPOINTS=10.0.0.1:2379,10.0.0.2:2379. A flag given on the
command line wins over the environment.`,
		Example: `  xdsadmin apply -f examples/
  xdsadmin get clusters
  xdsadmin status
  xdsadmin --etcd-endpoints https://10.0.0.1:2379,https://10.0.0.2:2379 --etcd-cacert ca.pem members`,
		// Errors are printed once, by Run; a runtime error is no reason to
		// print the usage.
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.applyEnv(cmd.Root().PersistentFlags()); err != nil {
				return err
			}
			if err := a.opts.Security.LoadPassword(a.lookupEnv); err != nil {
				return err
			}
			return a.opts.Validate()
		},
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError(c, err)
	})
	pf := root.PersistentFlags()
	pf.StringSliceVar(&a.opts.Endpoints, "etcd-endpoints", a.opts.Endpoints,
		"etcd endpoints, comma-separated: host:port, http://host:port or https://host:port")
	a.opts.Security.AddFlags(pf)
	a.opts.Replica.addFlags(pf)
	pf.StringVar(&a.opts.Prefix, "etcd-prefix", a.opts.Prefix, "etcd key prefix of Legation's keys")
	pf.DurationVar(&a.opts.DialTimeout, "dial-timeout", a.opts.DialTimeout, "how long to try to reach etcd before failing")
	pf.DurationVar(&a.opts.Timeout, "timeout", a.opts.Timeout, "bound on each command's work with etcd (0: none; watch: only the connection; apply, delete: once the scope's apply lock is taken)")
	pf.IntVar(&a.opts.MaxTxnOps, "max-txn-ops", a.opts.MaxTxnOps, "the etcd servers' --max-txn-ops: operations allowed in one transaction")
	pf.IntVar(&a.opts.MaxRequestBytes, "max-request-bytes", a.opts.MaxRequestBytes, "the etcd servers' --max-request-bytes: bytes allowed in one request")
	pf.IntVar(&a.opts.HistoryKeep, "history-keep", a.opts.HistoryKeep, "history records kept (see history): each apply and delete removes those older than the newest this many")
	pf.StringVarP(&a.opts.Output, "output", "o", a.opts.Output, "output format: table, yaml or json")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp))

	root.AddCommand(a.applyCommand(), a.getCommand(), a.deleteCommand(), a.diffCommand(), a.watchCommand(), a.ttlCommand(), a.statusCommand(), a.membersCommand(), a.loadCommand(), a.authzCommand(), a.exportCommand(), a.historyCommand(), a.rollbackCommand(), a.rolloutCommand(), a.nacksCommand(), a.etcdAuthCommand(), a.certCommand(), a.versionCommand())
	guardGroups(root)
	return root
}

// applyEnv sets every global flag not given on the command line from its
// environment variable, if set. Only the global flags have variables:
// connection settings belong to the environment, while a leftover
// LEGATION_PRUNE or LEGATION_SCOPE changing what a command does would be a
// trap. LEGATION_ETCD_PASSWORD is the password itself, which the refused
// --etcd-password never takes (etcdconn's LoadPassword reads it).
func (a *app) applyEnv(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == etcdconn.FlagPassword {
			return
		}
		name := envName(f.Name)
		v, ok := a.lookupEnv(name)
		if !ok {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = fmt.Errorf("environment %s=%q: %w", name, v, serr)
		}
	})
	return err
}

// envName is the environment variable of the global flag name:
// LEGATION_ETCD_ENDPOINTS for --etcd-endpoints.
func envName(name string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// exitUsage is the exit code after an error in the command line, as
// kubectl and most Unix tools give it.
const exitUsage = 2

// commandLineError is an error in the command line: Run exits exitUsage.
type commandLineError struct{ err error }

func (e *commandLineError) Error() string { return e.err.Error() }
func (e *commandLineError) Unwrap() error { return e.err }

// usageError adds a pointer to the help to an error in the command line.
func usageError(c *cobra.Command, err error) error {
	return &commandLineError{fmt.Errorf("%w\nRun '%s --help' for usage", err, c.CommandPath())}
}

// guardGroups makes each command of c's tree that only groups others
// (root, authz, rollout, ttl, cert) refuse an argument that names none
// of them, with the nearest ones suggested, where cobra would print the
// group's help and succeed; with no argument it prints the help.
func guardGroups(c *cobra.Command) {
	for _, sub := range c.Commands() {
		guardGroups(sub)
	}
	if !c.HasSubCommands() {
		return
	}
	c.SuggestionsMinimumDistance = 2 // cobra's own, which it sets only on the root
	c.Args = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
		if s := c.SuggestionsFor(args[0]); len(s) > 0 {
			msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t") + "\n"
		} else {
			var names []string
			for _, sub := range c.Commands() {
				if sub.IsAvailableCommand() {
					names = append(names, sub.Name())
				}
			}
			msg += "; its commands: " + strings.Join(names, ", ")
		}
		return usageError(c, errors.New(msg))
	}
	c.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	c.Run = nil
}

// exactArgs and rangeArgs are cobra's validators with a pointer to the help.
func exactArgs(n int) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(c, args); err != nil {
			return usageError(c, err)
		}
		return nil
	}
}

func rangeArgs(lo, hi int) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if err := cobra.RangeArgs(lo, hi)(c, args); err != nil {
			return usageError(c, err)
		}
		return nil
	}
}

func minArgs(n int) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if err := cobra.MinimumNArgs(n)(c, args); err != nil {
			return usageError(c, err)
		}
		return nil
	}
}

// completeType completes the TYPE argument of get and delete.
func completeType(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return resource.Names(), cobra.ShellCompDirectiveNoFileComp
}

// commandContext bounds ctx by --timeout; when the bound ends it, its
// cause says so, naming the flag.
func (a *app) commandContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if a.opts.Timeout <= 0 {
		return context.WithCancel(ctx)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, a.opts.Timeout, timeoutError{a.opts.Timeout})
	a.bounded = append(a.bounded, ctx)
	return ctx, cancel
}

// timeoutError is the cause of a command's context ending at --timeout.
type timeoutError struct{ d time.Duration }

func (e timeoutError) Error() string {
	return fmt.Sprintf("--timeout %s expired (raise it, or give 0 for no bound)", e.d)
}

// nameTimeout adds to err that --timeout ended the command's work, when
// it did and err does not say so already (etcd's client reports only
// "context deadline exceeded").
func (a *app) nameTimeout(err error) error {
	for _, ctx := range a.bounded {
		var te timeoutError
		if errors.As(context.Cause(ctx), &te) && !strings.Contains(err.Error(), "--timeout") {
			return fmt.Errorf("%w: %v", err, te)
		}
	}
	return err
}

// conn is an open connection to etcd.
type conn struct {
	client *clientv3.Client
	store  *store.Store
	// revision is etcd's revision when the connection was checked.
	revision int64
}

func (c *conn) Close() error { return c.client.Close() }

// connect opens a client and checks, within --dial-timeout, that etcd
// answers: clientv3.New does not wait for a connection, and a request to an
// unreachable etcd would otherwise wait for the whole command timeout.
func (a *app) connect(ctx context.Context) (*conn, error) {
	eps := strings.Join(a.opts.Endpoints, ",")
	eo := a.opts.etcdOptions()
	// Reads the certificate files: errors name the flag and the file.
	cfg, err := eo.ClientConfig()
	if err != nil {
		return nil, err
	}
	cfg.DialTimeout = a.opts.DialTimeout
	cfg.Logger = zap.NewNop()
	// Let the client send what the server accepts: etcd allows
	// --max-request-bytes plus gRPC framing (512 KiB); the client's own
	// default of 2 MiB would otherwise cap a raised server limit.
	cfg.MaxCallSendMsgSize = int(a.opts.MaxRequestBytes) + 512*1024
	// With a username, New authenticates, within --dial-timeout.
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd at %s: %w", eps, err)
	}
	pctx, cancel := context.WithTimeout(ctx, a.opts.DialTimeout)
	defer cancel()
	// One key, no value: the cheapest linearizable read, so it also checks
	// that the cluster has a leader.
	resp, err := cli.Get(pctx, a.opts.Prefix, clientv3.WithCountOnly())
	if err != nil {
		cli.Close()
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("etcd at %s: %w", eps, context.Cause(ctx))
		case pctx.Err() != nil:
			return nil, fmt.Errorf("etcd at %s is unreachable (after %s): %w (is it running? set --etcd-endpoints or %sETCD_ENDPOINTS)", eps, a.opts.DialTimeout, err, EnvPrefix)
		}
		return nil, fmt.Errorf("etcd at %s: %w", eps, err)
	}
	st, err := store.New(store.Config{
		Client:          cli,
		Prefix:          a.opts.Prefix,
		MaxTxnOps:       a.opts.MaxTxnOps,
		MaxRequestBytes: a.opts.MaxRequestBytes,
		HistoryKeep:     a.opts.HistoryKeep,
		Writer:          writer() + etcdIdentity(a.opts.Security.Username, cfg.TLS),
	})
	if err != nil {
		cli.Close()
		return nil, err
	}
	return &conn{client: cli, store: st, revision: resp.Header.Revision}, nil
}

// etcdIdentity is who etcd knows the writer as, for the envelopes and
// the history: " as etcd user NAME" with a username, else the common
// name of the client certificate, if any ("" without either).
func etcdIdentity(username string, tc *tls.Config) string {
	if username != "" {
		return " as etcd user " + username
	}
	if tc == nil || len(tc.Certificates) == 0 || len(tc.Certificates[0].Certificate) == 0 {
		return ""
	}
	cert, err := x509.ParseCertificate(tc.Certificates[0].Certificate[0])
	if err != nil || cert.Subject.CommonName == "" {
		return ""
	}
	return " as etcd user " + cert.Subject.CommonName
}

// writer says who writes, for the envelopes: "xdsadmin/user@host".
func writer() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return "xdsadmin/" + name + "@" + host
}
