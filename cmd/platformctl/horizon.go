package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
)

// newHorizonAdviseCmd returns "platformctl horizon advise".
func newHorizonAdviseCmd(a *app) *cobra.Command {
	var (
		window        string
		ignoreArchive bool
	)
	cmd := &cobra.Command{
		Use:   "advise SERVICE",
		Short: "Advise a service's horizon from the duplicates it saw, the archives reaching it and what processed_event costs",
		Long: `Advise a service's replay horizon from evidence: the ages of the
duplicates its pools skipped (p99, p99.9 and max, by source: redelivery,
republish, replay) in the window, the beyond_horizon failures in it, the
producers' archives that reach its pools (a replay can go that far back),
processed_event's rows, bytes and rows per day, and an advised horizon with
its cost and the reasons. --window takes days (30d) or Go syntax (720h);
default 30d. --ignore-archive leaves the archives out of the advice.`,
		Example: "  platformctl horizon advise stock\n  platformctl horizon advise stock --window 7d -o json",
		Args:    cobra.ExactArgs(1),
		RunE: call(a, adminv1.AdminServiceClient.AdviseHorizon,
			func(args []string) (*adminv1.AdviseHorizonRequest, error) {
				req := &adminv1.AdviseHorizonRequest{Service: args[0], IgnoreArchive: ignoreArchive}
				if window != "" {
					d, err := parseDays(window)
					if err != nil {
						return nil, invalidf("window %q: %v", window, err)
					}
					req.Window = durationpb.New(d)
				}
				return req, nil
			},
			func(w io.Writer, resp *adminv1.AdviseHorizonResponse) { adviceTable(w, resp.GetAdvice()) }),
	}
	cmd.Flags().StringVar(&window, "window", "", "how far back to read the evidence (e.g. 30d, 72h; default 30d)")
	cmd.Flags().BoolVar(&ignoreArchive, "ignore-archive", false, "leave the producers' archives out of the advised horizon")
	return cmd
}

// parseDays parses "30d" (whole days) or a Go duration.
func parseDays(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil {
			return 0, fmt.Errorf("want whole days (30d) or a Go duration (720h)")
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

// adviceTable prints a horizon advice: the advice, the duplicate ages by
// source, the archives reaching the service, then the reasons.
func adviceTable(w io.Writer, a *adminv1.HorizonAdvice) {
	row(w, "SERVICE", "HORIZON", "ADVISED", "ADVISED_ROWS", "ADVISED_BYTES", "ROWS", "BYTES", "ROWS_PER_DAY", "BEYOND_HORIZON", "WINDOW")
	row(w, a.GetService(), formatDuration(a.GetHorizon()), formatDuration(a.GetAdvised()),
		strconv.FormatInt(a.GetAdvisedRows(), 10), strconv.FormatInt(a.GetAdvisedBytes(), 10),
		strconv.FormatInt(a.GetProcessedEventRows(), 10), strconv.FormatInt(a.GetProcessedEventBytes(), 10),
		strconv.FormatFloat(a.GetRowsPerDay(), 'f', 0, 64), strconv.FormatInt(a.GetBeyondHorizon(), 10), formatDuration(a.GetWindow()))
	row(w)
	row(w, "SOURCE", "COUNT", "P99", "P99.9", "MAX")
	for _, s := range a.GetSources() {
		row(w, s.GetSource(), strconv.FormatInt(s.GetCount(), 10), roundDuration(s.GetP99()), roundDuration(s.GetP999()), roundDuration(s.GetMax()))
	}
	if len(a.GetArchives()) > 0 {
		row(w)
		row(w, "PRODUCER", "ARCHIVE", "POOLS")
		for _, r := range a.GetArchives() {
			row(w, r.GetProducer(), formatDuration(r.GetArchive()), strings.Join(r.GetPools(), ","))
		}
	}
	row(w)
	row(w, "REASONS")
	for _, r := range a.GetReasons() {
		row(w, oneLine(r))
	}
}

// roundDuration formats d to the second (to the millisecond under one).
func roundDuration(d *durationpb.Duration) string {
	if d == nil {
		return "-"
	}
	v := d.AsDuration()
	if v < time.Second {
		return v.Round(time.Millisecond).String()
	}
	return v.Round(time.Second).String()
}
