// Command local runs a whole Legation cluster on one machine, on loopback
// addresses (internal/tools/localcluster): etcd members, xds-node replicas and
// HAProxy in front of them. `up` runs in the foreground and owns those
// processes as its children until Ctrl-C, SIGTERM or `down`; the other
// commands, run from another shell, drive it through its control socket.
// See docs/getting-started/local-cluster.md.
//
//	go run ./deploy/local up [-replicas 3 -etcd 3 ...]
//	go run ./deploy/local status|down|add-replica
//	go run ./deploy/local kill|stop|start|freeze|thaw NAME
//
// Exit codes: 0 done, 1 failed, 2 bad usage, 3 (status) a process is not
// running.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/legation-io/legation/internal/tools/localcluster"
)

const usage = `Usage: go run ./deploy/local COMMAND [flags] [NAME]

A local Legation cluster on 127.0.N.x: etcd members, xds-node replicas and
HAProxy in front of them.

Commands:
  up            start the cluster and own it, in the foreground, until
                Ctrl-C, SIGTERM or down (see up -h for its flags)
  down          stop everything; up then exits (logs and data stay in -dir)
  status        each process: state, pid, address, health; HAProxy's view
                of the replicas; exit 3 if one is not running
  kill NAME     SIGKILL NAME (etcd-I, replica-I or haproxy)
  stop NAME     SIGTERM NAME, SIGKILL after up's -grace; waits for its exit
  start NAME    start NAME again and wait until it is healthy
  freeze NAME   SIGSTOP NAME: it hangs, neither answering nor exiting
  thaw NAME     SIGCONT NAME
  add-replica   start one more replica and add it to HAProxy

Every command takes -dir DIR, the state directory (default %s).
`

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command in args and returns its exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	defDir := localcluster.DefaultConfig().Dir
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintf(stderr, usage, defDir)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd := args[0]
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", defDir, "state directory: logs, etcd data, haproxy.cfg, sockets, env")
	if cmd == "up" {
		return up(ctx, fs, dir, args[1:], stdout, stderr)
	}
	names, err := parse(fs, args[1:])
	if err != nil {
		return parseCode(err)
	}
	return control(ctx, cmd, *dir, names, stdout, stderr)
}

// controller runs a command on the cluster a running up owns, through
// its control socket.
type controller struct {
	cl             *localcluster.Client
	cmd, dir       string
	stdout, stderr io.Writer
}

// control runs cmd, a command other than up, with names its arguments,
// and returns its exit code.
func control(ctx context.Context, cmd, dir string, names []string, stdout, stderr io.Writer) int {
	c := &controller{cl: localcluster.NewClient(dir), cmd: cmd, dir: dir, stdout: stdout, stderr: stderr}
	switch cmd {
	case "kill", "stop", "start", "freeze", "thaw":
		return c.process(ctx, names)
	}
	if len(names) > 0 {
		fmt.Fprintf(stderr, "local: %s takes no argument, got %q\n", cmd, names)
		return 2
	}
	switch cmd {
	case "down":
		return c.down(ctx)
	case "status":
		st, err := c.cl.Status(ctx)
		if err != nil {
			return c.fail(err)
		}
		return printStatus(stdout, st)
	case "add-replica":
		r, err := c.cl.AddReplica(ctx)
		if err != nil {
			return c.fail(err)
		}
		fmt.Fprintf(stdout, "added %s: xDS on %s, HTTP on %s\n", r.Name, r.XDSAddr, r.HTTPAddr)
		return 0
	}
	fmt.Fprintf(stderr, "local: unknown command %q\n", cmd)
	fmt.Fprintf(stderr, usage, localcluster.DefaultConfig().Dir)
	return 2
}

// fail reports err and returns the exit code of a failed command.
func (c *controller) fail(err error) int {
	if errors.Is(err, localcluster.ErrNotRunning) {
		fmt.Fprintf(c.stderr, "local: no cluster runs in %s (nothing answers on %s): run up first\n", c.dir, localcluster.ControlSocket(c.dir))
	} else {
		fmt.Fprintf(c.stderr, "local: %s: %v\n", c.cmd, err)
	}
	return 1
}

// process runs a command on one process: kill, stop, start, freeze or
// thaw NAME.
func (c *controller) process(ctx context.Context, names []string) int {
	if len(names) != 1 {
		fmt.Fprintf(c.stderr, "local: %s takes one process name (etcd-I, replica-I or haproxy)\n", c.cmd)
		return 2
	}
	if err := c.cl.Do(ctx, c.cmd, names[0]); err != nil {
		return c.fail(err)
	}
	fmt.Fprintf(c.stdout, "%s: %s done\n", names[0], c.cmd)
	return 0
}

// down stops the cluster; no cluster running is not an error.
func (c *controller) down(ctx context.Context) int {
	err := c.cl.Down(ctx)
	if errors.Is(err, localcluster.ErrNotRunning) {
		fmt.Fprintf(c.stdout, "down: no cluster runs in %s: nothing to stop\n", c.dir)
		return 0
	}
	if err != nil {
		return c.fail(err)
	}
	fmt.Fprintf(c.stdout, "down: everything stopped; logs and data stay in %s\n", c.dir)
	return 0
}

// parse parses flags wherever they are among args (`kill replica-2 -dir
// D` as `kill -dir D replica-2`) and returns the other arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return rest, nil
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// parseCode is the exit code after a flag parse error: 0 for -h.
func parseCode(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// up runs the cluster in the foreground until a signal or down.
func up(ctx context.Context, fs *flag.FlagSet, dir *string, args []string, stdout, stderr io.Writer) int {
	cfg := localcluster.DefaultConfig()
	uf := addUpFlags(fs, &cfg)
	if rest, err := parse(fs, args); err != nil {
		return parseCode(err)
	} else if len(rest) > 0 {
		fmt.Fprintf(stderr, "local: up takes no argument, got %q\n", rest)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	fail := func(err error) int {
		fmt.Fprintf(stderr, "local: up: %v\n", err)
		return 1
	}
	if err := prepare(ctx, fs, &cfg, uf, *dir, logger); err != nil {
		return fail(err)
	}
	c, err := localcluster.New(cfg)
	if err != nil {
		return fail(err)
	}
	sock := localcluster.ControlSocket(cfg.Dir)
	os.Remove(sock) // left by an owner that died: nothing answers on it
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fail(err)
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Handler: localcluster.ControlHandler(c, stop)}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln) //nolint:errcheck // returns once Shutdown is called
	}()

	code := runUp(ctx, c, stdout, stderr)
	// Stopping: a second Ctrl-C or SIGTERM skips the grace periods.
	stop()
	fmt.Fprintln(stderr, "local: stopping everything (again to SIGKILL at once)")
	now, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	if err := c.Down(now); err != nil {
		fmt.Fprintf(stderr, "local: down: %v\n", err)
		code = 1
	}
	c.Close() // everything is down: Down reported
	shut, cancelShut := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelShut()
	srv.Shutdown(shut) //nolint:errcheck // a client left hanging is not ours to wait for
	<-served
	fmt.Fprintf(stdout, "down: everything stopped; logs and data stay in %s\n", cfg.Dir)
	return code
}

// upFlags are up's flags that are not fields of localcluster.Config.
type upFlags struct {
	noLB                *bool
	bin                 *string
	etcdFlags, xdsFlags *string
}

// addUpFlags adds up's flags to fs, setting cfg's fields.
func addUpFlags(fs *flag.FlagSet, cfg *localcluster.Config) upFlags {
	var uf upFlags
	fs.StringVar(&cfg.Net, "net", cfg.Net, "the 127.0.N. prefix of every address, with its trailing dot")
	fs.IntVar(&cfg.EtcdMembers, "etcd", cfg.EtcdMembers, "etcd members, 1 to 10")
	fs.IntVar(&cfg.Replicas, "replicas", cfg.Replicas, "replicas, 1 to 200")
	uf.noLB = fs.Bool("no-haproxy", false, "no HAProxy: clients dial the replicas")
	fs.BoolVar(&cfg.Secure, "secure", false, "TLS everywhere: etcd with client certificates and least-privilege roles, replicas with mTLS and a gossip key, "+
		"certificates in DIR/pki (the env file names the admin's and a client's)")
	uf.bin = fs.String("bin", "", "directory of the etcd and xds-node binaries, used as they are (missing ones are built there); empty: build both into DIR/bin now")
	fs.StringVar(&cfg.HAProxyBin, "haproxy", "", "the haproxy binary; empty: haproxy on PATH, else /usr/sbin/haproxy")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "how long to wait for a process to come up or go")
	fs.DurationVar(&cfg.Grace, "grace", cfg.Grace, "how long a stopped process may take before SIGKILL")
	uf.etcdFlags = fs.String("etcd-flags", "", "extra etcd flags, split on spaces")
	uf.xdsFlags = fs.String("xds-node-flags", "", "extra xds-node flags, split on spaces (e.g. \"--log-level debug\")")
	return uf
}

// prepare completes cfg from the parsed flags and what an earlier up
// saved in dir, checks it and that no cluster runs there yet, and builds
// the binaries when needed.
func prepare(ctx context.Context, fs *flag.FlagSet, cfg *localcluster.Config, uf upFlags, dir string, logger *slog.Logger) error {
	d, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	cfg.Dir = d
	cfg.HAProxy = !*uf.noLB
	cfg.EtcdFlags = strings.Fields(*uf.etcdFlags)
	cfg.XDSNodeFlags = strings.Fields(*uf.xdsFlags)
	cfg.Logger = logger
	if err := fromSaved(fs, cfg); err != nil {
		return err
	}
	needBuild, err := binaries(cfg, *uf.bin)
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	cl := localcluster.NewClient(cfg.Dir)
	if _, err := cl.Status(ctx); !errors.Is(err, localcluster.ErrNotRunning) {
		return fmt.Errorf("a cluster already runs in %s: run down first, or give another -dir and -net", cfg.Dir)
	}
	if needBuild {
		return build(ctx, *cfg, logger)
	}
	return nil
}

// runUp starts the cluster and, once it is up, waits for ctx to end
// (a signal or down); it returns 1 if the cluster did not come up.
func runUp(ctx context.Context, c *localcluster.Cluster, stdout, stderr io.Writer) int {
	if err := c.Up(ctx); err != nil && ctx.Err() == nil {
		fmt.Fprintf(stderr, "local: up: %v\n", err)
		return 1
	} else if err == nil {
		printUp(stdout, c.Status())
		<-ctx.Done()
	}
	return 0
}

// fromSaved takes Net, EtcdMembers, Replicas and Secure from DIR/env,
// written by an earlier up (AddReplica counts), when the flag was not
// given: etcd's data in DIR is bound to its addresses (and, secure, has
// auth enabled). Up refuses a Net, EtcdMembers or Secure given that
// differs.
func fromSaved(fs *flag.FlagSet, cfg *localcluster.Config) error {
	saved, err := localcluster.ReadEnv(filepath.Join(cfg.Dir, "env"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if v, ok := saved["NET"]; ok && !given["net"] {
		cfg.Net = v
	}
	if v, ok := saved["SECURE"]; ok && !given["secure"] {
		cfg.Secure = v == "true"
	}
	for _, s := range []struct {
		flag, key string
		n         *int
	}{{"etcd", "ETCD_MEMBERS", &cfg.EtcdMembers}, {"replicas", "REPLICAS", &cfg.Replicas}} {
		if v, ok := saved[s.key]; ok && !given[s.flag] {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("%s/env: %s=%q: not a number", cfg.Dir, s.key, v)
			}
			*s.n = n
		}
	}
	return nil
}

// binaries sets cfg's etcd and xds-node binaries: those in bin when it
// is not empty, else DIR/bin's. It reports whether to build them: always
// into DIR/bin (Go's build cache makes that quick when nothing changed),
// into bin when one is missing there.
func binaries(cfg *localcluster.Config, bin string) (build bool, err error) {
	if bin == "" {
		bin = filepath.Join(cfg.Dir, "bin")
		build = true
	}
	if bin, err = filepath.Abs(bin); err != nil {
		return false, err
	}
	cfg.EtcdBin, cfg.XDSNodeBin = filepath.Join(bin, "etcd"), filepath.Join(bin, "xds-node")
	for _, b := range []string{cfg.EtcdBin, cfg.XDSNodeBin} {
		if _, err := os.Stat(b); err != nil {
			build = true
		}
	}
	return build, nil
}

// build builds cfg's etcd and xds-node from this module.
func build(ctx context.Context, cfg localcluster.Config, logger *slog.Logger) error {
	root, err := localcluster.ModuleRoot()
	if err != nil {
		return err
	}
	dir := filepath.Dir(cfg.XDSNodeBin)
	logger.Info("building etcd and xds-node", "into", dir)
	_, err = localcluster.Build(ctx, root, dir, false)
	return err
}

func printUp(w io.Writer, st localcluster.Status) {
	if lb := st.HAProxy; lb != nil {
		fmt.Fprintf(w, "up: xDS on %s, HTTP on %s (HAProxy), etcd on %s\n", lb.XDSAddr, lb.HTTPAddr, strings.Join(st.EtcdEndpoints, ","))
	} else {
		fmt.Fprintf(w, "up: %d replicas from %s, etcd on %s\n", len(st.Replicas), st.Replicas[0].XDSAddr, strings.Join(st.EtcdEndpoints, ","))
	}
	env := filepath.Join(st.Dir, "env")
	fmt.Fprintf(w, "addresses: %s (set -a; . %s; set +a; then xdsadmin talks to this etcd)\n", env, env)
	fmt.Fprintf(w, "logs: %s/*.log; Ctrl-C or `go run ./deploy/local down` stops everything\n", st.Dir)
}

// printStatus prints a line per process and HAProxy's view of the
// replicas, and returns 3 if a process is not running.
func printStatus(w io.Writer, st localcluster.Status) int {
	code := 0
	line := func(name string, state localcluster.State, pid int, addr, health string) {
		if state == localcluster.Gone {
			code = 3
		}
		p := "-"
		if pid > 0 && state != localcluster.Gone {
			p = strconv.Itoa(pid)
		}
		if health == "" {
			health = "-"
		}
		fmt.Fprintf(w, "%-12s %-8s %-8s %-22s %s\n", name, state, p, addr, health)
	}
	fmt.Fprintf(w, "%-12s %-8s %-8s %-22s %s\n", "NAME", "STATE", "PID", "ADDRESS", "HEALTH")
	for _, m := range st.Etcd {
		line(m.Name, m.State, m.PID, m.ClientAddr, m.Health)
	}
	for _, r := range st.Replicas {
		line(r.Name, r.State, r.PID, r.XDSAddr, r.Health)
	}
	if lb := st.HAProxy; lb != nil {
		line(lb.Name, lb.State, lb.PID, lb.XDSAddr, lb.Health)
		if len(lb.OldPIDs) > 0 {
			fmt.Fprintf(w, "%-12s %-8s %v (old processes serving their open connections)\n", "", "", lb.OldPIDs)
		}
		if len(lb.Servers) > 0 {
			fmt.Fprintln(w, "\nHAProxy's view of the replicas (show stat):")
			keys := make([]string, 0, len(lb.Servers))
			for k := range lb.Servers {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				backend, server, _ := strings.Cut(k, "/")
				fmt.Fprintf(w, "  %-6s %-12s %s\n", backend, server, lb.Servers[k])
			}
		}
	}
	fmt.Fprintf(w, "\nlogs and env in %s\n", st.Dir)
	return code
}
