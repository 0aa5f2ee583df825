package query_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// converted are the packages whose statements all live in their
// queries.go (docs/queries.md), relative to the repository root.
var converted = []string{"internal/dedup", "internal/state", "internal/daemon", "internal/migrate",
	"internal/lease", "internal/session", "internal/outbox", "internal/replay", "internal/remote"}

// sqlRE is a string literal that reads as a SQL statement.
var sqlRE = regexp.MustCompile(`^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|DROP|ALTER|LOCK|SET|RESET|LISTEN|NOTIFY|TRUNCATE)\s`)

// inlineSQL returns file:line of every SQL string literal in dir's product
// files other than queries.go.
func inlineSQL(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	var found []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || filepath.Base(f) == "queries.go" {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		ast.Inspect(file, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			if s, err := strconv.Unquote(lit.Value); err == nil && sqlRE.MatchString(s) {
				found = append(found, fset.Position(lit.Pos()).String())
			}
			return true
		})
	}
	return found
}

// The converted packages keep their SQL in queries.go, where a newcomer
// looks for it and where every statement gets its name.
func TestNoInlineSQL(t *testing.T) {
	t.Parallel()
	for _, pkg := range converted {
		require.Empty(t, inlineSQL(t, filepath.Join("..", "..", filepath.FromSlash(pkg))), "SQL outside %s/queries.go", pkg)
	}
	// The check sees inline SQL where there is some.
	require.NotEmpty(t, inlineSQL(t, filepath.Join("..", "testdb")))
}
