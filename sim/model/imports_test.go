package model

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The model is the engine alone: it imports the standard library (not
// net/http) and the project's leaf list, never the front end (package sim)
// or a JSON library.
func TestModelImportsNoFrontEnd(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"github.com/lmwarden/warden/internal/ilist": true}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		ast, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range ast.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			std := !strings.Contains(strings.Split(path, "/")[0], ".")
			if (std && strings.HasPrefix(path, "net/http")) || (!std && !allowed[path]) {
				t.Errorf("%s imports %s", f, path)
			}
		}
	}
}
