// Package rules holds the house rules that docs state and code must keep, as
// tests: which package may import which (imports_test.go) and that the docs
// name only files and Go symbols that exist (docs_test.go). It has no
// non-test code; `make test` runs it with every other package.
package rules

import (
	"bytes"
	"encoding/json"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// module is the module path; the table below names packages relative to it
// ("" is the root package, hiercomm).
const module = "github.com/hiercomm/hiercomm"

// anyLibrary in a rule's imports lets a package import every library package
// of the module (never a test-only one): the commands, which sit on top.
const anyLibrary = "*"

// A rule says what one package of the module may import of the module.
type rule struct {
	pkg     string   // relative to module; "" is the root package
	imports []string // what its non-test files may import
	tests   []string // what its _test.go files may import besides (its own package is always allowed)
	why     string   // the rule in words, as docs/architecture.md ("Import rules") states it
}

// testOnly are packages that only tests may import.
var testOnly = []string{"comm/commtest", "internal/nexarjob"}

// importRules is the one place the module's import rules live:
// docs/architecture.md ("Import rules") says the same in prose and cites
// this table, and TestImportRules holds the code to it. Every package of the
// module has exactly one row (a new package fails the test until it gets
// one). A change that needs another edge changes its row, its why, and the
// architecture page in the same commit.
//
// Where the code imports something a package's own doc comment says it does
// not, fix the one that is wrong.
var importRules = []rule{
	// The contract and the pure layers: nothing of ours.
	{pkg: "comm", tests: []string{"nexar", "comm/tier"},
		why: "comm imports nothing of ours: every tier and the hierarchy import it (its examples and Wrap tests run on nexar's in-memory world, and its fused AllReduce's test double reduces with comm/tier's kernels)"},
	{pkg: "comm/tier", imports: []string{"comm"},
		why: "comm/tier, the implementer's toolkit, imports comm only (comm cannot import it): the tiers, the hierarchy and the root package import it, a training program never needs to"},
	{pkg: "comm/schedule", imports: []string{"comm"},
		why: "comm/schedule imports nothing of ours but comm (today not even that) and never a transport: schedules and the cost model are pure"},
	{pkg: "comm/commtest", imports: []string{"comm"}, tests: []string{"comm/tier"},
		why: "comm/commtest imports comm and the standard library only, so every implementation's tests can use it; only tests import it (its own tests' reference communicator is built from comm/tier)"},
	{pkg: "topology",
		why: "topology imports nothing of ours (pure functions, no I/O; it cannot import comm)"},

	// Shared internals: the standard library only.
	{pkg: "internal/procgroup",
		why: "internal/procgroup imports the standard library only; cluster and internal/nexarjob use it for their local launchers"},
	{pkg: "internal/netemu",
		why: "internal/netemu imports the standard library only; the commands use it, cluster does not (cluster.Fabric)"},
	{pkg: "internal/hoptrace",
		why: "internal/hoptrace imports the standard library only; the tiers (nexar, shm, hierarchy) mark their hops with it"},
	// The flat local launcher of nexar's and shm's multi-process tests.
	{pkg: "internal/nexarjob", imports: []string{"nexar", "nexar/transport/netmesh", "internal/procgroup"},
		why: "internal/nexarjob imports nexar (and nexar/transport/netmesh, whose sockets it binds for its children) and internal/procgroup: it starts a flat nexar world of processes for tests, and only tests import it"},

	// The tiers: comm (and its schedules), never each other.
	// nexar also imports comm/schedule (its schedules and cost model) and
	// internal/hoptrace, as nexar/doc.go says; its multi-process tests
	// start their worlds with internal/nexarjob.
	// nexar also imports its transports (nexar/transport, the contract,
	// and its implementations) and nexar/internal/timerpool, as
	// nexar/doc.go says.
	{pkg: "nexar", imports: []string{"comm", "comm/tier", "comm/schedule", "internal/hoptrace",
		"nexar/transport", "nexar/transport/netmesh", "nexar/transport/mem", "nexar/internal/timerpool"},
		tests: []string{"comm/commtest", "internal/procgroup", "internal/nexarjob", "nexar/internal/baseline"},
		why:   "nexar, shm and nccl import comm and comm/tier (and comm/schedule, internal/hoptrace) and never each other; nexar also imports its own transports and nexar/internal/timerpool; nexar's multi-process tests use internal/nexarjob, its benchmarks nexar/internal/baseline"},
	// nexar's transports: the contract imports comm only; the
	// implementations import it and never the runtime, so that the runtime
	// reaches them only through the contract.
	{pkg: "nexar/transport", imports: []string{"comm"},
		why: "nexar/transport, the contract between nexar's runtime and its transports, imports comm only"},
	{pkg: "nexar/transport/netmesh", imports: []string{"comm", "comm/tier", "internal/hoptrace", "nexar/transport", "nexar/internal/timerpool"},
		tests: []string{"nexar/internal/baseline"},
		why:   "nexar/transport/netmesh, the network transports, imports comm, comm/tier, internal/hoptrace, nexar/transport and nexar/internal/timerpool; never nexar, its runtime (its benchmarks use nexar/internal/baseline)"},
	{pkg: "nexar/transport/mem", imports: []string{"comm", "nexar/transport"},
		why: "nexar/transport/mem, the in-process transport, imports comm and nexar/transport only; never nexar, its runtime"},
	{pkg: "nexar/internal/timerpool",
		why: "nexar/internal/timerpool imports the standard library only; nexar's runtime and nexar/transport/netmesh share its timers"},
	{pkg: "nexar/internal/baseline",
		why: "nexar/internal/baseline, what nexar's and its transports' benchmarks measure against, imports nothing of ours (quic-go and the standard library); only their tests import it"},
	// shm also imports comm/schedule (Config.Cost) and internal/hoptrace,
	// as shm/doc.go says. Its tests build hierarchies over nexar to run shm
	// as a node's part.
	{pkg: "shm", imports: []string{"comm", "comm/tier", "comm/schedule", "internal/hoptrace"},
		tests: []string{"comm/commtest", "internal/procgroup", "internal/nexarjob", "nexar", "hierarchy", "topology"},
		why:   "nexar, shm and nccl import comm and comm/tier (and comm/schedule, internal/hoptrace) and never each other"},
	// nccl calls the CUDA driver and NCCL through the function table of
	// nccl/internal/cuapi; its tests put nccl/ncclfake's double behind it.
	{pkg: "nccl", imports: []string{"comm", "comm/tier", "nccl/internal/cuapi"},
		tests: []string{"comm/commtest", "internal/procgroup", "nexar", "nexar/transport/netmesh", "shm", "nccl/ncclfake"},
		why:   "nccl imports comm, comm/tier and its seam nccl/internal/cuapi only (and purego); its tests use nccl/ncclfake, nexar's worlds (in memory, or over netmesh's local sockets) and shm as the host communicator"},
	{pkg: "nccl/internal/cuapi",
		why: "nccl/internal/cuapi, the function table and ABI between nccl and the libraries, imports nothing of ours"},
	{pkg: "nccl/ncclfake", imports: []string{"comm", "comm/tier", "nccl", "nccl/internal/cuapi"},
		why: "nccl/ncclfake, the in-process CUDA driver and NCCL, imports comm, comm/tier (its reductions), nccl and nccl/internal/cuapi, whose table it fills; tests and the examples' -fake-gpu import it, the library packages never"},

	// The launch environment: a parser, the standard library only.
	{pkg: "cluster/launchenv",
		why: "cluster/launchenv imports nothing of ours: it turns an environment into a launch description and does no I/O, so what reads the system (sockets, interfaces, the host name, files) stays with its callers"},

	// Membership: topology, never a tier.
	// cluster also imports cluster/launchenv (the launch it binds for and
	// starts its launcher's children with) and internal/procgroup (its
	// local launcher), as cluster/doc.go says.
	{pkg: "cluster", imports: []string{"cluster/launchenv", "topology", "internal/procgroup"},
		why: "cluster imports cluster/launchenv and topology (and internal/procgroup for its launcher), never nexar, shm, nccl, hierarchy or internal/netemu: the root package wires membership to the communicators"},

	// The composition: takes communicators as values.
	// hierarchy also imports comm/schedule (Config.Cost, a
	// schedule.Hierarchy) and internal/hoptrace, as hierarchy/doc.go says.
	{pkg: "hierarchy", imports: []string{"comm", "comm/tier", "comm/schedule", "topology", "internal/hoptrace"},
		tests: []string{"comm/commtest", "internal/procgroup", "nexar", "nexar/transport/netmesh", "shm", "nccl", "nccl/ncclfake"},
		why:   "hierarchy imports comm, comm/tier, comm/schedule and topology (and internal/hoptrace); it takes its parts as values and never constructs a transport"},

	// Measurement over any Communicator.
	{pkg: "bench", imports: []string{"comm", "comm/schedule"},
		tests: []string{"nexar"},
		why:   "bench imports comm and comm/schedule only: it measures whatever Communicator it is given (its tests use nexar's in-memory world)"},

	{pkg: "bench/peers", imports: nil,
		why: "bench/peers, the command that tabulates OpenMPI beside hiercomm-bench, reads their CSV files: it imports nothing of ours"},

	// Data parallelism over any Communicator, and the data its examples
	// train on.
	{pkg: "dp", imports: []string{"comm"},
		tests: []string{"nexar"},
		why:   "dp imports comm and the standard library only: it runs over whatever Communicator it is given (its tests use nexar's in-memory world)"},
	{pkg: "dp/mnist",
		why: "dp/mnist imports nothing of ours (the GoMNIST module's data files)"},

	// On top: the root package, the only place that wires the parts, and the
	// commands.
	{pkg: "", imports: []string{"cluster", "cluster/launchenv", "comm", "comm/tier", "comm/schedule", "topology", "nexar", "nexar/transport/netmesh", "shm", "nccl", "hierarchy"},
		tests: []string{"comm/commtest", "internal/procgroup", "internal/netemu", "nccl/ncclfake"},
		why:   "the root package composes: it imports cluster (and cluster/launchenv), topology, comm, comm/tier and the tiers, and none of them imports it"},
	{pkg: "cmd/hiercomm", imports: []string{anyLibrary},
		why: "the commands sit on top and may import any library package (never a test-only one)"},
	{pkg: "cmd/hiercomm-bench", imports: []string{anyLibrary},
		why: "the commands sit on top and may import any library package (never a test-only one)"},

	// The examples: what a trainer writes, hiercomm, comm and dp, and what they
	// share. examples/internal/launch imports cluster and
	// internal/procgroup, as its doc says.
	{pkg: "examples/internal/mlp",
		why: "mlp imports nothing of ours: the trainers decide where parameters live"},
	{pkg: "examples/internal/launch", imports: []string{"cluster", "internal/procgroup"},
		why: "launch runs the example trainers as a local job of emulated nodes: cluster (and internal/procgroup)"},
	{pkg: "examples/internal/trainer", imports: []string{"", "comm", "dp", "dp/mnist", "examples/internal/mlp", "nccl", "nccl/ncclfake", "cluster/launchenv"},
		why: "trainer imports hiercomm, comm, dp, dp/mnist and mlp, and for -device nccl (nccl/ncclfake for -fake-gpu) and cluster/launchenv (HIERCOMM_INTRA's name); never a transport"},
	{pkg: "examples/allreduce", imports: []string{"", "comm"},
		why: "an example uses what a trainer uses: hiercomm and comm"},
	{pkg: "examples/dataparallel", imports: []string{"", "comm", "dp", "examples/internal/mlp", "examples/internal/trainer"},
		tests: []string{"examples/internal/launch", "nccl"},
		why:   "an example uses what a trainer uses: hiercomm, comm and dp, and the examples' shared model and trainer"},
	{pkg: "examples/zero", imports: []string{"comm", "dp", "examples/internal/mlp", "examples/internal/trainer"},
		tests: []string{"examples/internal/launch"},
		why:   "an example uses what a trainer uses: hiercomm, comm and dp, and the examples' shared model and trainer"},
	{pkg: "examples/moe", imports: []string{"", "comm", "examples/internal/mlp"},
		tests: []string{"cluster"},
		why:   "an example uses what a trainer uses: hiercomm and comm, and the examples' shared model"},
	{pkg: "examples/gpu", imports: []string{"", "comm", "nccl", "nccl/ncclfake"},
		tests: []string{"cluster", "cluster/launchenv"},
		why:   "an example uses what a trainer uses: hiercomm and comm, and on a GPU nccl's device memory (nccl/ncclfake's for -fake-gpu)"},

	// This package: tests only.
	{pkg: "internal/rules",
		why: "the rules' tests import nothing of ours"},
}

// listed is what go list says of one package.
type listed struct {
	ImportPath     string
	Dir            string
	Imports        []string
	TestImports    []string
	XTestImports   []string
	IgnoredGoFiles []string
	Error          *struct{ Err string }
}

// moduleRoot is the directory of the module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == "/dev/null" {
		t.Fatalf("go env GOMOD: not in a module (%q)", gomod)
	}
	return filepath.Dir(gomod)
}

// listModule runs go list over every package of the module.
func listModule(t *testing.T, root string) []listed {
	t.Helper()
	// -e: a package that does not build (someone's work in progress) is
	// still listed with the imports its files parse to; its build fails
	// elsewhere.
	cmd := exec.Command("go", "list", "-e", "-json", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -e -json ./...: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("go list -e -json ./...: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatal("go list -e -json ./... listed no packages")
	}
	return pkgs
}

// rel names a module path relative to the module ("" for the root), and
// says whether it is one.
func rel(path string) (string, bool) {
	if path == module {
		return "", true
	}
	if r, ok := strings.CutPrefix(path, module+"/"); ok {
		return r, true
	}
	return "", false
}

// show names a relative package for messages.
func show(pkg string) string {
	if pkg == "" {
		return "hiercomm (the root package)"
	}
	return pkg
}

// edge is one import of the module by one package's files.
type edge struct {
	from, to string // relative
	test     bool   // imported by _test.go files only
	file     string // a file that imports it, when known (files build constraints leave out)
}

// edges returns every module-internal import of p: go list's, and those of
// the files that build constraints leave out on this system (another GOOS,
// the race detector off), parsed here so that they are held to the rules too.
func edges(t *testing.T, p listed) []edge {
	t.Helper()
	from, _ := rel(p.ImportPath)
	var es []edge
	add := func(imps []string, test bool, file string) {
		for _, imp := range imps {
			if to, ok := rel(imp); ok && to != from {
				es = append(es, edge{from: from, to: to, test: test, file: file})
			}
		}
	}
	add(p.Imports, false, "")
	add(p.TestImports, true, "")
	add(p.XTestImports, true, "")
	fset := token.NewFileSet()
	for _, name := range p.IgnoredGoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.ImportsOnly)
		if err != nil {
			t.Errorf("%s: %v", filepath.Join(p.Dir, name), err)
			continue
		}
		var imps []string
		for _, is := range f.Imports {
			if path, err := strconv.Unquote(is.Path.Value); err == nil {
				imps = append(imps, path)
			}
		}
		add(imps, strings.HasSuffix(name, "_test.go"), name)
	}
	return es
}

// TestImportRules checks every import of a module package by a module package
// against importRules.
func TestImportRules(t *testing.T) {
	root := moduleRoot(t)
	pkgs := listModule(t, root)

	rules := map[string]rule{}
	for _, r := range importRules {
		if _, dup := rules[r.pkg]; dup {
			t.Errorf("importRules has two rows for %s", show(r.pkg))
		}
		rules[r.pkg] = r
	}
	libraries := map[string]bool{} // what anyLibrary allows
	seen := map[string]bool{}
	for _, p := range pkgs {
		pkg, ok := rel(p.ImportPath)
		if !ok {
			t.Fatalf("go list in %s listed %s, which is not in module %s", root, p.ImportPath, module)
		}
		seen[pkg] = true
		if p.Error != nil {
			t.Logf("%s: %s (its imports are checked as far as its files parse)", show(pkg), p.Error.Err)
		}
		if !strings.HasPrefix(pkg, "cmd/") && !strings.HasPrefix(pkg, "examples/") &&
			pkg != "internal/rules" && !slices.Contains(testOnly, pkg) {
			libraries[pkg] = true
		}
	}
	for _, r := range importRules {
		if !seen[r.pkg] {
			t.Errorf("importRules has a row for %s, which is no package of the module: remove it (and its sentence in docs/architecture.md)", show(r.pkg))
		}
	}

	for _, p := range pkgs {
		pkg, _ := rel(p.ImportPath)
		r, ok := rules[pkg]
		if !ok {
			t.Errorf("%s is not in the import rule table: give it a row in internal/rules/imports_test.go (importRules) and a sentence in docs/architecture.md (Import rules)", show(pkg))
			continue
		}
		for _, e := range edges(t, p) {
			where, verb := show(e.from), "imports"
			if e.test {
				where, verb = where+"'s tests", "import"
			}
			if e.file != "" {
				where += " (" + e.file + ")"
			}
			if !e.test && slices.Contains(testOnly, e.to) {
				t.Errorf("%s %s %s, which only tests may import (rule: nothing in production imports a test-only package; internal/rules/imports_test.go)",
					where, verb, show(e.to))
				continue
			}
			if allowed(r, e, libraries) {
				continue
			}
			t.Errorf("%s %s %s, which its rule does not allow\n\trule for %s: %s\n\t(the rule table: internal/rules/imports_test.go, importRules; docs/architecture.md, Import rules)",
				where, verb, show(e.to), show(pkg), r.why)
		}
	}
}

// allowed says whether r lets e's package import e.to.
func allowed(r rule, e edge, libraries map[string]bool) bool {
	may := r.imports
	if e.test {
		may = append(slices.Clip(may), r.tests...)
	}
	if slices.Contains(may, anyLibrary) && libraries[e.to] {
		return true
	}
	return slices.Contains(may, e.to)
}

// TestImportRuleTableIsTidy keeps the table readable: every package it names
// exists in it, and no row lists an import twice.
func TestImportRuleTableIsTidy(t *testing.T) {
	known := map[string]bool{anyLibrary: true}
	for _, r := range importRules {
		known[r.pkg] = true
	}
	for _, r := range importRules {
		all := append(slices.Clip(r.imports), r.tests...)
		for _, to := range all {
			if !known[to] {
				t.Errorf("importRules: the row for %s names %q, which has no row of its own", show(r.pkg), to)
			}
		}
		sorted := slices.Clone(all)
		sort.Strings(sorted)
		if len(slices.Compact(sorted)) != len(all) {
			t.Errorf("importRules: the row for %s lists an import twice: %v", show(r.pkg), all)
		}
		if r.why == "" {
			t.Errorf("importRules: the row for %s says no why", show(r.pkg))
		}
	}
}

// TestImportRulesAreDocumented keeps docs/architecture.md's "Import rules"
// in step with the table: it cites the table's file and names every package
// that has a row (the root as "root package", the commands as cmd/...).
func TestImportRulesAreDocumented(t *testing.T) {
	root := moduleRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "### Import rules\n")
	if !ok {
		t.Fatal(`docs/architecture.md has no "### Import rules" section`)
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	if !strings.Contains(section, "`internal/rules/imports_test.go`") {
		t.Error("docs/architecture.md's Import rules do not cite `internal/rules/imports_test.go`, where the rules live")
	}
	for _, r := range importRules {
		name := "`" + r.pkg + "`"
		switch {
		case r.pkg == "":
			name = "root package"
		case strings.HasPrefix(r.pkg, "cmd/"):
			name = "`cmd/...`"
		}
		if !strings.Contains(section, name) {
			t.Errorf("docs/architecture.md's Import rules do not name %s, which has a row in importRules: say its rule there (%s)", name, r.why)
		}
	}
}
