package console_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// binary is the platformd built for these tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "platformd-console-e2e")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "platformd")
	// -race like cmd/platformd's end-to-end tests: same flags, so the build
	// cache serves both.
	if out, err := exec.Command("go", "build", "-race", "-o", binary, "../../cmd/platformd").CombinedOutput(); err != nil {
		panic(fmt.Sprintf("go build platformd: %v\n%s", err, out))
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
