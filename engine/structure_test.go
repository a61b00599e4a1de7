package engine

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// TestCallsRunOneWay keeps the engine's structure what doc.go says it is:
// no file calls a function of a file that calls one of its own, directly
// or through others. A request's path then reads one way (limiter.go, the
// view, the records, the rules), and a change to a lower file never has to
// follow a call back up. Calls through a func value or an interface are
// the caller's choice, not an edge: they are how a lower file takes what it
// must not know (a transaction's change, the fleet's holding).
func TestCallsRunOneWay(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	pkg, err := conf.Check("github.com/borrowcycle/borrowcycle/engine", fset, files, info)
	if err != nil {
		t.Fatalf("type-checking the engine: %v", err)
	}

	calls := map[string]map[string][]string{} // file -> file -> names called
	for _, f := range files {
		from := fset.Position(f.Pos()).Filename
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			var id *ast.Ident
			switch fn := ast.Unparen(call.Fun).(type) {
			case *ast.Ident:
				id = fn
			case *ast.SelectorExpr:
				id = fn.Sel
			case *ast.IndexExpr: // a generic function's instance
				if x, ok := fn.X.(*ast.Ident); ok {
					id = x
				}
			}
			if id == nil {
				return true
			}
			fn, ok := info.Uses[id].(*types.Func)
			if !ok || fn.Pkg() != pkg {
				return true
			}
			if sig, ok := fn.Type().(*types.Signature); ok && sig.Recv() != nil && types.IsInterface(sig.Recv().Type()) {
				return true // an interface method: the dynamic type decides
			}
			to := fset.Position(fn.Pos()).Filename
			if to != from {
				if calls[from] == nil {
					calls[from] = map[string][]string{}
				}
				if !slices.Contains(calls[from][to], fn.Name()) {
					calls[from][to] = append(calls[from][to], fn.Name())
				}
			}
			return true
		})
	}
	if len(calls) == 0 {
		t.Fatal("no call between files found: the check reads nothing")
	}

	// A cycle of calls between files, found by a depth-first search.
	const (
		unseen = iota
		open
		done
	)
	state := map[string]int{}
	var path []string
	var cycle []string
	var visit func(f string) bool
	visit = func(f string) bool {
		state[f] = open
		path = append(path, f)
		var next []string
		for to := range calls[f] {
			next = append(next, to)
		}
		sort.Strings(next)
		for _, to := range next {
			switch state[to] {
			case open:
				for i, p := range path {
					if p == to {
						cycle = append(append([]string{}, path[i:]...), to)
					}
				}
				return true
			case unseen:
				if visit(to) {
					return true
				}
			}
		}
		path = path[:len(path)-1]
		state[f] = done
		return false
	}
	var from []string
	for f := range calls {
		from = append(from, f)
	}
	sort.Strings(from)
	for _, f := range from {
		if state[f] == unseen && visit(f) {
			var b strings.Builder
			for i := 0; i+1 < len(cycle); i++ {
				names := calls[cycle[i]][cycle[i+1]]
				b.WriteString("\n  " + cycle[i] + " calls " + cycle[i+1] + " (" + strings.Join(names, ", ") + ")")
			}
			t.Fatalf("files call back into files that call them:%s", b.String())
		}
	}
}
