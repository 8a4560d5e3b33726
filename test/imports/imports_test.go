// Package imports holds turnlog's packages to the map of
// docs/development.md: which package may import which. The map is here as
// data (rows), in the table's order, and the tests read the import graph
// with `go list -deps -test -json ./...`.
package imports

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// root is the repository, from this package's directory.
const root = "../.."

// module is turnlog's module path; the rows name packages without it.
const module = "github.com/turnlog/turnlog"

// below, in a row's may, is every package of the rows below it but
// internal/testutil.
const below = "below"

// A row of the map. Its packages are patterns: "x/..." is x and every
// package under it, anything else one package.
type row struct {
	pkgs []string
	// may are the packages of turnlog's the row's code may import: package
	// patterns, or below. "internal/..." stands for the internal packages
	// but internal/testutil, which only tests import.
	may []string
	// noKube: nothing from k8s.io or sigs.k8s.io, not even through another
	// package, in the code or in its tests.
	noKube bool
	// never are packages of turnlog's the row's code does not depend on,
	// even through another package.
	never []string
}

// notAbove is what nothing under internal/ depends on.
var notAbove = []string{"agenthost", "turnlogtest", "controllers", "cmd/...", "test/...", "hack/..."}

// domain are the Kubernetes-free rows' lines: the packages above and
// Kubernetes.
func domain(pkg string, may ...string) row {
	return row{pkgs: []string{pkg}, may: may, noKube: true, never: notAbove}
}

// rows is the map of docs/development.md, top to bottom. A package's code
// imports what its row's may names; its tests may also import
// internal/testutil and any package of a row below, never one above.
var rows = []row{
	{pkgs: []string{"hack/..."}, may: []string{below, "internal/testutil/..."}},
	{pkgs: []string{"test/..."}, may: []string{below, "test/...", "internal/testutil/..."}},
	{pkgs: []string{"config/prometheus"}},
	{pkgs: []string{"cmd/turnlog", "cmd/kubectl-turnlog"}, may: []string{below}},
	{pkgs: []string{"cmd/internal/ui"}, may: []string{"cmd/internal/cmdkit", "agenthost", "api/...", "internal/..."}},
	{pkgs: []string{"cmd/internal/cmdkit"}, may: []string{"agenthost", "api/...", "internal/..."}},
	{pkgs: []string{"turnlogtest"}, may: []string{"controllers", "api/...", "internal/..."}},
	{pkgs: []string{"controllers"}, may: []string{"api/...", "internal/..."}},
	{pkgs: []string{"agenthost"}, may: []string{"api/...", "internal/..."}, never: []string{"internal/worker"}},
	{pkgs: []string{"internal/testutil/..."}, may: []string{"api/...", "internal/...", "internal/testutil/..."}, never: notAbove},
	{pkgs: []string{"internal/adopt"}, may: []string{"api/...", "internal/sessionio", "internal/sessionlog", "internal/store"}, never: notAbove},
	{pkgs: []string{"internal/sessionio"}, may: []string{"api/...", "internal/sessionlog", "internal/store", "internal/turnlog"}, never: notAbove},
	{pkgs: []string{"internal/kubeapply"}, never: notAbove},
	domain("internal/compare", "internal/derived", "internal/replay", "internal/assembler", "internal/turnlog"),
	domain("internal/worker", "internal/workerpool", "internal/telemetry", "internal/turnspans", "internal/derived", "internal/sessionlog",
		"internal/forkcut", "internal/replay", "internal/assembler", "internal/turnlog", "internal/store"),
	domain("internal/workerpool"),
	domain("internal/telemetry", "internal/turnspans"),
	domain("internal/turnspans", "internal/turnlog"),
	domain("internal/derived", "internal/sessionlog", "internal/forkcut", "internal/replay", "internal/assembler",
		"internal/turnlog", "internal/store"),
	domain("internal/sessionlog", "internal/turnlog", "internal/store"),
	domain("internal/forkcut", "internal/turnlog"),
	domain("internal/replay", "internal/assembler", "internal/turnlog"),
	domain("internal/assembler", "internal/turnlog"),
	domain("internal/pisession", "internal/turnlog"),
	domain("internal/turnlog"),
	domain("internal/store"),
	{pkgs: []string{"internal/outcome", "internal/fairqueue"}, never: notAbove},
	{pkgs: []string{"api/v1alpha1"}, never: notAbove},
}

// matches reports whether pkg (without the module path) is pattern.
func matches(pattern, pkg string) bool {
	if dir, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == dir || strings.HasPrefix(pkg, dir+"/")
	}
	return pkg == pattern
}

func matchesAny(patterns []string, pkg string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return matches(p, pkg) })
}

func isTestutil(pkg string) bool { return matches("internal/testutil/...", pkg) }

// rowOf is the index of pkg's row, or -1.
func rowOf(pkg string) int {
	return slices.IndexFunc(rows, func(r row) bool { return matchesAny(r.pkgs, pkg) })
}

// mayImport reports whether the code of a package of row i may import
// dep.
func mayImport(i int, dep string) bool {
	for _, m := range rows[i].may {
		if isTestutil(dep) && !matches(m, dep) {
			continue // internal/... and below leave internal/testutil out
		}
		if m == below && rowOf(dep) > i || m != below && matches(m, dep) {
			return true
		}
	}
	return false
}

// testMayImport reports whether a test of a package of row i may import
// dep: what its code may, internal/testutil, and any package below.
func testMayImport(i int, dep string) bool {
	return mayImport(i, dep) || isTestutil(dep) || rowOf(dep) > i
}

func isKube(path string) bool {
	return strings.HasPrefix(path, "k8s.io/") || strings.HasPrefix(path, "sigs.k8s.io/")
}

// pkg is what `go list -json` says of a package.
type pkg struct {
	ImportPath   string
	ForTest      string
	Module       *struct{ Main bool }
	Imports      []string
	Deps         []string
	TestImports  []string
	XTestImports []string
}

// own reports whether p is one of turnlog's packages as it is built, not
// a package rebuilt for one package's tests or a test binary.
func (p *pkg) own() bool {
	return p.Module != nil && p.Module.Main && p.ForTest == "" && !strings.Contains(p.ImportPath, " ") &&
		!strings.HasSuffix(p.ImportPath, ".test")
}

// graph is every package of `go list -deps -test ./...` by import path.
type graph map[string]*pkg

// listPackages runs go list once for all the tests.
func listPackages(t *testing.T) graph {
	t.Helper()
	g, err := goList()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

var goList = sync.OnceValues(func() (graph, error) {
	cmd := exec.Command("go", "list", "-deps", "-test", "-json", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps -test -json ./...: %w\n%s", err, stderr.String())
	}
	g := graph{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		p := new(pkg)
		if err := dec.Decode(p); errors.Is(err, io.EOF) {
			return g, nil
		} else if err != nil {
			return nil, fmt.Errorf("decode go list: %w", err)
		}
		g[p.ImportPath] = p
	}
})

// ownPackages are turnlog's packages, without the module path, sorted.
func (g graph) ownPackages() []string {
	var own []string
	for _, p := range g {
		if p.own() {
			own = append(own, short(p.ImportPath))
		}
	}
	slices.Sort(own)
	return own
}

func short(path string) string { return strings.TrimPrefix(path, module+"/") }

func isOwn(path string) bool { return strings.HasPrefix(path, module+"/") }

// via is the import, of imports, that brings in dep: dep itself, or the
// first import that depends on it; "" if none does.
func (g graph) via(imports []string, dep string) string {
	if slices.Contains(imports, dep) {
		return dep
	}
	for _, imp := range imports {
		if q, ok := g[imp]; ok && slices.Contains(q.Deps, dep) {
			return imp
		}
	}
	return ""
}

// kube is the first Kubernetes package that imports bring in, and the
// import that does; "" if none. An import of a Kubernetes-free row of
// turnlog's is not followed: it answers for itself.
func (g graph) kube(imports []string) (imp, kube string) {
	for _, imp := range imports {
		if isKube(imp) {
			return imp, imp
		}
	}
	for _, imp := range imports {
		if i := rowOf(short(imp)); isOwn(imp) && i >= 0 && rows[i].noKube {
			continue
		}
		if q, ok := g[imp]; ok {
			if k := slices.IndexFunc(q.Deps, isKube); k >= 0 {
				return imp, q.Deps[k]
			}
		}
	}
	return "", ""
}

// imports says, in words, that a package imports dep through via.
func imports(name, via, dep string) string {
	if via == dep {
		return name + " imports " + short(dep)
	}
	return name + " imports " + short(via) + ", which depends on " + short(dep)
}

// TestEveryPackageHasARow: each of turnlog's packages is in exactly one row
// of the map, so a new package goes into the table before it goes in.
func TestEveryPackageHasARow(t *testing.T) {
	g := listPackages(t)
	for _, p := range g.ownPackages() {
		var in []int
		for i, r := range rows {
			if matchesAny(r.pkgs, p) {
				in = append(in, i)
			}
		}
		switch len(in) {
		case 0:
			t.Errorf("%s has no row in the map: add it to docs/development.md and to rows", p)
		case 1:
		default:
			t.Errorf("%s is in %d rows of the map (%v), want one", p, len(in), in)
		}
	}
}

// TestTheMapRunsDownward: a row's may names only packages of its own row
// or of rows below it, so the table's order is the order of the imports.
func TestTheMapRunsDownward(t *testing.T) {
	g := listPackages(t)
	for i, r := range rows {
		for _, p := range g.ownPackages() {
			if j := rowOf(p); j >= 0 && j < i && mayImport(i, p) {
				t.Errorf("the row of %s may import %s, which is above it", strings.Join(r.pkgs, ", "), p)
			}
		}
	}
}

// TestImportsRunDownward: every import of every package of turnlog's, its
// tests' included, is one its row allows.
func TestImportsRunDownward(t *testing.T) {
	g := listPackages(t)
	for _, name := range g.ownPackages() {
		i := rowOf(name)
		if i < 0 {
			continue // TestEveryPackageHasARow says so
		}
		r := rows[i]
		p := g[module+"/"+name]
		for _, imp := range p.Imports {
			if isOwn(imp) && !mayImport(i, short(imp)) {
				t.Errorf("%s imports %s: its row of the map allows %s", name, short(imp), allowed(r))
			}
		}
		testImports := slices.Concat(p.TestImports, p.XTestImports)
		for _, imp := range testImports {
			if isOwn(imp) && imp != p.ImportPath && !testMayImport(i, short(imp)) {
				t.Errorf("a test of %s imports %s, a package above it in the map", name, short(imp))
			}
		}
		for _, dep := range p.Deps {
			if !isOwn(dep) || !matchesAny(r.never, short(dep)) {
				continue
			}
			// An import the row does not allow is named above.
			if via := g.via(p.Imports, dep); mayImport(i, short(via)) {
				t.Errorf("%s: its row of the map never depends on %s", imports(name, via, dep), short(dep))
			}
		}
		if !r.noKube {
			continue
		}
		if via, k := g.kube(p.Imports); k != "" {
			t.Errorf("%s: its row of the map allows nothing from Kubernetes", imports(name, via, k))
		}
		if via, k := g.kube(testImports); k != "" {
			t.Errorf("a test of %s: its row of the map allows nothing from Kubernetes", imports(name, via, k))
		}
	}
}

// allowed is what a row's may says, in words.
func allowed(r row) string {
	if len(r.may) == 0 {
		return "nothing of turnlog's"
	}
	return "only " + strings.Join(r.may, ", ")
}

// TestTheDocListsTheRows: the first column of the map in
// docs/development.md names the rows' packages, row by row, in order.
func TestTheDocListsTheRows(t *testing.T) {
	f, err := os.Open(filepath.Join(root, "docs", "development.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var doc [][]string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "## The map":
			in = true
		case in && strings.HasPrefix(line, "## "):
			in = false
		case in && strings.HasPrefix(line, "| `"):
			first := strings.Split(line, "|")[1]
			var pkgs []string
			for i, part := range strings.Split(first, "`") {
				if i%2 == 1 {
					pkgs = append(pkgs, part)
				}
			}
			doc = append(doc, pkgs)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	var want [][]string
	for _, r := range rows {
		want = append(want, r.pkgs)
	}
	if !slices.EqualFunc(doc, want, slices.Equal) {
		t.Errorf("docs/development.md's map lists\n %q\nthe rows are\n %q", doc, want)
	}
}
