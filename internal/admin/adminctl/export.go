package adminctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/yaml"

	"github.com/legation-io/legation/internal/admin/fsexport"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/scope"
	"github.com/legation-io/legation/internal/state/view"
)

type exportFlags struct {
	node     string
	group    string
	groupBy  string
	cluster  string
	metadata map[string]string
	dir      string
	format   string
	watch    bool
}

func (a *app) exportCommand() *cobra.Command {
	var f exportFlags
	cmd := &cobra.Command{
		Use:   "export --node ID --dir DIR",
		Short: "Write what a node receives as files for Envoy's filesystem subscriptions",
		Long: `export writes, for one node, one DiscoveryResponse file per resource type
holding exactly what that node would receive over state-of-the-world ADS at
one etcd revision: the default scope's resources overridden by its group's,
TTLs dropped (resources as plain Any, never wrapped), version_info the
revision and type_url the type's. Envoy reads them with path_config_source.

Files, in DIR, named by the type's xDS service and the format:
  cds.yaml lds.yaml eds.yaml rds.yaml srds.yaml vhds.yaml sds.yaml rtds.yaml ecds.yaml
(.json or .pb with --format json or pb). A type the node sees nothing of
gets a file with no resources. Envoy takes exactly one resource from an
EDS, RDS, SDS, RTDS, VHDS or ECDS file, so each resource of those types
also gets a file of its own, DIR/eds/NAME.yaml, DIR/rds/NAME.yaml and so
on (NAME path-escaped: '/' is %2F); export owns those directories and
removes the files there that name no current resource.

Every file is encoded before any is written: a resource that cannot be
(an Any of an unknown type) fails the export with nothing written. Each
file is written to a temporary file in its directory, synced, and renamed
into place: a reader (Envoy watches moves) sees the old file or the new
one, never part of one.

The node's group is --group if given. Otherwise it is derived as the
replicas derive it, from the node's Node message: --group-by (the
replicas' flag, default cluster) applied to --node, --cluster and
--metadata. A node whose derived group is empty sees the default scope
only. The group used is printed to standard error.

With --watch, export keeps the files current until interrupted (Ctrl-C,
which is a success): it follows etcd from the revision exported, and at
each change rewrites only the files whose resources changed, at the new
revision (and removes those of resources gone); the others keep theirs, as a SotW stream sends nothing for a type
that did not change. After a compaction it reloads from etcd.

Each file written is printed: REVISION FILE RESOURCES (-o json: one object
per line, -o yaml: one document per file).`,
		Example: `  xdsadmin export --node envoy-1 --cluster edge --dir /etc/envoy/xds
  xdsadmin export --node envoy-1 --group edge --dir ./xds --format json
  xdsadmin export --node envoy-1 --group-by metadata:team --metadata team=payments --dir ./xds --watch`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			fl := cmd.Flags()
			return a.runExport(cmd.Context(), f, fl.Changed("group-by") || fl.Changed("cluster") || fl.Changed("metadata"))
		},
	}
	f.addFlags(cmd)
	return cmd
}

// addFlags defines export's flags on cmd, bound to f, with their
// completions.
func (f *exportFlags) addFlags(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.node, "node", "", "the node's id (required)")
	fl.StringVar(&f.group, "group", "", "the node's group (scope), as is; not with --group-by, --cluster or --metadata; default: derived with --group-by")
	fl.StringVar(&f.groupBy, "group-by", "cluster", "how the replicas derive a node's group: cluster, id or metadata:KEY (their --group-by)")
	fl.StringVar(&f.cluster, "cluster", "", "the node's cluster (Node.cluster), for --group-by cluster")
	fl.StringToStringVar(&f.metadata, "metadata", nil, "the node's metadata as KEY=VALUE strings, for --group-by metadata:KEY")
	fl.StringVar(&f.dir, "dir", "", "directory to write the files to, made if missing (required)")
	fl.StringVar(&f.format, "format", string(fsexport.YAML), "file format: yaml, json (proto3 JSON, proto field names) or pb (binary proto); Envoy picks the decoder by the file's extension")
	fl.BoolVar(&f.watch, "watch", false, "keep the files current as etcd changes, until interrupted (Ctrl-C, a success)")
	_ = cmd.RegisterFlagCompletionFunc("format", cobra.FixedCompletions([]string{"yaml", "json", "pb"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("group-by", cobra.FixedCompletions([]string{"cluster", "id", "metadata:"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.MarkFlagDirname("dir")
}

// exportGroup is the node's group: --group, or what the replicas derive
// from the Node message the flags describe.
func exportGroup(f exportFlags, deriving bool) (string, error) {
	if f.group != "" {
		if deriving {
			return "", errors.New("--group names the node's group; --group-by, --cluster and --metadata derive it: give one or the other")
		}
		if err := resource.ValidateScope(f.group); err != nil {
			return "", fmt.Errorf("--group: %w", err)
		}
		return f.group, nil
	}
	by, err := scope.ParseGroupBy(f.groupBy)
	if err != nil {
		return "", err // names --group-by
	}
	n := &corev3.Node{Id: f.node, Cluster: f.cluster}
	if len(f.metadata) > 0 {
		m := make(map[string]any, len(f.metadata))
		for k, v := range f.metadata {
			m[k] = v
		}
		if n.Metadata, err = structpb.NewStruct(m); err != nil {
			return "", fmt.Errorf("--metadata: %w", err)
		}
	}
	return by(n), nil
}

func (a *app) runExport(ctx context.Context, f exportFlags, deriving bool) error {
	x, err := a.newExporter(f, deriving)
	if err != nil {
		return err
	}
	// A one-off export is bounded by --timeout; --watch only its
	// connection, as watch.
	var runCtx context.Context
	var cancel context.CancelFunc
	if f.watch {
		runCtx, cancel = context.WithCancel(ctx)
	} else {
		runCtx, cancel = a.commandContext(ctx)
	}
	defer cancel()
	cctx, ccancel := a.commandContext(ctx)
	c, err := a.connect(cctx)
	ccancel()
	if err != nil {
		if f.watch && ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer c.Close()
	return a.exportView(runCtx, c, x, f.watch)
}

// newExporter checks export's flags, makes --dir and returns the
// exporter of the node's group, which it prints on errOut.
func (a *app) newExporter(f exportFlags, deriving bool) (*fsexport.Exporter, error) {
	if strings.TrimSpace(f.node) == "" {
		return nil, errors.New("--node: the node's id is required")
	}
	if f.dir == "" {
		return nil, errors.New("--dir: the directory to write to is required")
	}
	format, err := fsexport.ParseFormat(f.format)
	if err != nil {
		return nil, fmt.Errorf("--format: %w", err)
	}
	group, err := exportGroup(f, deriving)
	if err != nil {
		return nil, err
	}
	if err := fsexport.MakeDir(f.dir); err != nil {
		return nil, fmt.Errorf("--dir: %w", err)
	}
	x, err := fsexport.New(fsexport.Config{Dir: f.dir, Format: format, Group: group})
	if err != nil {
		return nil, err
	}
	if group == "" {
		fmt.Fprintf(a.errOut, "node %q: no group, default scope only\n", f.node)
	} else {
		fmt.Fprintf(a.errOut, "node %q: group %q\n", f.node, group)
	}
	return x, nil
}

// exportView runs x over the replicas' own view of c's etcd, one load at
// one revision, then with watch one watch from the next, reloading after
// a compaction, until ctx ends. It prints each file written.
func (a *app) exportView(ctx context.Context, c *conn, x *fsexport.Exporter, watch bool) error {
	v, err := view.New(view.Config{
		Client:        c.client,
		Prefix:        a.opts.Prefix,
		HistoryWindow: -1,
		Logger:        slog.New(slog.NewTextHandler(a.errOut, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	viewCtx, stopView := context.WithCancel(ctx)
	viewDone := make(chan struct{})
	go func() { defer close(viewDone); v.Run(viewCtx) }() //nolint:errcheck // nil when viewCtx ends
	defer func() { stopView(); <-viewDone }()

	var printErr error
	report := func(rev int64, ws []fsexport.Written) {
		if printErr == nil {
			printErr = a.printExported(rev, ws)
		}
	}
	if watch {
		err := x.Follow(ctx, v, report)
		if err == nil {
			err = printErr
		}
		return err
	}
	select {
	case <-v.Ready():
	case <-ctx.Done():
		return fmt.Errorf("export: loading the resources: %w", context.Cause(ctx))
	}
	snap := v.Snapshot()
	ws, err := x.Export(snap)
	report(snap.Revision, ws)
	if err != nil {
		return err
	}
	return printErr
}

// exportLine is one file in json/yaml export output.
type exportLine struct {
	Revision  int64  `json:"revision"`
	Type      string `json:"type"`
	File      string `json:"file"`
	Name      string `json:"name,omitempty"`
	Version   string `json:"version"`
	Resources int    `json:"resources"`
	Removed   bool   `json:"removed,omitempty"`
}

func (a *app) printExported(rev int64, ws []fsexport.Written) error {
	lines := make([]exportLine, len(ws))
	for i, w := range ws {
		lines[i] = exportLine{Revision: rev, Type: w.Type.Name, File: w.Path, Name: w.Name, Version: w.Version, Resources: w.Resources, Removed: w.Removed}
	}
	switch a.opts.Output {
	case outputJSON:
		for _, l := range lines {
			b, err := json.Marshal(l)
			if err != nil {
				return err
			}
			if _, err := a.out.Write(append(b, '\n')); err != nil {
				return err
			}
		}
		return nil
	case outputYAML:
		for _, l := range lines {
			b, err := yaml.Marshal(l)
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(a.out, "---\n%s", b); err != nil {
				return err
			}
		}
		return nil
	}
	w := newTable(a.out)
	for _, l := range lines {
		if l.Removed {
			row(w, l.Revision, l.File, "removed")
			continue
		}
		row(w, l.Revision, l.File, l.Resources)
	}
	return w.Flush()
}
