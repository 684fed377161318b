package fsexport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/scope"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/xds/sotw"
)

// Config configures an Exporter.
type Config struct {
	// Dir is the directory the files are written to. It must exist (see
	// MakeDir).
	Dir string
	// Format is the files' format. Zero: YAML.
	Format Format
	// Group is the node's group: its resources override the default
	// scope's of the same type and name, as on a replica. Empty: the
	// default scope only.
	Group string
	// Types are the types exported, in the order written. Nil: every type,
	// in push order (clusters and endpoints before the listeners and
	// routes that name them).
	Types []*resource.Type
}

// Validate checks the config; it does not look at the directory (see
// MakeDir).
func (c *Config) Validate() error {
	if c.Dir == "" {
		return errors.New("fsexport: no directory")
	}
	if c.Format == "" {
		c.Format = YAML
	}
	if _, err := ParseFormat(string(c.Format)); err != nil {
		return err
	}
	if c.Group != "" {
		if err := resource.ValidateScope(c.Group); err != nil {
			return fmt.Errorf("group: %w", err)
		}
	}
	for _, t := range c.Types {
		if t.DeltaOnly {
			return fmt.Errorf("fsexport: %s is served over delta xDS only, which a file subscription is not", t.Name)
		}
	}
	return nil
}

// MakeDir makes dir, with its missing parents (mode 0755 before the
// umask), unless it exists, and checks that it is a directory files can
// be created in, by creating and removing an empty temporary file.
func MakeDir(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		fi, err = os.Stat(dir)
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	f, err := os.CreateTemp(dir, ".legation-check-*")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// Written is one file an Export wrote or removed.
type Written struct {
	Type *resource.Type
	// Path is the file's path.
	Path string
	// Name is the resource a per-resource file holds; empty for the
	// type's file.
	Name string
	// Version is the response's version_info.
	Version string
	// Resources is how many resources the file holds.
	Resources int
	// Removed: the file was removed, its resource being gone.
	Removed bool
}

// Exporter writes a node's files. It remembers what it wrote last, so
// that Export rewrites only the types whose content changed. Its methods
// must not be called concurrently.
type Exporter struct {
	cfg Config
	// last is, per type, the encoding of the last response written with
	// its version_info cleared: what the type's content was.
	last map[*resource.Type][]byte
	// lastRes is, per type that is not wildcard, per resource name, the
	// encoding of the resource last written to its own file.
	lastRes map[*resource.Type]map[string][]byte
}

// New returns an Exporter. It does no I/O.
func New(cfg Config) (*Exporter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Types == nil {
		cfg.Types = resource.SotW() // a file subscription is SotW: no LEDS
	}
	return &Exporter{cfg: cfg, last: map[*resource.Type][]byte{}, lastRes: map[*resource.Type]map[string][]byte{}}, nil
}

// Response is what a SotW stream of the exporter's group is answered for
// type t at snap, subscribed to everything: the file's content.
func (x *Exporter) Response(snap *view.Snapshot, t *resource.Type) *discoveryv3.DiscoveryResponse {
	return sotw.Response(snap, t, x.cfg.Group, nil, true)
}

// Export writes the file of each type whose content at snap differs from
// what this Exporter last wrote (every type, the first time), and returns
// what it wrote. A type whose content is unchanged keeps its file and
// version, as a SotW stream sends nothing for it.
//
// Every file is encoded before any is written, so a resource that cannot
// be encoded (an Any of a type no Envoy proto defines, written to etcd by
// another tool) fails the export with nothing written. Each file is
// replaced atomically (WriteFile); if writing one fails, those written
// before it stay, and the next Export rewrites everything.
func (x *Exporter) Export(snap *view.Snapshot) ([]Written, error) {
	var ops []op
	last := make(map[*resource.Type][]byte, len(x.cfg.Types))
	lastRes := make(map[*resource.Type]map[string][]byte)
	for _, t := range x.cfg.Types {
		resp := x.Response(snap, t)
		content, err := contentOf(resp)
		if err != nil {
			return nil, fmt.Errorf("fsexport: %s: %w", t.Name, err)
		}
		last[t] = content
		if old, ok := x.last[t]; ok && bytes.Equal(old, content) {
			if m, ok := x.lastRes[t]; ok {
				lastRes[t] = m
			}
			continue
		}
		b, err := Encode(resp, x.cfg.Format)
		if err != nil {
			return nil, fmt.Errorf("fsexport: encode %s%s as %s: %w", t.Name, x.culprit(snap, t, resp), x.cfg.Format, err)
		}
		if !t.Wildcard {
			// The per-resource files go first: a reader that finds the
			// type's file at a version finds theirs at it too.
			each, now, err := x.planEach(snap, t, resp)
			if err != nil {
				return nil, err
			}
			ops = append(ops, each...)
			lastRes[t] = now
		}
		path := filepath.Join(x.cfg.Dir, FileName(t, x.cfg.Format))
		ops = append(ops, op{data: b, Written: Written{Type: t, Path: path, Version: resp.GetVersionInfo(), Resources: len(resp.GetResources())}})
	}
	var out []Written
	for _, o := range ops {
		if err := o.do(); err != nil {
			// What is on disk is now partly unknown: start over.
			x.last, x.lastRes = map[*resource.Type][]byte{}, map[*resource.Type]map[string][]byte{}
			return out, err
		}
		out = append(out, o.Written)
	}
	x.last, x.lastRes = last, lastRes
	return out, nil
}

// culprit names, as ` "NAME" (scope S)`, the first resource of resp that
// does not encode alone in the export's format, or returns "".
func (x *Exporter) culprit(snap *view.Snapshot, t *resource.Type, resp *discoveryv3.DiscoveryResponse) string {
	entries := scope.Entries(snap, t, scope.Of(x.cfg.Group), nil, true)
	for i, a := range resp.GetResources() {
		one := &discoveryv3.DiscoveryResponse{TypeUrl: resp.GetTypeUrl(), Resources: []*anypb.Any{a}}
		if _, err := Encode(one, x.cfg.Format); err != nil && i < len(entries) {
			return fmt.Sprintf(" %q (scope %s)", entries[i].Name, entries[i].Scope)
		}
	}
	return ""
}

// op is one file to write (data) or remove.
type op struct {
	Written
	data []byte
}

func (o op) do() error {
	if o.Removed {
		if err := os.Remove(o.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("fsexport: %w", err)
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(o.Path), 0o755); err != nil {
		return fmt.Errorf("fsexport: %w", err)
	}
	return WriteFile(o.Path, o.data)
}

// planEach plans the per-resource files of type t, which is not
// wildcard: Envoy takes exactly one resource from an EDS, RDS, SDS, RTDS,
// VHDS or ECDS file ("Unexpected EDS resource length" otherwise), so each
// resource also gets DIR/<service>/<name>.<format>, a DiscoveryResponse
// holding it alone at resp's version. Only the resources that changed are
// rewritten; the files of those gone are removed, and, the first time,
// any file of the directory in this format that names no resource (left
// by an earlier export). It returns the operations and what each
// resource's file then holds.
func (x *Exporter) planEach(snap *view.Snapshot, t *resource.Type, resp *discoveryv3.DiscoveryResponse) ([]op, map[string][]byte, error) {
	dir := filepath.Join(x.cfg.Dir, ResourceDir(t))
	// The same entries, in the same order, as resp's resources.
	entries := scope.Entries(snap, t, scope.Of(x.cfg.Group), nil, true)
	if len(entries) != len(resp.GetResources()) {
		return nil, nil, fmt.Errorf("fsexport: %s: %d entries for %d resources", t.Name, len(entries), len(resp.GetResources()))
	}
	prev, seen := x.lastRes[t]
	now := make(map[string][]byte, len(entries))
	var ops []op
	for i, e := range entries {
		a := resp.GetResources()[i]
		content := append([]byte(a.GetTypeUrl()+"\x00"), a.GetValue()...)
		now[e.Name] = content
		if old, ok := prev[e.Name]; ok && bytes.Equal(old, content) {
			continue
		}
		one := &discoveryv3.DiscoveryResponse{VersionInfo: resp.GetVersionInfo(), TypeUrl: resp.GetTypeUrl(), Resources: []*anypb.Any{a}}
		b, err := Encode(one, x.cfg.Format)
		if err != nil {
			return nil, nil, fmt.Errorf("fsexport: encode %s %q as %s: %w", t.Name, e.Name, x.cfg.Format, err)
		}
		path := filepath.Join(dir, ResourceFileName(e.Name, x.cfg.Format))
		ops = append(ops, op{data: b, Written: Written{Type: t, Path: path, Name: e.Name, Version: one.GetVersionInfo(), Resources: 1}})
	}
	var gone []string
	if !seen {
		// Whatever an earlier run left in this format.
		des, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("fsexport: %w", err)
		}
		for _, de := range des {
			name, ok := resourceOfFile(de.Name(), x.cfg.Format)
			if _, held := now[name]; ok && !held && de.Type().IsRegular() {
				gone = append(gone, name)
			}
		}
	} else {
		for name := range prev {
			if _, held := now[name]; !held {
				gone = append(gone, name)
			}
		}
		sort.Strings(gone)
	}
	for _, name := range gone {
		path := filepath.Join(dir, ResourceFileName(name, x.cfg.Format))
		ops = append(ops, op{Written: Written{Type: t, Path: path, Name: name, Version: resp.GetVersionInfo(), Removed: true}})
	}
	return ops, now, nil
}

// contentOf is the deterministic encoding of resp without its version:
// equal for equal resources whatever the revision.
func contentOf(resp *discoveryv3.DiscoveryResponse) ([]byte, error) {
	r := &discoveryv3.DiscoveryResponse{TypeUrl: resp.GetTypeUrl(), Resources: resp.GetResources()}
	return proto.MarshalOptions{Deterministic: true}.Marshal(r)
}

// Source is the view an Exporter follows (a *view.View).
type Source interface {
	// Ready is closed once the first snapshot is published.
	Ready() <-chan struct{}
	// Snapshot returns the latest snapshot.
	Snapshot() *view.Snapshot
}

var _ Source = (*view.View)(nil)

// Follow exports src's snapshot once it is ready, then again each time
// src publishes a newer one (several published meanwhile coalesce into
// the latest), until ctx ends, when it returns nil. written, if not nil,
// is called after each Export that wrote something, with the snapshot's
// revision; it runs on Follow's goroutine. A write error ends Follow with
// that error. Following a view.View, a compaction or a lost watch is the
// view's to recover from (it reloads), and revisions never go backwards.
func (x *Exporter) Follow(ctx context.Context, src Source, written func(rev int64, w []Written)) error {
	select {
	case <-src.Ready():
	case <-ctx.Done():
		return nil
	}
	snap := src.Snapshot()
	for {
		w, err := x.Export(snap)
		if len(w) > 0 && written != nil {
			written(snap.Revision, w)
		}
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-snap.Done():
		}
		snap = src.Snapshot()
	}
}

// WriteFile replaces the file at path with b atomically: b is written to
// a temporary file in the same directory, synced, made readable by all
// (0644) and renamed over path, then the directory is synced. A reader
// sees the old content or the new, never part of it; on an error the
// temporary file is removed and path is untouched.
func WriteFile(path string, b []byte) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	// A dot file, so that Envoy watching path (a move to its name) and
	// globs over "*.yaml" ignore it.
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("fsexport: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
			err = fmt.Errorf("fsexport: write %s: %w", path, err)
		}
	}()
	if _, err = f.Write(b); err != nil {
		return err
	}
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	// The rename itself is durable once the directory is synced.
	d, derr := os.Open(dir)
	if derr != nil {
		return nil // renamed: the file is in place; durability is best effort
	}
	defer d.Close()
	d.Sync() //nolint:errcheck // best effort, as above
	return nil
}
