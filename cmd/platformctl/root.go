package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Exit codes of platformctl.
const (
	exitOK          = 0 // success
	exitError       = 1 // any other error
	exitUsage       = 2 // bad command line
	exitNotFound    = 3 // codes.NotFound
	exitInvalid     = 4 // codes.InvalidArgument, codes.FailedPrecondition
	exitAuth        = 5 // codes.Unauthenticated, codes.PermissionDenied
	exitUnavailable = 6 // codes.Unavailable, codes.DeadlineExceeded
)

// Environment variables read by platformctl.
const (
	envAddr  = "PLATFORMD_ADDR"
	envToken = "PLATFORMD_TOKEN"
)

// Defaults of the global flags.
const (
	addrDefault    = "127.0.0.1:7070"
	timeoutDefault = 10 * time.Second
)

// rootLong is the root command's help, with the exit codes.
const rootLong = `platformctl is the command-line client of platformd's admin API.

It talks gRPC to a daemon's admin listener (--addr, or $PLATFORMD_ADDR, default
127.0.0.1:7070) with a bearer token (--token, or $PLATFORMD_TOKEN). A "read"
token may run services, pools, lookup, horizon get and advise, purge list, failed list,
failures groups, list, get and retries (and retries get); the other commands
need an "admin" token.

Output is a table by default; -o json prints the API's response as one JSON
document (protobuf JSON, camelCase field names). Times are RFC 3339, durations
use Go syntax (336h0m0s).

Errors are printed on stderr as "platformctl: <gRPC code>: <message>".

Exit codes:
  0  success
  1  any other error
  2  usage error (unknown command or flag, wrong arguments)
  3  NotFound: unknown service or pool
  4  InvalidArgument or FailedPrecondition: bad event id, duration or limit,
     horizon under min_horizon without --force
  5  Unauthenticated or PermissionDenied: missing, wrong or too weak token
  6  Unavailable or DeadlineExceeded: daemon unreachable or too slow`

// usageError is a bad command line: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// usagef returns a usageError.
func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// invalidf returns the error of a value typed on the command line that
// does not parse (a duration, a time): an InvalidArgument status, printed
// and mapped to exit code 4 as the daemon's own InvalidArgument answers.
func invalidf(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// runError is an error of a command's work (as opposed to parsing its
// command line): exit code by gRPC code, or 1.
type runError struct{ err error }

func (e *runError) Error() string { return e.err.Error() }
func (e *runError) Unwrap() error { return e.err }

// runE adapts a command's work: its errors are runErrors unless they are
// usageErrors.
func runE(f func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := f(cmd, args)
		var ue *usageError
		if err == nil || errors.As(err, &ue) {
			return err
		}
		return &runError{err: err}
	}
}

// run runs platformctl with args (without the program name), reading the
// environment through getenv, and returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	a := &app{getenv: getenv, stdout: stdout}
	root := newRootCmd(a) //nolint:contextcheck // commands get ctx from cobra: ExecuteContextC below, cmd.Context()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}

	var re *runError
	if !errors.As(err, &re) {
		// Cobra's own errors (unknown command or flag, wrong number of
		// arguments) and ours are usage errors.
		fmt.Fprintf(stderr, "platformctl: %v\nRun '%s --help' for usage.\n", err, cmd.CommandPath())
		return exitUsage
	}
	st, ok := status.FromError(re.err)
	if !ok {
		fmt.Fprintf(stderr, "platformctl: %v\n", re.err)
		return exitError
	}
	fmt.Fprintf(stderr, "platformctl: %s: %s\n", st.Code(), st.Message())
	return exitCode(st.Code())
}

// exitCode maps a gRPC code to platformctl's exit code.
func exitCode(code codes.Code) int {
	switch code {
	case codes.OK:
		return exitOK
	case codes.NotFound:
		return exitNotFound
	case codes.InvalidArgument, codes.FailedPrecondition:
		return exitInvalid
	case codes.Unauthenticated, codes.PermissionDenied:
		return exitAuth
	case codes.Unavailable, codes.DeadlineExceeded:
		return exitUnavailable
	default:
		return exitError
	}
}

// newRootCmd returns the command tree, with a's fields bound to the global
// flags.
func newRootCmd(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "platformctl",
		Short: "Command-line client of platformd's admin API",
		Long:  rootLong,
		Example: `  export PLATFORMD_ADDR=127.0.0.1:7070 PLATFORMD_TOKEN=...
  platformctl pools
  platformctl pool pause stock-events --reason "db maintenance"
  platformctl lookup 0b1d7c52-5a4e-4a8e-9d1f-3c0f9a6b2e11 -o json`,
		SilenceErrors:     true,
		SilenceUsage:      true,
		PersistentPreRunE: func(*cobra.Command, []string) error { return a.checkFlags() },
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{msg: err.Error()} })
	root.CompletionOptions.DisableDefaultCmd = true

	f := root.PersistentFlags()
	f.StringVar(&a.addr, "addr", "", "admin address host:port of the daemon (default $"+envAddr+", else "+addrDefault+")")
	f.StringVar(&a.token, "token", "", "bearer token (default $"+envToken+")")
	f.BoolVar(&a.tls, "tls", false, "use TLS (implied by --ca-file, --cert-file, --key-file)")
	f.StringVar(&a.caFile, "ca-file", "", "PEM CA bundle to verify the daemon's certificate (default: system roots)")
	f.StringVar(&a.certFile, "cert-file", "", "PEM client certificate, for mTLS")
	f.StringVar(&a.keyFile, "key-file", "", "PEM client key, for mTLS")
	f.StringVar(&a.serverName, "server-name", "", "name to verify the daemon's certificate against (default: host of --addr)")
	f.DurationVar(&a.timeout, "timeout", timeoutDefault, "deadline of each call")
	f.StringVarP(&a.output, "output", "o", "table", "output format: table or json")

	return group(root,
		newServicesCmd(a),
		newPoolsCmd(a),
		newDelaysCmd(a),
		newPoolCmd(a),
		newLookupCmd(a),
		newHorizonCmd(a),
		newPurgeCmd(a),
		newFailedCmd(a),
		newReloadCmd(a),
		newReplayCmd(a),
		newFailuresCmd(a),
		newPauseAllCmd(a),
		newResumeAllCmd(a),
	)
}

// group completes cmd as a command that only groups subcommands: it takes
// no argument of its own, and run alone it is a usage error (exit 2)
// naming the command, rather than cobra's help on stdout with exit 0.
func group(cmd *cobra.Command, subcommands ...*cobra.Command) *cobra.Command {
	cmd.Args = cobra.NoArgs
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return usagef("%s needs a subcommand", cmd.CommandPath())
	}
	cmd.AddCommand(subcommands...)
	return cmd
}
