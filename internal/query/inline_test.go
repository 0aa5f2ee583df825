package query_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// exempt are the packages under internal/ whose SQL is not the product's
// own statements: test helpers that create and drop scratch databases, and
// the fixture, whose handlers stand for a tenant's (their SQL is the
// tenant's, as in examples/). Every other package keeps its statements in
// its queries.go (docs/queries.md).
var exempt = map[string]bool{"testdb": true, "deploytest": true, "fixture": true}

// builtFromConfig are files whose SQL-looking literals are not platformd's
// statements, with why.
var builtFromConfig = map[string]string{
	"internal/sqlhandler/batch.go":     "the batch form of an operator's own statement, built from it",
	"internal/sqlhandler/statement.go": "the refusals of statements an operator may not write, as messages",
	"internal/try/run.go":              "recognising the statements a handler ran, to label them",
}

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
		rel, _ := filepath.Rel(filepath.Join("..", ".."), f)
		if strings.HasSuffix(f, "_test.go") || filepath.Base(f) == "queries.go" || builtFromConfig[filepath.ToSlash(rel)] != "" {
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
	var dirs []string
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || path == root {
			return err
		}
		if strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || exempt[d.Name()] {
			return filepath.SkipDir
		}
		if rel, _ := filepath.Rel(root, path); strings.HasPrefix(filepath.ToSlash(rel), "internal/") {
			dirs = append(dirs, path)
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, len(dirs), 30, "the walk found the internal packages")
	for _, dir := range dirs {
		if found := inlineSQL(t, dir); len(found) > 0 {
			t.Errorf("SQL outside %s/queries.go: %v", dir, found)
		}
	}
	// The check sees inline SQL where there is some.
	require.NotEmpty(t, inlineSQL(t, filepath.Join("..", "testdb")))
}
