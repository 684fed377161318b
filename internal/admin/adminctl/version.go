package adminctl

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/legation-io/legation"
	"github.com/legation-io/legation/internal/cluster/shard"
)

type versionFlags struct {
	replicas bool
}

func (a *app) versionCommand() *cobra.Command {
	var f versionFlags
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print xdsadmin's version, and with --replicas the replicas' versions",
		Long: `version prints the Legation version xdsadmin was built from (the latest
release in CHANGELOG.md), the VCS revision of its build and the Go release
that built it. It needs no etcd.

With --replicas it also reads the replicas registered in etcd and prints
the version each runs, as xds-node --version would: during a rolling
upgrade, the replicas left to upgrade are those with the old version.

Output:
  table  the line "xdsadmin VERSION (revision REV, GO)", then with
         --replicas the columns REPLICA and VERSION.
  yaml   version, revision, go_version and, with --replicas, replicas
         (name and version of each).
  json   the same as JSON.`,
		Example: `  xdsadmin version
  xdsadmin version --replicas
  xdsadmin version --replicas -o json | jq -r '.replicas[] | select(.version != "0.1.0") | .name'`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runVersion(cmd.Context(), f)
		},
	}
	cmd.Flags().BoolVar(&f.replicas, "replicas", false, "also print the version of each replica registered in etcd")
	return cmd
}

// versionInfo is version's structured output.
type versionInfo struct {
	Version   string           `json:"version"`
	Revision  string           `json:"revision,omitempty"`
	GoVersion string           `json:"go_version,omitempty"`
	Replicas  []replicaVersion `json:"replicas,omitempty"`
}

// replicaVersion is a registered replica's version; "unknown" for a
// record that carries none.
type replicaVersion struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

func (a *app) runVersion(ctx context.Context, f versionFlags) error {
	b := legation.BuildInfo()
	info := versionInfo{Version: b.Version, Revision: b.Revision, GoVersion: b.GoVersion}
	if f.replicas {
		reps, err := a.replicaVersions(ctx)
		if err != nil {
			return err
		}
		info.Replicas = reps
	}
	if a.opts.Output != outputTable {
		return a.printStructured(info)
	}
	if _, err := fmt.Fprintf(a.out, "xdsadmin %s\n", b); err != nil || !f.replicas {
		return err
	}
	if len(info.Replicas) == 0 {
		_, err := fmt.Fprintf(a.out, "no replicas are registered under %s\n", shard.RegistryKey(a.opts.Prefix, ""))
		return err
	}
	w := newTable(a.out)
	row(w, "REPLICA", "VERSION")
	for _, r := range info.Replicas {
		row(w, r.Name, r.Version)
	}
	return w.Flush()
}

// replicaVersions reads the registered replicas' versions, sorted by name.
func (a *app) replicaVersions(ctx context.Context) ([]replicaVersion, error) {
	ctx, cancel := a.commandContext(ctx)
	defer cancel()
	c, err := a.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	members, bad, err := shard.ReadRegistry(ctx, c.client, a.opts.Prefix)
	if err != nil {
		return nil, err
	}
	for _, b := range bad {
		fmt.Fprintf(a.errOut, "warning: skipped malformed member record at key %q: %v\n", b.Key, b.Err)
	}
	out := make([]replicaVersion, 0, len(members))
	for _, m := range members {
		v := m.Version
		if v == "" {
			v = "unknown"
		}
		out = append(out, replicaVersion{Name: m.Name, Version: v})
	}
	return out, nil
}
