package adminctl

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/legation-io/legation/internal/state/resource"
)

// docExts are the file name endings read from a directory.
var docExts = []string{".yaml", ".yml", ".json"}

// readDocs reads, decodes and validates every resource named by paths: a
// file, a directory (its *.yaml, *.yml and *.json files, sorted, not
// recursive) or "-" for in. It checks names are unique across all of them.
// It does no other I/O: an error means nothing may be written.
func readDocs(paths []string, in io.Reader) ([]resource.Doc, error) {
	if len(paths) == 0 {
		return nil, errors.New("no input: give -f FILE, -f DIR or -f - (standard input)")
	}
	var docs []resource.Doc
	stdinRead := false
	for _, p := range paths {
		var files []string
		switch {
		case p == "-":
			if stdinRead {
				return nil, errors.New("-f -: standard input can be read only once")
			}
			stdinRead = true
			data, err := io.ReadAll(in)
			if err != nil {
				return nil, fmt.Errorf("read standard input: %w", err)
			}
			got, err := resource.Decode("-", data)
			if err != nil {
				return nil, err
			}
			docs = append(docs, got...)
			continue
		default:
			fi, err := os.Stat(p)
			if err != nil {
				var pe *fs.PathError
				if errors.As(err, &pe) {
					err = pe.Err // the path is named once, after -f
				}
				return nil, fmt.Errorf("-f %s: %w", p, err)
			}
			if !fi.IsDir() {
				files = []string{p}
				break
			}
			if files, err = dirFiles(p); err != nil {
				return nil, err
			}
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			got, err := resource.Decode(f, data)
			if err != nil {
				return nil, err
			}
			docs = append(docs, got...)
		}
	}
	if err := resource.CheckUnique(docs); err != nil {
		return nil, err
	}
	return docs, nil
}

// dirFiles lists the resource files of a directory, sorted by name.
func dirFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		ext := strings.ToLower(filepath.Ext(e.Name()))
		for _, want := range docExts {
			if ext == want {
				files = append(files, filepath.Join(dir, e.Name()))
				break
			}
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no *.yaml, *.yml or *.json files in the directory", dir)
	}
	sort.Strings(files)
	return files, nil
}

// refuseInlineKeys returns a *resource.DocError for the first resource of
// docs, other than an SDS secret, that carries an inline private key
// (resource.InlineKeys), naming every such field. A replica serves a
// secret only to clients allowed the scope's secrets; a key inside a
// listener or a cluster would travel with it, so it belongs in a secret
// (referenced over SDS) or in a file on the client's machine.
func refuseInlineKeys(docs []resource.Doc) error {
	for i := range docs {
		d := &docs[i]
		if d.Type == resource.Secret {
			continue
		}
		paths := resource.InlineKeys(d.Message)
		if len(paths) == 0 {
			continue
		}
		return &resource.DocError{Source: d.Source, Index: d.Index, Item: d.Item, Resource: d.Type.Name + " " + strconv.Quote(d.Name),
			Err: fmt.Errorf("%s: an inline private key outside a secret resource: put it in a secret and reference it over SDS (sds_config), or name a file on the client (filename); --allow-inline-keys writes it anyway", strings.Join(paths, ", "))}
	}
	return nil
}
