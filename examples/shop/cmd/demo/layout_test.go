package main

// This file keeps the demo honest about what it uses: only public
// packages, a daemon built without any build tag, and files that each name
// their concern and stay short.

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDemoImportsNoInternalPackage fails if the demo (its code or its
// tests) imports a package under internal/: it shows what any program can
// do with the public packages. The public packages themselves depend on
// internal ones; only the demo's own imports count.
func TestDemoImportsNoInternalPackage(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(goCommand(), "list", "-f",
		`{{join .Imports "\n"}}{{"\n"}}{{join .TestImports "\n"}}{{"\n"}}{{join .XTestImports "\n"}}`, ".").CombinedOutput()
	require.NoError(t, err, "go list: %s", out)
	imports := strings.Fields(string(out))
	require.Contains(t, imports, "github.com/platformd/platformd/examples/shop", "go list read the demo's imports")
	for _, imp := range imports {
		require.NotContains(t, imp, "github.com/platformd/platformd/internal/",
			"the demo imports %s: it must use the public packages only", imp)
	}
}

// TestDemoFilesNameTheirConcern reads the demo's files: none builds with a
// build tag or sets a test hook, each opens with a comment saying its
// concern and stays under 300 lines.
func TestDemoFilesNameTheirConcern(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	forbidden := regexp.MustCompile(`"-tags"|platformd_` + `testhooks|PLATFORMD_` + `TEST_`)
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		src := string(data)
		require.LessOrEqual(t, strings.Count(src, "\n"), 300, "%s: split it by concern", f)
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		require.False(t, forbidden.MatchString(src), "%s: the demo builds and runs shopd as shipped, without build tags or test hooks", f)
		head, _, _ := strings.Cut(src, "\nimport")
		require.True(t, strings.HasPrefix(head, "// ") || strings.Contains(head, "package main\n\n// "),
			"%s: open it with a comment saying its concern", f)
	}
}
