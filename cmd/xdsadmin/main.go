// Command xdsadmin writes Envoy resources to Legation's etcd and reads back
// what is stored. The commands live in package adminctl; this only wires
// them to the process.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/legation-io/legation/internal/admin/adminctl"
)

func main() {
	os.Exit(run())
}

// run is main without os.Exit, so that the deferred stop runs.
func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return adminctl.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
}
