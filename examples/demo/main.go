// Command legation-demo is the traffic demo of `make demo`
// (docs/getting-started/demo.md). Its code lives in internal/tools/demo; this only wires flags to it.
//
//	legation-demo run       xds-node in dev mode, two echo backends, examples/ applied, the client
//	legation-demo backend   one echo backend
//	legation-demo client    the proxyless gRPC client alone, printing the split
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/legation-io/legation/internal/tools/demo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "legation-demo:", err)
		os.Exit(1)
	}
}

const usage = `Usage: legation-demo run|backend|client [flags]

  run      start xds-node (dev mode), two echo backends, apply examples/ and run the client
  backend  run one echo backend
  client   run the proxyless gRPC client, printing the split between backends

legation-demo COMMAND -h lists the command's flags.
`

// run runs the command in args.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command")
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("legation-demo "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	switch cmd {
	case "run":
		return runStack(ctx, fs, args, stdout)
	case "backend":
		return runBackend(ctx, fs, args, stdout)
	case "client":
		return runClient(ctx, fs, args, stdout)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
}

// addClientFlags adds the client's flags, run's and client's, to fs.
func addClientFlags(fs *flag.FlagSet, client *demo.ClientConfig, stack *demo.StackConfig) {
	fs.StringVar(&client.Target, "target", client.Target, "xDS target called")
	fs.StringVar(&client.XDSServer, "xds-server", client.XDSServer, "Legation's xDS address")
	fs.StringVar(&client.NodeID, "node-id", client.NodeID, "the client's xDS node id")
	fs.StringVar(&client.NodeCluster, "node-cluster", client.NodeCluster, "the client's xDS node cluster: its scope in Legation")
	fs.DurationVar(&stack.Interval, "interval", stack.Interval, "time between two calls")
	fs.DurationVar(&stack.Window, "window", stack.Window, "span of each split printed")
}

// runStack is run: the whole demo, until ctx ends.
func runStack(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	client := demo.DefaultClientConfig()
	stack := demo.DefaultStackConfig()
	stack.Out = stdout
	addClientFlags(fs, &client, &stack)
	fs.StringVar(&stack.XDSNode, "xds-node", stack.XDSNode, "xds-node binary")
	fs.StringVar(&stack.XDSAdmin, "xdsadmin", stack.XDSAdmin, "xdsadmin binary")
	fs.StringVar(&stack.Examples, "examples", stack.Examples, "file or directory applied with xdsadmin apply -f")
	fs.StringVar(&stack.DataDir, "data-dir", "", "dev mode's etcd data directory (default: a temporary one, removed at the end)")
	if err := parse(fs, args); err != nil {
		return err
	}
	stack.Client = client
	return demo.RunStack(ctx, stack)
}

// runBackend is backend: one echo backend, until ctx ends.
func runBackend(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	name := fs.String("name", "backend-a", "the name the backend answers with")
	addr := fs.String("addr", "127.0.0.1:50051", "address to listen on")
	if err := parse(fs, args); err != nil {
		return err
	}
	b, err := demo.StartBackend(*name, *addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "legation-demo: echo backend %s on %s\n", b.Name, b.Addr())
	<-ctx.Done()
	b.Stop()
	return nil
}

// runClient is client: the proxyless client printing the split, until
// ctx ends.
func runClient(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	client := demo.DefaultClientConfig()
	stack := demo.DefaultStackConfig()
	addClientFlags(fs, &client, &stack)
	if err := parse(fs, args); err != nil {
		return err
	}
	cc, err := demo.Dial(client)
	if err != nil {
		return err
	}
	defer cc.Close()
	err = demo.Run(ctx, cc, stack.Interval, stack.Window, func(s demo.Split) {
		fmt.Fprintf(stdout, "%s  %s\n", s.End.Format(time.TimeOnly), s)
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// parse parses args into fs and refuses positional arguments.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	return nil
}
