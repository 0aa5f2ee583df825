package daemon

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/try"
)

// TryTimeoutDefault bounds a whole `platformd try` (a handler waiting on a
// lock, or a remote handler that never answers, ends it).
const TryTimeoutDefault = time.Minute

// tryOptions are the flags of `platformd try`.
type tryOptions struct {
	handler, pool, event, failure, output *string
	attempt                               *int
	ignoreProcessed                       *bool
	timeout                               *time.Duration
}

// tryFlags declares try's flags on fs.
func tryFlags(fs *flag.FlagSet) tryOptions {
	return tryOptions{
		handler: fs.String("handler", "", "try: the handler to run (NAME, or NAME,NAME... run in that order)"),
		pool:    fs.String("pool", "", "try: the pool whose view to take (queue, retry delays); without -handler, run its handlers"),
		attempt: fs.Int("attempt", 0, "try -event: the event's attempt (0: its first delivery)"),
		event:   fs.String("event", "", "try: a file holding the event's envelope (JSON), - for stdin"),
		failure: fs.String("failure", "", "try: the id of a stored failure (platform.failed_event) whose body to run"),
		output:  fs.String("o", "text", "try: output, text or json"),
		ignoreProcessed: fs.Bool("ignore-processed", false,
			"try: run the handler even when the event is in processed_event (its row is deleted inside the rolled-back transaction)"),
		timeout: fs.Duration("timeout", TryTimeoutDefault, "try: bound of the whole try"),
	}
}

// check returns what is wrong with the flags, "" when nothing is.
func (o tryOptions) check(peLayout string) string {
	switch {
	case peLayout != "":
		return "-processed-event is migrate's flag"
	case *o.handler == "" && *o.pool == "":
		return "-handler (or -pool) is required"
	case *o.attempt < 0 || (*o.attempt > 0 && *o.failure != ""):
		return "-attempt is a count (0 or more), with -event only: a stored failure's retry starts again at 0"
	case (*o.event == "") == (*o.failure == ""):
		return "give one of -event FILE|- and -failure ID"
	case *o.output != "text" && *o.output != "json":
		return fmt.Sprintf("-o is text or json, not %q", *o.output)
	case *o.timeout <= 0:
		return "-timeout must be positive"
	}
	if *o.failure != "" {
		if _, err := uuid.Parse(*o.failure); err != nil {
			return fmt.Sprintf("-failure %q is not a failure id (a UUID)", *o.failure)
		}
	}
	return ""
}

// runTry runs `platformd try` and returns its exit code.
func runTry(cfg *config.Config, reg *consumer.Registry, o tryOptions, service string, stdin io.Reader, stdout, stderr io.Writer) int {
	p := try.Params{Config: cfg, Registry: reg, Service: service, Pool: *o.pool, Attempt: *o.attempt, IgnoreProcessed: *o.ignoreProcessed}
	if *o.handler != "" {
		p.Handlers = strings.Split(*o.handler, ",")
	}
	switch {
	case *o.failure != "":
		p.FailureID = uuid.MustParse(*o.failure) // checked by check
	case *o.event == "-":
		body, err := io.ReadAll(stdin)
		if err != nil {
			fmt.Fprintf(stderr, "platformd try: read the event from stdin: %v\n", err)
			return 2
		}
		p.Body = body
	default:
		body, err := os.ReadFile(*o.event)
		if err != nil {
			fmt.Fprintf(stderr, "platformd try: %v\n", err)
			return 2
		}
		p.Body = body
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *o.timeout)
	defer cancel()
	rep, err := try.Run(ctx, p)
	if err != nil {
		fmt.Fprintf(stderr, "platformd %v\n", err)
		return 2
	}
	write := rep.WriteText
	if *o.output == "json" {
		write = rep.WriteJSON
	}
	if err := write(stdout); err != nil {
		fmt.Fprintf(stderr, "platformd %v\n", err)
		return 2
	}
	return rep.ExitCode()
}
