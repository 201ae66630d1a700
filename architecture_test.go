package tollgate_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestArchitectureNamesRealCode keeps docs/architecture.md's walks true:
// every file it names exists, and every function, method, type or field
// it names in code style is declared where it says (pkg.Name in package
// pkg, or a string such as the audit action credits.grant; Type.Member
// on type Type; a bare camelCase name used somewhere in the Go or Lua
// sources). Other names (environment variables, plan names) pass
// unchecked.
func TestArchitectureNamesRealCode(t *testing.T) {
	doc, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	code := readDeclarations(t)
	fileRef := regexp.MustCompile(`^[\w./-]+\.(go|lua|sql|ya?ml|conf|html|ts|sh)$`)
	dotted := regexp.MustCompile(`^(\w+)\.(\w+)(?:\.(\w+))?(?:\(\))?$`)
	bare := regexp.MustCompile(`^([a-z]+[A-Z]\w*|[A-Z][a-z0-9]+[A-Z]\w*)(?:\(\))?$`)
	checked := 0
	for _, m := range regexp.MustCompile("`([^`\n]+)`").FindAllStringSubmatch(string(doc), -1) {
		name := m[1]
		switch {
		case fileRef.MatchString(name):
			checked++
			if !code.hasFile(name) {
				t.Errorf("docs/architecture.md names %s: no such file", name)
			}
		case dotted.MatchString(name):
			p := dotted.FindStringSubmatch(name)
			a, b, c := p[1], p[2], p[3]
			switch {
			case c != "": // pkg.Type.Member
				if code.pkgs[a] == nil {
					continue
				}
				checked++
				if !code.members[a+"."+b][c] {
					t.Errorf("docs/architecture.md names %s: package %s declares no %s.%s", name, a, b, c)
				}
			case code.pkgs[a] != nil: // pkg.Name, or an action named so
				checked++
				if !code.pkgs[a][b] && !code.strings[a+"."+b] {
					t.Errorf("docs/architecture.md names %s: package %s declares no %s", name, a, b)
				}
			case code.types[a]: // Type.Member
				checked++
				if !code.anyMember(a, b) {
					t.Errorf("docs/architecture.md names %s: no type %s has a member %s", name, a, b)
				}
			}
		case bare.MatchString(name):
			checked++
			if !code.names[bare.FindStringSubmatch(name)[1]] {
				t.Errorf("docs/architecture.md names %s: used nowhere in the Go or Lua sources", name)
			}
		}
	}
	if checked < 100 {
		t.Errorf("checked %d names in docs/architecture.md; the walks name far more: is the pattern still right?", checked)
	}
}

// declarations is what the tree declares, for TestArchitectureNamesRealCode.
type declarations struct {
	files   []string                   // every file's slash path
	pkgs    map[string]map[string]bool // package name → its top-level names
	types   map[string]bool            // every type's name
	members map[string]map[string]bool // "pkg.Type" → its methods and fields
	names   map[string]bool            // every name used, Go and Lua, tests too
	strings map[string]bool            // every Go string literal's value
}

func (d *declarations) hasFile(name string) bool {
	for _, f := range d.files {
		if f == name || strings.HasSuffix(f, "/"+name) {
			return true
		}
	}
	return false
}

func (d *declarations) anyMember(typ, member string) bool {
	for k, m := range d.members {
		if strings.HasSuffix(k, "."+typ) && m[member] {
			return true
		}
	}
	return false
}

func readDeclarations(t *testing.T) *declarations {
	t.Helper()
	d := &declarations{
		pkgs: map[string]map[string]bool{}, types: map[string]bool{},
		members: map[string]map[string]bool{}, names: map[string]bool{}, strings: map[string]bool{},
	}
	luaFunc := regexp.MustCompile(`(?m)^\s*(?:local\s+)?function\s+(\w+)|^local\s+(\w+)\s*=`)
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if n := e.Name(); path != "." && (strings.HasPrefix(n, ".") || n == "node_modules" || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		path = filepath.ToSlash(path)
		d.files = append(d.files, path)
		switch {
		case strings.HasSuffix(path, ".lua"):
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range luaFunc.FindAllStringSubmatch(string(b), -1) {
				d.names[m[1]+m[2]] = true
			}
		case strings.HasSuffix(path, ".go"):
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			d.addGo(f, !strings.HasSuffix(path, "_test.go"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// addGo adds f's declarations; a test file's only to names.
func (d *declarations) addGo(f *ast.File, exported bool) {
	pkg := f.Name.Name
	if pkg == "main" || strings.HasSuffix(pkg, "_test") {
		exported = false
	}
	top := func(name string) {
		d.names[name] = true
		if exported {
			if d.pkgs[pkg] == nil {
				d.pkgs[pkg] = map[string]bool{}
			}
			d.pkgs[pkg][name] = true
		}
	}
	member := func(typ, name string) {
		d.names[name] = true
		k := pkg + "." + typ
		if d.members[k] == nil {
			d.members[k] = map[string]bool{}
		}
		d.members[k][name] = true
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Ident:
			d.names[n.Name] = true
		case *ast.BasicLit:
			if v, err := strconv.Unquote(n.Value); err == nil && n.Kind == token.STRING {
				d.strings[v] = true
			}
		}
		return true
	})
	for _, decl := range f.Decls {
		switch decl := decl.(type) {
		case *ast.FuncDecl:
			if decl.Recv == nil || len(decl.Recv.List) == 0 {
				top(decl.Name.Name)
				continue
			}
			if typ := receiverType(decl.Recv.List[0].Type); typ != "" {
				member(typ, decl.Name.Name)
			}
		case *ast.GenDecl:
			for _, spec := range decl.Specs {
				switch spec := spec.(type) {
				case *ast.TypeSpec:
					top(spec.Name.Name)
					d.types[spec.Name.Name] = true
					if st, ok := spec.Type.(*ast.StructType); ok {
						for _, field := range st.Fields.List {
							for _, n := range field.Names {
								member(spec.Name.Name, n.Name)
							}
							if len(field.Names) == 0 { // embedded: its name is its type's
								if typ := receiverType(field.Type); typ != "" {
									member(spec.Name.Name, typ)
								}
							}
						}
					}
				case *ast.ValueSpec:
					for _, n := range spec.Names {
						top(n.Name)
					}
				}
			}
		}
	}
}

// receiverType is the name of a receiver's or embedded field's type:
// T, *T, T[P], pkg.T.
func receiverType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return receiverType(e.X)
	case *ast.IndexExpr:
		return receiverType(e.X)
	case *ast.IndexListExpr:
		return receiverType(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.Ident:
		return e.Name
	}
	return ""
}
