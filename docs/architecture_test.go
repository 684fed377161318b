package docs

import (
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is the import path prefix of Legation's own packages.
const module = "github.com/legation-io/legation/"

// outside is the rank of the wings that are not the product (tools and
// test kits): they may import any package, and no product package may
// import them.
const outside = 0

// TestPackageMap checks concepts/architecture.md's package map against the code:
// every package of the module has a row, each row's "may import" list is
// exactly the internal packages it imports, internal/ holds only the
// wings the wing table names, and no product package imports a package
// of a higher wing or of the tools and test kits.
func TestPackageMap(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("concepts", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	wings := parseWings(t, section(t, string(doc), "wings"))
	rows := parsePackageMap(t, section(t, string(doc), "packages"))
	real := packageImports(t, "..")

	checkWingDirs(t, wings)
	for _, pkg := range slices.Sorted(maps.Keys(real)) {
		row, ok := rows[pkg]
		if !ok {
			t.Errorf("package %s has no row in architecture.md's package map", pkg)
			continue
		}
		got, want := slices.Sorted(maps.Keys(real[pkg])), slices.Sorted(maps.Keys(row))
		if !slices.Equal(got, want) {
			t.Errorf("%s imports %s; architecture.md says it may import %s", pkg, list(got), list(want))
		}
		for _, imp := range got {
			if err := arrow(wings, pkg, imp); err != "" {
				t.Errorf("%s imports %s: %s", pkg, imp, err)
			}
		}
	}
	for pkg := range rows {
		if _, ok := real[pkg]; !ok {
			t.Errorf("architecture.md's package map has a row for %s, which is no package", pkg)
		}
	}
}

// section returns the text between <!-- name:begin --> and
// <!-- name:end -->.
func section(t *testing.T, doc, name string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "<!-- "+name+":begin -->")
	body, _, ok2 := strings.Cut(rest, "<!-- "+name+":end -->")
	if !ok || !ok2 {
		t.Fatalf("architecture.md: no %s section between its markers", name)
	}
	return body
}

// tableRows returns the cells of a Markdown table's body rows.
func tableRows(body string) [][]string {
	var rows [][]string
	for _, line := range strings.Split(body, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "| ---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows = append(rows, cells)
	}
	if len(rows) > 0 {
		rows = rows[1:] // the header
	}
	return rows
}

// parseWings reads the wing table: `internal/WING` and its rank.
func parseWings(t *testing.T, body string) map[string]int {
	t.Helper()
	wings := map[string]int{}
	for _, cells := range tableRows(body) {
		if len(cells) < 3 {
			t.Fatalf("architecture.md wing row %q: want wing, rank, owns", cells)
		}
		name := strings.TrimPrefix(strings.Trim(cells[0], "`"), "internal/")
		rank := outside
		if cells[1] != "outside" {
			r, err := strconv.Atoi(cells[1])
			if err != nil || r < 1 {
				t.Fatalf("architecture.md wing %s: rank %q is neither a number from 1 nor \"outside\"", name, cells[1])
			}
			rank = r
		}
		wings[name] = rank
	}
	return wings
}

// parsePackageMap reads the package table: a package's path and the
// internal packages it may import ("-" for none), each relative to
// internal/.
func parsePackageMap(t *testing.T, body string) map[string]map[string]bool {
	t.Helper()
	rows := map[string]map[string]bool{}
	for _, cells := range tableRows(body) {
		if len(cells) != 3 {
			t.Fatalf("architecture.md package row %q: want package, owns, may import", cells)
		}
		pkg := strings.Trim(cells[0], "`")
		if _, dup := rows[pkg]; dup {
			t.Errorf("architecture.md's package map has two rows for %s", pkg)
		}
		imports := map[string]bool{}
		if cells[2] != "-" {
			for _, imp := range strings.Split(cells[2], ",") {
				imports[strings.TrimSpace(imp)] = true
			}
		}
		rows[pkg] = imports
	}
	return rows
}

// packageImports returns, for each package of the module under root
// (its directory relative to root) that has non-test Go files, the
// internal packages those files import (relative to internal/). The
// separate module bench/gcp and test-only directories are not packages
// of the product.
func packageImports(t *testing.T, root string) map[string]map[string]bool {
	t.Helper()
	pkgs := map[string]map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && rel != "." || rel == filepath.Join("bench", "gcp") || rel == "hack" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Dir(rel))
		if pkgs[pkg] == nil {
			pkgs[pkg] = map[string]bool{}
		}
		for _, spec := range f.Imports {
			p, _ := strconv.Unquote(spec.Path.Value)
			if rest, ok := strings.CutPrefix(p, module+"internal/"); ok {
				pkgs[pkg][rest] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// checkWingDirs checks that internal/ holds exactly the wings of the
// wing table, at most 10.
func checkWingDirs(t *testing.T, wings map[string]int) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join("..", "internal"))
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		dirs = append(dirs, e.Name())
	}
	if want := slices.Sorted(maps.Keys(wings)); !slices.Equal(dirs, want) {
		t.Errorf("internal/ holds %s; architecture.md's wings are %s", list(dirs), list(want))
	}
	if len(dirs) > 10 {
		t.Errorf("internal/ holds %d entries; a reader finds their way in at most 10", len(dirs))
	}
}

// arrow returns why pkg may not import imp (both as in the package map),
// or "" when it may: a product package imports only from its own wing or
// lower ones, never from the tools or test kits.
func arrow(wings map[string]int, pkg, imp string) string {
	from, ok := wing(wings, pkg)
	if !ok || from == outside {
		return "" // cmd/, deploy/, examples/, tools and test kits
	}
	to, ok := wing(wings, "internal/"+imp)
	switch {
	case !ok:
		return "not in a wing of architecture.md"
	case to == outside:
		return "a product package imports a tool or test kit"
	case to > from:
		return "an upward arrow (a lower wing imports a higher one)"
	}
	return ""
}

// wing returns the rank of the wing that holds pkg (a path from the
// module's root), and false when pkg is not under internal/.
func wing(wings map[string]int, pkg string) (int, bool) {
	rest, ok := strings.CutPrefix(pkg, "internal/")
	if !ok {
		return 0, false
	}
	name, _, _ := strings.Cut(rest, "/")
	rank, ok := wings[name]
	return rank, ok
}

// list formats names for a message.
func list(names []string) string {
	if len(names) == 0 {
		return "nothing"
	}
	return strings.Join(names, ", ")
}
