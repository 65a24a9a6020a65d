package rules

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// notSymbols are code spans that look like pkg.Name but name no Go symbol.
var notSymbols = map[string]string{
	"trainer.default.svc.cluster.local": "a Kubernetes DNS name (docs/deployment.md)",
}

// outside are paths beside the checkout that a doc must not name (where the
// project's checkouts and shared files live on its machines); a link or a
// code span that climbs out of the repository with ../ fails too.
var outside = []string{"/work/", "../shared"}

// fileExts are the endings that make a pkg.name span a file name, not a
// symbol (`trainer.yaml`, `topology.json`, `comm.go`).
var fileExts = []string{".go", ".md", ".json", ".yaml", ".yml", ".sh", ".svg", ".csv", ".txt", ".test", ".so", ".mod", ".sum", ".gz", ".tmp"}

// TestDocReferences checks what the docs name: the repository paths in their
// code spans, links and shell commands exist; the Go symbols in their code
// spans and Go examples (pkg.Name, pkg.Type.Method, (*pkg.Type).Method, for
// the module's packages) are declared; and no link leaves the repository.
func TestDocReferences(t *testing.T) {
	root := moduleRoot(t)
	d := newDocChecker(t, root)
	for _, doc := range d.docs() {
		d.check(doc)
	}
	if d.checked.paths == 0 || d.checked.symbols == 0 {
		t.Fatalf("checked %d paths and %d symbols: the extraction is broken", d.checked.paths, d.checked.symbols)
	}
	t.Logf("%d docs: %d paths, %d symbols, %d links checked", len(d.docs()), d.checked.paths, d.checked.symbols, d.checked.links)
}

type docChecker struct {
	t       *testing.T
	root    string
	top     map[string]bool      // the directories at the repository's root
	files   map[string]bool      // every file's base name in the repository (for bare `op.go`)
	pkgDirs map[string][]string  // package name → directories holding it
	pkgs    map[string]*pkgIndex // package name → its declarations, parsed on first use
	anchors map[string][]string  // doc → its headings' anchors
	docList []string
	checked struct{ paths, symbols, links int }
}

func newDocChecker(t *testing.T, root string) *docChecker {
	d := &docChecker{t: t, root: root, top: map[string]bool{}, files: map[string]bool{},
		pkgDirs: map[string][]string{}, pkgs: map[string]*pkgIndex{}, anchors: map[string][]string{}}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		// Only directories: a file at the root (a binary go build left
		// there, hiercomm-bench) makes `hiercomm-bench/1` no path.
		if e.IsDir() {
			d.top[e.Name()] = true
		}
	}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := e.Name()
		if e.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		d.files[name] = true
		if strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			f, err := parser.ParseFile(fset, p, nil, parser.PackageClauseOnly)
			if err != nil {
				return err
			}
			pkg, dir := f.Name.Name, filepath.Dir(p)
			if pkg != "main" && !slices.Contains(d.pkgDirs[pkg], dir) {
				d.pkgDirs[pkg] = append(d.pkgDirs[pkg], dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A test-only package (this one) is named by its test files.
	d.pkgDirs["rules"] = []string{filepath.Join(root, "internal", "rules")}
	return d
}

// docs lists the Markdown files checked: those at the root and in docs/, and
// every Markdown file of the repository that one of them links to.
func (d *docChecker) docs() []string {
	if d.docList != nil {
		return d.docList
	}
	var list []string
	for _, pattern := range []string{"*.md", "docs/*.md"} {
		m, err := filepath.Glob(filepath.Join(d.root, pattern))
		if err != nil {
			d.t.Fatal(err)
		}
		for _, p := range m {
			r, _ := filepath.Rel(d.root, p)
			list = append(list, filepath.ToSlash(r))
		}
	}
	for i := 0; i < len(list); i++ {
		text, err := os.ReadFile(filepath.Join(d.root, list[i]))
		if err != nil {
			d.t.Fatal(err)
		}
		prose, _ := splitFences(string(text))
		for _, l := range links(blankSpans(prose)) {
			target, _, _ := strings.Cut(l.target, "#")
			if !strings.HasSuffix(target, ".md") || strings.Contains(target, "://") {
				continue
			}
			p := path.Clean(path.Join(path.Dir(list[i]), target))
			if !strings.HasPrefix(p, "../") && !slices.Contains(list, p) {
				if _, err := os.Stat(filepath.Join(d.root, p)); err == nil {
					list = append(list, p)
				}
			}
		}
	}
	if len(list) == 0 {
		d.t.Fatal("no Markdown files found")
	}
	d.docList = list
	return list
}

// fence is a fenced code block: its info string ("go", "sh", "") and text.
type fence struct {
	info  string
	text  string
	start int // the line of its first line of code, 1-based
}

var fenceRE = regexp.MustCompile("^ {0,3}(```+|~~~+)\\s*([^`\\s]*)")

// splitFences returns text with every fenced block's lines blanked (so
// offsets still give line numbers) and the blocks themselves.
func splitFences(text string) (string, []fence) {
	lines := strings.SplitAfter(text, "\n")
	var prose strings.Builder
	var fences []fence
	var open string // the fence's opening run, while inside one
	var cur fence
	var code strings.Builder
	for i, line := range lines {
		m := fenceRE.FindStringSubmatch(line)
		switch {
		case open == "" && m != nil:
			open, cur = m[1], fence{info: m[2], start: i + 2}
			code.Reset()
			prose.WriteString("\n")
		case open != "" && m != nil && strings.HasPrefix(m[1], open) && m[2] == "":
			cur.text = code.String()
			fences = append(fences, cur)
			open = ""
			prose.WriteString("\n")
		case open != "":
			code.WriteString(line)
			prose.WriteString(strings.Repeat(" ", len(line)-1) + "\n")
		default:
			prose.WriteString(line)
		}
	}
	return prose.String(), fences
}

// span is a code span: its content and its offset in the text.
type span struct {
	text    string
	at, end int // the offsets of its opening run and past its closing one
}

// codeSpans finds the backtick code spans of Markdown prose.
func codeSpans(prose string) []span {
	var spans []span
	for i := 0; i < len(prose); {
		if prose[i] != '`' {
			i++
			continue
		}
		n := 0
		for i+n < len(prose) && prose[i+n] == '`' {
			n++
		}
		run := strings.Repeat("`", n)
		j := i + n
		for {
			k := strings.Index(prose[j:], run)
			if k < 0 {
				return spans // an unclosed run is text
			}
			k += j
			if k+n < len(prose) && prose[k+n] == '`' { // a longer run: not the closer
				j = k + n
				for j < len(prose) && prose[j] == '`' {
					j++
				}
				continue
			}
			content := strings.Join(strings.Fields(prose[i+n:k]), " ")
			spans = append(spans, span{text: content, at: i, end: k + n})
			i = k + n
			break
		}
	}
	return spans
}

// blankSpans replaces code spans by spaces, so that links are looked for in
// the text only.
func blankSpans(prose string) string {
	b := []byte(prose)
	for _, s := range codeSpans(prose) {
		for i := s.at; i < s.end; i++ {
			if b[i] != '\n' {
				b[i] = ' '
			}
		}
	}
	return string(b)
}

type link struct {
	target string
	at     int
}

var linkRE = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)

func links(prose string) []link {
	var ls []link
	for _, m := range linkRE.FindAllStringSubmatchIndex(prose, -1) {
		ls = append(ls, link{target: prose[m[2]:m[3]], at: m[0]})
	}
	return ls
}

func lineOf(text string, at int) int { return strings.Count(text[:at], "\n") + 1 }

// check checks one doc.
func (d *docChecker) check(doc string) {
	raw, err := os.ReadFile(filepath.Join(d.root, doc))
	if err != nil {
		d.t.Fatal(err)
	}
	text := string(raw)
	prose, fences := splitFences(text)
	errorf := func(line int, format string, args ...any) {
		d.t.Errorf("%s:%d: %s", doc, line, fmt.Sprintf(format, args...))
	}

	// No doc names this checkout's place on disk, or the places beside it.
	for _, abs := range append([]string{d.root + string(filepath.Separator)}, outside...) {
		if i := strings.Index(text, abs); i >= 0 {
			errorf(lineOf(text, i), "names %s…, outside the repository: docs refer to files by their path in it", abs)
		}
	}

	for _, s := range codeSpans(prose) {
		line := lineOf(prose, s.at)
		if pkg, chain, ok := symbolSpan(s.text); ok {
			if _, known := d.pkgDirs[pkg]; known {
				if _, skip := notSymbols[s.text]; !skip {
					d.checkSymbol(line, errorf, s.text, pkg, chain)
				}
				continue
			}
		}
		for _, tok := range strings.Fields(s.text) {
			d.checkPath(line, errorf, tok, strings.Contains(s.text, " "))
		}
	}
	for _, l := range links(blankSpans(prose)) {
		d.checkLink(doc, lineOf(prose, l.at), errorf, l.target)
	}
	for _, f := range fences {
		switch f.info {
		case "go":
			d.checkGoCode(f, errorf)
		case "sh", "bash", "console", "shell":
			for i, line := range strings.Split(f.text, "\n") {
				if strings.HasPrefix(strings.TrimSpace(line), "#") {
					continue
				}
				for _, tok := range strings.Fields(line) {
					if strings.HasPrefix(tok, "./") || strings.HasPrefix(tok, "../") {
						d.checkPath(f.start+i, errorf, tok, true)
					}
				}
			}
		}
	}
}

var (
	// (*pkg.Type).Method, optionally called
	methodExprRE = regexp.MustCompile(`^\(\*?([a-z][a-z0-9]*)\.([A-Za-z_]\w*)\)\.([A-Za-z_]\w*)(\(.*\))?$`)
	// *pkg.Name.Member…, optionally called
	selectorRE = regexp.MustCompile(`^[*&]?([a-z][a-z0-9]*)((?:\.[A-Za-z_]\w*)+)(\(.*\))?$`)
)

// symbolSpan says whether a code span is a qualified Go name, and which.
func symbolSpan(s string) (pkg string, chain []string, ok bool) {
	if m := methodExprRE.FindStringSubmatch(s); m != nil {
		return m[1], []string{m[2], m[3]}, true
	}
	m := selectorRE.FindStringSubmatch(s)
	if m == nil {
		return "", nil, false
	}
	for _, ext := range fileExts {
		if strings.HasSuffix(m[0], ext) && m[3] == "" {
			return "", nil, false
		}
	}
	return m[1], strings.Split(m[2][1:], "."), true
}

func (d *docChecker) checkSymbol(line int, errorf func(int, string, ...any), text, pkg string, chain []string) {
	d.checked.symbols++
	idx := d.index(pkg)
	if problem := idx.resolve(d, chain); problem != "" {
		errorf(line, "`%s`: %s", text, problem)
	}
}

// goRefRE finds references to the module's packages in Go examples.
var goRefRE = regexp.MustCompile(`(^|[^\w.])([a-z][a-z0-9]*)((?:\.[A-Z]\w*)(?:\.[A-Za-z_]\w*)*)`)

func (d *docChecker) checkGoCode(f fence, errorf func(int, string, ...any)) {
	for i, line := range strings.Split(f.text, "\n") {
		if c := strings.Index(line, "//"); c >= 0 {
			line = line[:c]
		}
		for _, m := range goRefRE.FindAllStringSubmatch(line, -1) {
			pkg := m[2]
			if _, known := d.pkgDirs[pkg]; !known {
				continue
			}
			d.checkSymbol(f.start+i, errorf, pkg+m[3], pkg, strings.Split(m[3][1:], "."))
		}
	}
}

var pathRE = regexp.MustCompile(`^[A-Za-z0-9_.\-/]+$`)

// checkPath checks a code span's token that may be a repository path:
// `comm/tier/failure.go`, `.ci/run`, `docs/errors.md`, `./examples/gpu`,
// `nexar/`, and bare Go or Markdown file names (`op.go`), which must be some
// file's name. inCommand says the token is a word of a command line, where
// only ./paths and paths under the root's directories are taken as paths.
func (d *docChecker) checkPath(line int, errorf func(int, string, ...any), tok string, inCommand bool) {
	tok = strings.Trim(tok, `"',;:()`)
	if strings.HasPrefix(tok, "../") {
		if p := path.Clean(tok); p == ".." || strings.HasPrefix(p, "../") {
			errorf(line, "`%s` is outside the repository: docs name files by their path in it", tok)
		}
		return
	}
	if strings.ContainsAny(tok, "*<>[]{}$#?=|~…") || strings.Contains(tok, "://") || strings.HasPrefix(tok, "/") || tok == "" {
		return
	}
	p := strings.TrimPrefix(tok, "./")
	p = strings.TrimSuffix(p, "/...")
	p = strings.TrimSuffix(p, "/")
	if !pathRE.MatchString(p) || p == "." || p == "" {
		return
	}
	first, _, nested := strings.Cut(p, "/")
	switch {
	case nested && d.top[first]:
	case !nested && !inCommand && (strings.HasSuffix(p, ".go") || strings.HasSuffix(p, ".md")):
		d.checked.paths++
		if !d.files[p] {
			errorf(line, "`%s`: no file of the repository has that name", tok)
		}
		return
	case !nested && (strings.HasPrefix(tok, "./") || strings.HasSuffix(tok, "/")) && d.top[first]:
	default:
		return
	}
	d.checked.paths++
	if _, err := os.Stat(filepath.Join(d.root, filepath.FromSlash(p))); err != nil {
		errorf(line, "`%s`: %s does not exist in the repository", tok, p)
	}
}

// checkLink checks a link's target: in the repository, present, and its
// #anchor a heading of the doc it names.
func (d *docChecker) checkLink(doc string, line int, errorf func(int, string, ...any), target string) {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return
	}
	d.checked.links++
	file, anchor, _ := strings.Cut(target, "#")
	p := doc
	if file != "" {
		if strings.HasPrefix(file, "/") {
			errorf(line, "link to %s: an absolute path, outside the repository; link by a path relative to the doc", target)
			return
		}
		p = path.Clean(path.Join(path.Dir(doc), file))
		if p == ".." || strings.HasPrefix(p, "../") {
			errorf(line, "link to %s leaves the repository", target)
			return
		}
		if _, err := os.Stat(filepath.Join(d.root, filepath.FromSlash(p))); err != nil {
			errorf(line, "link to %s: %s does not exist", target, p)
			return
		}
	}
	if anchor == "" || !strings.HasSuffix(p, ".md") {
		return
	}
	if !slices.Contains(d.headingAnchors(p), anchor) {
		errorf(line, "link to %s: %s has no heading with the anchor #%s", target, p, anchor)
	}
}

var headingRE = regexp.MustCompile(`(?m)^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$`)

// headingAnchors returns the anchors GitHub gives the headings of a doc.
func (d *docChecker) headingAnchors(doc string) []string {
	if a, ok := d.anchors[doc]; ok {
		return a
	}
	raw, err := os.ReadFile(filepath.Join(d.root, filepath.FromSlash(doc)))
	if err != nil {
		d.t.Fatal(err)
	}
	prose, _ := splitFences(string(raw))
	count := map[string]int{}
	var anchors []string
	for _, m := range headingRE.FindAllStringSubmatch(prose, -1) {
		a := slug(m[1])
		if n := count[a]; n > 0 {
			anchors = append(anchors, fmt.Sprintf("%s-%d", a, n))
		} else {
			anchors = append(anchors, a)
		}
		count[a]++
	}
	d.anchors[doc] = anchors
	return anchors
}

var mdLinkRE = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// slug is GitHub's anchor for a heading: lower case, links reduced to their
// text, punctuation dropped, spaces made hyphens.
func slug(heading string) string {
	heading = mdLinkRE.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// pkgIndex is what one package declares.
type pkgIndex struct {
	name  string
	top   map[string]ast.Node // top-level names: *ast.TypeSpec, *ast.ValueSpec, *ast.FuncDecl
	types map[string]*typeIndex
}

type typeIndex struct {
	members  map[string]ast.Expr // fields and methods (a method's value is nil)
	embedded []ast.Expr          // embedded fields and interfaces
	alias    ast.Expr            // type T = X
}

// index parses a package's files (test files too: commtest's and
// examples' helpers live in some) on first use.
func (d *docChecker) index(pkg string) *pkgIndex {
	if idx, ok := d.pkgs[pkg]; ok {
		return idx
	}
	idx := &pkgIndex{name: pkg, top: map[string]ast.Node{}, types: map[string]*typeIndex{}}
	d.pkgs[pkg] = idx
	typ := func(name string) *typeIndex {
		ti := idx.types[name]
		if ti == nil {
			ti = &typeIndex{members: map[string]ast.Expr{}}
			idx.types[name] = ti
		}
		return ti
	}
	fset := token.NewFileSet()
	for _, dir := range d.pkgDirs[pkg] {
		matches, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			d.t.Fatal(err)
		}
		for _, file := range matches {
			f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
			if err != nil {
				d.t.Fatal(err)
			}
			if f.Name.Name != pkg {
				continue // an external test package
			}
			for _, decl := range f.Decls {
				switch decl := decl.(type) {
				case *ast.FuncDecl:
					if decl.Recv == nil {
						idx.top[decl.Name.Name] = decl
						continue
					}
					if recv := baseTypeName(decl.Recv.List[0].Type); recv != "" {
						typ(recv).members[decl.Name.Name] = nil
					}
				case *ast.GenDecl:
					for _, spec := range decl.Specs {
						switch spec := spec.(type) {
						case *ast.ValueSpec:
							for _, n := range spec.Names {
								idx.top[n.Name] = spec
							}
						case *ast.TypeSpec:
							idx.top[spec.Name.Name] = spec
							ti := typ(spec.Name.Name)
							if spec.Assign.IsValid() {
								ti.alias = spec.Type
							}
							addMembers(ti, spec.Type)
						}
					}
				}
			}
		}
	}
	return idx
}

// addMembers records a type's fields, interface methods and embeddings.
func addMembers(ti *typeIndex, t ast.Expr) {
	var fields *ast.FieldList
	switch t := t.(type) {
	case *ast.StructType:
		fields = t.Fields
	case *ast.InterfaceType:
		fields = t.Methods
	default:
		return
	}
	for _, f := range fields.List {
		if len(f.Names) == 0 {
			ti.embedded = append(ti.embedded, f.Type)
			if name := baseTypeName(f.Type); name != "" {
				ti.members[name] = f.Type
			}
			continue
		}
		for _, n := range f.Names {
			ti.members[n.Name] = f.Type
		}
	}
}

// baseTypeName is the name of a type expression's named type: T, *T, T[P],
// pkg.T.
func baseTypeName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.StarExpr:
		return baseTypeName(e.X)
	case *ast.IndexExpr:
		return baseTypeName(e.X)
	case *ast.IndexListExpr:
		return baseTypeName(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	}
	return ""
}

// typeRef resolves a type expression to a package of the module and a type
// name in it; ok is false for anything else (the standard library, a
// literal type), which is not looked into.
func (d *docChecker) typeRef(in string, e ast.Expr) (pkg, name string, ok bool) {
	switch e := e.(type) {
	case *ast.Ident:
		return in, e.Name, true
	case *ast.StarExpr:
		return d.typeRef(in, e.X)
	case *ast.IndexExpr:
		return d.typeRef(in, e.X)
	case *ast.IndexListExpr:
		return d.typeRef(in, e.X)
	case *ast.SelectorExpr:
		if x, isIdent := e.X.(*ast.Ident); isIdent {
			if _, known := d.pkgDirs[x.Name]; known {
				return x.Name, e.Sel.Name, true
			}
		}
	}
	return "", "", false
}

// resolve checks that chain (Name, Name.Member, Name.Field.Member, …) is
// declared, and says what is missing if not.
func (idx *pkgIndex) resolve(d *docChecker, chain []string) string {
	decl, ok := idx.top[chain[0]]
	if !ok {
		return fmt.Sprintf("package %s declares no %s", idx.name, chain[0])
	}
	if len(chain) == 1 {
		return ""
	}
	// The type whose member chain[1] is.
	var pkg, typ string
	switch decl := decl.(type) {
	case *ast.TypeSpec:
		pkg, typ = idx.name, decl.Name.Name
	case *ast.ValueSpec:
		if decl.Type == nil {
			return "" // an untyped var or const: not looked into
		}
		if pkg, typ, ok = d.typeRef(idx.name, decl.Type); !ok {
			return ""
		}
	default:
		return fmt.Sprintf("%s.%s is a function, which has no member %s", idx.name, chain[0], chain[1])
	}
	for i, member := range chain[1:] {
		next, found, lookedInto := d.member(pkg, typ, member, 0)
		if !lookedInto {
			return ""
		}
		if !found {
			return fmt.Sprintf("%s.%s has no field or method %s", pkg, typ, member)
		}
		if i == len(chain)-2 {
			return ""
		}
		if next == nil {
			return fmt.Sprintf("%s.%s.%s is a method, which has no member %s", pkg, typ, member, chain[i+2])
		}
		if pkg, typ, ok = d.typeRef(pkg, next); !ok {
			return ""
		}
	}
	return ""
}

// member looks for a field or method of pkg.typ, through its embeddings and
// aliases; lookedInto is false where the type is not the module's.
func (d *docChecker) member(pkg, typ, name string, depth int) (t ast.Expr, found, lookedInto bool) {
	if _, known := d.pkgDirs[pkg]; !known || depth > 8 {
		return nil, false, false
	}
	ti := d.index(pkg).types[typ]
	if ti == nil {
		return nil, false, false
	}
	if ti.alias != nil {
		if p, n, ok := d.typeRef(pkg, ti.alias); ok {
			return d.member(p, n, name, depth+1)
		}
		return nil, false, false
	}
	if t, ok := ti.members[name]; ok {
		return t, true, true
	}
	for _, e := range ti.embedded {
		p, n, ok := d.typeRef(pkg, e)
		if !ok {
			return nil, false, false // embeds a type from elsewhere: cannot tell
		}
		if t, found, looked := d.member(p, n, name, depth+1); found || !looked {
			return t, found, looked
		}
	}
	return nil, false, true
}

// mdName is a Markdown file's name as prose and comments write it.
var mdName = regexp.MustCompile(`\b[A-Za-z0-9_-]+\.md\b`)

// TestMarkdownNamesExist checks that every Markdown file named anywhere in
// the repository's Markdown and Go files (prose, comments, code spans) is
// one of its own: the docs stand alone, so they never send a reader to a
// note that does not ship with them.
func TestMarkdownNamesExist(t *testing.T) {
	root := moduleRoot(t)
	have := map[string]bool{}
	var texts []string
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := e.Name()
		if e.IsDir() {
			// out: what the peers bench writes (ignored by git).
			if p != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "out") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".md") {
			have[name] = true
		}
		if strings.HasSuffix(name, ".md") || strings.HasSuffix(name, ".go") {
			texts = append(texts, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	names := 0
	for _, p := range texts {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range mdName.FindAllString(line, -1) {
				names++
				if !have[m] {
					r, _ := filepath.Rel(root, p)
					t.Errorf("%s:%d names %s, which is not a file of this repository", r, i+1, m)
				}
			}
		}
	}
	if names == 0 {
		t.Fatal("no Markdown file named anywhere: the extraction is broken")
	}
}
