package soak

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// daemonBin is the platformd binary TestMain builds for the run (with tag
// platformd_nodedup when SOAK_BREAK=nodedup).
var daemonBin string

func TestMain(m *testing.M) {
	if os.Getenv("SOAK") != "1" {
		// Nothing to build: TestSoak skips.
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "platformd-soak-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		bin := filepath.Join(dir, "platformd")
		args := []string{"build", "-o", bin}
		switch os.Getenv("SOAK_BREAK") {
		case "":
		case "nodedup":
			// The bench's no-dedup build: handlers run without the
			// processed_event insert, so duplicates are applied and the
			// checker must say so.
			args = append(args, "-tags", "platformd_nodedup")
		default:
			fmt.Fprintf(os.Stderr, "soak: SOAK_BREAK=%q: want empty or nodedup\n", os.Getenv("SOAK_BREAK"))
			return 2
		}
		// The shop's daemon: the soak runs the shop's Go handlers beside
		// SQL and remote ones, and the release binary registers none.
		args = append(args, "github.com/platformd/platformd/examples/shop/cmd/shopd")
		goCmd := os.Getenv("GO")
		if goCmd == "" {
			goCmd = "go"
		}
		cmd := exec.Command(goCmd, args...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "soak: go %s: %v\n", strings.Join(args, " "), err)
			return 1
		}
		daemonBin = bin
		return m.Run()
	}()
	os.Exit(code)
}
