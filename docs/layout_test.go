// Package docs_test checks that the README stays the front page the team
// agreed on: short, and with a Layout table that names every package in
// the tree, so a newcomer reading it finds each room by its name.
package docs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readmeMaxLines is the front page's budget (it must stay under it); topic guides live in docs/.
const readmeMaxLines = 300

func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// layoutSection returns the README's "## Layout" section.
func layoutSection(t *testing.T, text string) string {
	t.Helper()
	_, after, ok := strings.Cut(text, "\n## Layout\n")
	if !ok {
		t.Fatal(`README.md has no "## Layout" section`)
	}
	section, _, _ := strings.Cut(after, "\n## ")
	return section
}

func TestReadmeIsShort(t *testing.T) {
	if n := strings.Count(readme(t), "\n"); n >= readmeMaxLines {
		t.Errorf("README.md has %d lines, not under %d: move the detail to a guide under docs/", n, readmeMaxLines)
	}
}

// TestLayoutNamesEveryPackage walks the module's Go packages (tools/ and
// testdata aside): each top-level folder must be in the Layout table, each
// package under internal/ and cmd/ by its path, and a nested package (a
// test helper such as admintest) at least by its name.
func TestLayoutNamesEveryPackage(t *testing.T) {
	layout := layoutSection(t, readme(t))
	dirs := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != ".." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "tools" || name == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(name, ".go") {
			dirs[filepath.ToSlash(filepath.Dir(strings.TrimPrefix(path, "../")))] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 10 {
		t.Fatalf("found %d package folders: the walk did not start at the repository root", len(dirs))
	}
	for dir := range dirs {
		if dir == "docs" {
			continue // this test's own
		}
		parts := strings.Split(dir, "/")
		if !strings.Contains(layout, "`"+parts[0]) {
			t.Errorf("README.md's Layout does not name %s/ (holding %s)", parts[0], dir)
			continue
		}
		switch {
		case (parts[0] == "internal" || parts[0] == "cmd") && len(parts) == 2:
			if !strings.Contains(layout, "`"+dir+"`") {
				t.Errorf("README.md's Layout does not name `%s`", dir)
			}
		case len(parts) > 2 || (len(parts) == 2 && parts[0] == "daemon"):
			if !strings.Contains(layout, parts[len(parts)-1]) {
				t.Errorf("README.md's Layout does not name %s (%s)", parts[len(parts)-1], dir)
			}
		}
	}
}

// The design lives in the repository (docs/contracts.md and the guides):
// no file may send a reader to a design document a clone does not have.
func TestNoFileCitesAnOutsideDesignDocument(t *testing.T) {
	needle := "DESIGN" + ".md"
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != ".." && (strings.HasPrefix(name, ".") || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), needle) {
			t.Errorf("%s names %s", strings.TrimPrefix(path, "../"), needle)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
