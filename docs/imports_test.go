package docs_test

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/platformd/platformd/"

// goList runs `go list` at the repository root and returns its lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// productPackages returns the module's packages but the examples and the
// bench, which drive the demo shop on purpose: the product itself
// (internal/..., cmd/..., daemon/..., consumer/...) and its suites under
// test/.
func productPackages(t *testing.T) []string {
	t.Helper()
	var pkgs []string
	for _, p := range goList(t, "./...") {
		rel := strings.TrimPrefix(p, module)
		if strings.HasPrefix(rel, "examples/") || strings.HasPrefix(rel, "bench/") {
			continue
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// The product depends on nothing of examples/, its tests included: an
// example depends on the product, never the reverse, so that the example
// shop can change as a teaching example without breaking the product's
// tests. The tests' shop is internal/fixture/shop. (`go list -deps -test`:
// each package, its test files and their dependencies.)
func TestProductImportsNoExample(t *testing.T) {
	t.Parallel()
	pkgs := productPackages(t)
	if !slices.Contains(pkgs, module+"internal/daemon") || !slices.Contains(pkgs, module+"cmd/platformd") {
		t.Fatalf("the listing does not cover the product: %v", pkgs)
	}
	args := append([]string{"-deps", "-test", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`}, pkgs...)
	seen := map[string]bool{}
	for _, line := range goList(t, args...) {
		pkg, deps, _ := strings.Cut(line, " ")
		for _, d := range strings.Fields(deps) {
			if strings.HasPrefix(d, module+"examples/") || d == module+"examples" {
				// A package's test variants are listed as "p [p.test]" and
				// "p_test [p.test]", its test binary as "p.test": name the
				// package once.
				name, _, _ := strings.Cut(strings.TrimSuffix(pkg, ".test"), " ")
				name = strings.TrimSuffix(name, "_test")
				if !seen[name+d] {
					seen[name+d] = true
					t.Errorf("%s (or its tests) depends on %s", strings.TrimPrefix(name, module), strings.TrimPrefix(d, module))
				}
			}
		}
	}
}

// The tests' shop (internal/fixture/...) stays out of every build but the
// tests': only _test.go files and other fixture packages import it.
func TestOnlyTestsImportTheFixture(t *testing.T) {
	t.Parallel()
	fixture := module + "internal/fixture"
	n := 0
	for _, line := range goList(t, "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...") {
		pkg, imports, _ := strings.Cut(line, " ")
		n++
		if pkg == fixture || strings.HasPrefix(pkg, fixture+"/") {
			continue
		}
		for _, imp := range strings.Fields(imports) {
			if imp == fixture || strings.HasPrefix(imp, fixture+"/") {
				t.Errorf("%s imports %s outside its tests", strings.TrimPrefix(pkg, module), strings.TrimPrefix(imp, module))
			}
		}
	}
	if n < 10 {
		t.Fatalf("listed %d packages: the listing did not start at the repository root", n)
	}
}
