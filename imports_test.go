package lagc_test

import (
	"go/build"
	"path/filepath"
	"strings"
	"testing"
)

// deps returns the lagc packages pkg imports, directly or not (test files
// excluded: they are not in the binary).
func deps(t *testing.T, pkg string) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	var walk func(p string)
	walk = func(p string) {
		bp, err := build.ImportDir(filepath.FromSlash(strings.TrimPrefix(p, "lagc/")), 0)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, imp := range bp.Imports {
			if strings.HasPrefix(imp, "lagc/") && !seen[imp] {
				seen[imp] = true
				walk(imp)
			}
		}
	}
	walk(pkg)
	return seen
}

// TestImportGraph: data flows one way, YAML -> ir -> passes -> lower ->
// executors, and the layers that must not know each other do not.
func TestImportGraph(t *testing.T) {
	for _, c := range []struct {
		pkg, forbidden, why string
	}{
		{"lagc/ckpt", "lagc/models", "checkpoints do not depend on the YAML frontend"},
		{"lagc/exec/gpu", "lagc/exec/cpu", "the CUDA executor does not depend on the CPU executor"},
		{"lagc/exec/cpu", "lagc/exec/gpu", "the CPU executor does not depend on the CUDA one"},
		{"lagc/lower", "lagc/exec/gpu", "lower decides launches without the executor"},
		{"lagc/lower", "lagc/exec/cpu", "lower decides launches without the executor"},
		{"lagc/passes", "lagc/lower", "passes run before lowering"},
		{"lagc/ir", "lagc/passes", "the IR knows no passes"},
		{"lagc/wcache", "lagc/cuda", "the weight cache is host code: it runs and is tested without a GPU"},
		{"lagc/wcache", "lagc/exec/gpu", "the weight cache is host code: it runs and is tested without a GPU"},
	} {
		if deps(t, c.pkg)[c.forbidden] {
			t.Errorf("%s imports %s: %s", c.pkg, c.forbidden, c.why)
		}
	}
}
