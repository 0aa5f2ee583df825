//go:build !unix

package envelope

// processCPU is unknown here; see cputime_unix_test.go.
func processCPU() (ns int64, ok bool) { return 0, false }
