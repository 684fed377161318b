package adminctl

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/legation-io/legation/internal/resource"
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
				return nil, err
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
