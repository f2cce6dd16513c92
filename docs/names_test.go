// Package docs holds the project's documentation; its tests check that
// what the Markdown names in the repository exists, and that no function
// of the code outgrows maxFuncLines (funclen_test.go).
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	// goFile is a Go file a page names: proxy/request.go, `request.go`.
	goFile = regexp.MustCompile(`[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.go\b`)
	// repoPath is a path in backticks or a Markdown link: `router/place`,
	// `sim/model/`, [x](../scripts/yardstick.sh).
	repoPath = regexp.MustCompile("(?:`|\\]\\()((?:\\.\\./|\\./)?[a-z][a-z0-9_-]*/[A-Za-z0-9_./-]*)[`)#]")
)

// TestDocsNameWhatExists: every .go file and every repository path that
// README.md and docs/*.md name is in the tree, so that a rename without a
// docs update fails here.
func TestDocsNameWhatExists(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	top := map[string]bool{}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			top[e.Name()] = true
		}
	}
	goFiles := map[string]bool{} // base names, and paths from the root
	if err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bench-results") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, ".go") {
			rel, _ := filepath.Rel(root, p)
			goFiles[rel], goFiles[d.Name()] = true, true
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	pages, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	pages = append(pages, filepath.Join(root, "README.md"))
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, page)
		for i, line := range strings.Split(string(b), "\n") {
			for _, f := range goFile.FindAllString(line, -1) {
				f = strings.TrimPrefix(strings.TrimPrefix(f, "./"), "../")
				if strings.Contains(f, "://") || strings.HasPrefix(f, "golang.org") || strings.HasPrefix(f, "github.com") {
					continue
				}
				if !goFiles[f] {
					t.Errorf("%s:%d names %s, which is not in the repository", name, i+1, f)
				}
			}
			for _, m := range repoPath.FindAllStringSubmatch(line, -1) {
				p := m[1]
				p = strings.TrimPrefix(strings.TrimPrefix(p, "../"), "./")
				if first, _, _ := strings.Cut(p, "/"); !top[first] || strings.Contains(p, "*") || strings.Contains(p, "<") {
					continue // not a path of this repository (vllm/..., v1/core/..., a glob)
				}
				if _, err := os.Stat(filepath.Join(root, strings.TrimSuffix(p, "/"))); err != nil {
					t.Errorf("%s:%d names %s, which is not in the repository", name, i+1, p)
				}
			}
		}
	}
}
