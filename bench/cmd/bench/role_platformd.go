package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/platformd/platformd/internal/daemon"
)

// runProfiledPlatformd is the shop's daemon's main (examples/shop/cmd/shopd)
// with pprof around it: the same daemon.Main over the same registry, so the
// profile is of the code the other platformd contenders run. It writes a CPU profile of the whole run and an allocation
// profile at exit.
func runProfiledPlatformd(args []string) int {
	fs := flag.NewFlagSet("platformd-pprof", flag.ExitOnError)
	cpuPath := fs.String("cpuprofile", "", "CPU profile output")
	memPath := fs.String("memprofile", "", "allocation profile output")
	_ = fs.Parse(args)
	reg, err := shopRegistry()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if *cpuPath != "" {
		f, err := os.Create(*cpuPath)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	code := daemon.Main(fs.Args(), reg, os.Stderr)
	if *cpuPath != "" {
		pprof.StopCPUProfile()
	}
	if *memPath != "" {
		f, err := os.Create(*memPath)
		if err == nil {
			_ = pprof.Lookup("allocs").WriteTo(f, 0)
			_ = f.Close()
		}
	}
	return code
}
